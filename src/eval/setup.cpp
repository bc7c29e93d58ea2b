// The evaluation setup (made on rank 0, shared as JSON) and the classifier's setup. Not the
// stages (eval/classify_task.cpp) nor their scheduling over ranks (eval/pipeline.cpp).
#include "eval/setup.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "data/holdout.h"
#include "data/image.h"
#include "io/checkpoint.h"
#include "models/registry.h"

namespace mpicnn::eval {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string auto_split(const std::string& kind, const std::string& path) {
  std::error_code ec;
  if (kind == "imagefolder") {
    for (const char* s : {"train", "test", "val"})
      if (fs::is_directory(fs::path(path) / s, ec)) return "test";
    return "all";
  }
  if (kind == "csv" && fs::is_regular_file(path, ec)) {
    std::ifstream in(path);
    std::string header;
    std::getline(in, header);
    size_t start = 0;
    while (start <= header.size()) {
      size_t end = header.find(',', start);
      if (end == std::string::npos) end = header.size();
      std::string field = header.substr(start, end - start);
      field.erase(0, field.find_first_not_of(" \t\r\""));
      field.erase(field.find_last_not_of(" \t\r\"") + 1);
      if (field == "split") return "test";
      start = end + 1;
    }
    return "all";
  }
  return "test";
}

namespace {

// With --weights, the recipe ./train would have recorded for this data and channel count
// (data::default_preprocess at the model's default size); on image files that is torchvision's
// eval recipe. Flags override it afterwards, as they override a checkpoint's.
data::Preprocess default_recipe(const std::string& kind, int channels, const data::Dataset& d,
                                const ModelSpec& spec) {
  data::PreprocessQuery q;
  q.kind = kind;
  q.channels = channels;
  q.data_height = d.height();
  q.data_width = d.width();
  q.default_size = spec.default_size;
  return data::default_preprocess(q).eval;
}

void from_checkpoint(const EvalOptions& o, EvalSetup& p) {
  const CheckpointPaths ck = resolve_checkpoint(o.checkpoint);
  const TrainerState st = read_trainer_state(ck.trainer);
  const InputRecord& in = st.input;
  CHECK(!in.geometry.empty(), "--checkpoint: ", ck.trainer,
        " does not record the model's input (an older ./train wrote it); evaluate it with --weights ",
        ck.model, " --model ", st.model, " and --image-size, --resize, --mean, --std");
  p.model = st.model;
  p.weights_file = ck.model;
  p.weights = ck.dir;
  p.in_channels = in.channels;
  p.class_names = in.class_names;
  p.num_classes = int(in.class_names.size());
  data::Preprocess& pre = p.preprocess;
  pre.geometry = data::parse_geometry(in.geometry, ck.trainer + ": input");
  pre.channels = in.channels;
  pre.height = in.height;
  pre.width = in.width;
  pre.resize = in.resize;
  pre.mean = in.mean;
  pre.stddev = in.stddev;
}

void from_weights(const EvalOptions& o, EvalSetup& p) {
  const ModelSpec& spec = model_spec(o.model);
  std::error_code ec;
  CHECK(fs::is_regular_file(o.weights, ec), "--weights: ", o.weights, " is not a file");
  p.model = spec.name;
  p.weights_file = p.weights = o.weights;
  p.in_channels = o.in_channels > 0 ? o.in_channels : 3;
  p.num_classes = o.num_classes;  // 0 until the dataset says
}

// A class name as a key that survives export_images' folder naming ("0_T-shirt_top" for
// "T-shirt/top"): lower case, a leading "<digits>_" dropped, each other character but letters
// and digits made '_'.
// Empty for a bare number (an unnamed class: CSV labels, plain IDX), which matches anything.
std::string class_key(const std::string& name) {
  size_t i = 0;
  while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i]))) ++i;
  if (i == name.size()) return "";
  std::string key = i > 0 && name[i] == '_' ? name.substr(i + 1) : name;
  for (char& c : key) c = std::isalnum(static_cast<unsigned char>(c)) ? char(std::tolower(c)) : '_';
  return key;
}

// The data's labels must mean the checkpoint's classes: a 5-class subset of other classes
// would otherwise be scored against the wrong outputs and report a meaningless accuracy.
void check_class_names(const std::vector<std::string>& model, const data::Dataset& d) {
  const std::vector<std::string>& data = d.class_names();
  for (size_t c = 0; c < data.size() && c < model.size(); ++c) {
    const std::string a = class_key(data[c]), b = class_key(model[c]);
    CHECK(a.empty() || b.empty() || a == b, "-d: ", d.describe(), ": class ", c, " is '", data[c],
          "', the checkpoint's class ", c, " is '", model[c], "' (evaluate on data with the run's classes)");
  }
}

}  // namespace

EvalSetup make_setup(const EvalOptions& o, std::unique_ptr<data::Dataset>& dataset) {
  EvalSetup p;
  p.batch_size = o.batch_size;
  if (!o.checkpoint.empty())
    from_checkpoint(o, p);
  else
    from_weights(o, p);

  data::DatasetSpec ds;
  ds.kind = o.dataset;
  ds.path = o.data;
  ds.synthetic.seed = o.synthetic_seed;
  const std::string kind = ds.kind == "auto" ? data::detect_dataset_kind(ds.path) : ds.kind;
  ds.split = o.split == "auto" ? auto_split(kind, ds.path) : o.split;
  dataset = data::open_dataset(ds);
  if (o.val_held_out > 0) {  // the run's validation split, drawn again as ./train drew it
    const std::vector<uint64_t> held = data::holdout_indices(*dataset, o.val_fraction, o.val_seed);
    CHECK(held.size() == o.val_held_out, "--checkpoint: the run held out ", o.val_held_out,
          " validation images of ", ds.path, ", which now yields ", held.size(),
          " (the data changed); pass -d/--data PATH to name the data");
    dataset = data::subset_dataset(*dataset, held);
  }
  const data::Dataset& d = *dataset;
  const ModelSpec& spec = model_spec(p.model);
  if (o.checkpoint.empty()) p.preprocess = default_recipe(kind, p.in_channels, d, spec);

  // Preprocessing flags override the recorded or default recipe. A new size or resize means
  // torchvision's Resize + CenterCrop, whatever the recipe was.
  data::Preprocess& pre = p.preprocess;
  if (o.image_size > 0 || o.resize >= 0) {
    const bool was_crop = pre.geometry == data::Geometry::ResizeCenterCrop;
    if (o.image_size > 0) pre.height = pre.width = o.image_size;
    pre.geometry = data::Geometry::ResizeCenterCrop;
    pre.resize = o.resize >= 0 ? o.resize
                 : was_crop && o.image_size == 0 ? pre.resize
                                                 : data::eval_resize(pre.height);
  }
  if (!o.mean.empty()) pre.mean = o.mean;
  if (!o.std.empty()) pre.stddev = o.std;
  CHECK(std::min(pre.height, pre.width) >= spec.min_size, "--image-size: ", pre.height, "x", pre.width,
        " is below ", spec.name, "'s smallest input ", spec.min_size);
  (void)data::Transform(pre);  // validates: errors say what is wrong with the recipe

  const int data_classes = d.num_classes();
  if (p.num_classes == 0) p.num_classes = data_classes;
  CHECK(data_classes <= p.num_classes, "-d: ", d.describe(), "; the model has only ", p.num_classes,
        (o.checkpoint.empty() ? " (--num-classes)" : " (the checkpoint's)"));
  if (!o.checkpoint.empty()) check_class_names(p.class_names, d);
  if (p.class_names.empty()) {
    p.class_names = d.class_names();
    for (int c = data_classes; c < p.num_classes; ++c) p.class_names.push_back(std::to_string(c));
  }
  p.dataset = d.describe();
  p.count = o.limit > 0 ? std::min<uint64_t>(o.limit, d.size()) : d.size();
  CHECK(p.count > 0, "-d: ", p.dataset, " holds no samples");
  p.raw_channels = d.channels();
  p.raw_height = d.height();
  p.raw_width = d.width();
  return p;
}

std::string setup_to_json(const EvalSetup& p) {
  const data::Preprocess& pre = p.preprocess;
  return json{{"task", task_name(p.task)},
              {"model", p.model},
              {"num_classes", p.num_classes},
              {"in_channels", p.in_channels},
              {"weights_file", p.weights_file},
              {"weights", p.weights},
              {"geometry", data::geometry_name(pre.geometry)},
              {"channels", pre.channels},
              {"height", pre.height},
              {"width", pre.width},
              {"resize", pre.resize},
              {"mean", pre.mean},
              {"std", pre.stddev},
              {"classes", p.class_names},
              {"dataset", p.dataset},
              {"count", p.count},
              {"raw", {p.raw_channels, p.raw_height, p.raw_width}},
              {"batch_size", p.batch_size},
              {"detector", p.detector}}
      .dump();
}

EvalSetup setup_from_json(const std::string& text) {
  const json j = json::parse(text);
  EvalSetup p;
  p.task = parse_task(j["task"].get<std::string>()).value();
  p.model = j["model"];
  p.num_classes = j["num_classes"];
  p.in_channels = j["in_channels"];
  p.weights_file = j["weights_file"];
  p.weights = j["weights"];
  data::Preprocess& pre = p.preprocess;
  pre.geometry = data::parse_geometry(j["geometry"], "setup");
  pre.channels = j["channels"];
  pre.height = j["height"];
  pre.width = j["width"];
  pre.resize = j["resize"];
  pre.mean = j["mean"].get<std::vector<float>>();
  pre.stddev = j["std"].get<std::vector<float>>();
  p.class_names = j["classes"].get<std::vector<std::string>>();
  p.dataset = j["dataset"];
  p.count = j["count"];
  p.raw_channels = j["raw"][0];
  p.raw_height = j["raw"][1];
  p.raw_width = j["raw"][2];
  p.batch_size = j["batch_size"];
  p.detector = j["detector"];
  return p;
}

}  // namespace mpicnn::eval
