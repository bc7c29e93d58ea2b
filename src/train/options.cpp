// `./train` option parsing: Boost.ProgramOptions does the tokenising (command line and config
// file); every value is taken as a string and converted here, so each bad value gets one line
// naming the flag (or file:line: key) and what is accepted. Not the trainer and not its main.
// Over 500 lines: ./train's whole flag table (about 70 flags with their help texts) is a third
// of it, and each flag's conversion, cross-checks and to_config line are here beside it.
#include "train/options.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>

#include "core/check.h"
#include "core/text.h"
#include "core/cli.h"
#include "core/gpu.h"
#include "data/dataset.h"
#include "data/registry.h"
#include "detect/faster_rcnn.h"
#include "models/registry.h"
#include "optim/schedule.h"

namespace mpicnn::train {

namespace po = boost::program_options;
using cli::Given;
using cli::to_bool;
using cli::to_choice;
using cli::to_double;
using cli::to_float_list;
using cli::to_int;
using cli::to_uint64;

namespace {

// --dataset's help, from the registry: "auto, fashion-mnist, ..., synthetic, or voc or coco
// (--task detection); ...".
const char* dataset_help() {
  static const std::string help = [] {
    std::string classify = "auto", detection;
    for (const data::DatasetKind& k : data::dataset_kinds()) {
      if (k.task == Task::Classify) classify += ", " + k.name;
      else detection += (detection.empty() ? "" : " or ") + k.name;
    }
    return classify + ", or " + detection + " (--task detection); auto detects the format from "
           "--data. Without --data and --dataset: fashion-mnist; with --data only: auto";
  }();
  return help.c_str();
}

const cli::Program& program() {
  static const cli::Program p{"./train", {
      {"model", "m", "NAME", cli::Kind::Value, "model to train (see the list below)"},
      {"data", "d", "PATH", cli::Kind::Value,
       "dataset path: IDX folder, image folder (class subfolders, optional train/ and test/), "
       "CSV file, CIFAR binary folder; fashion-mnist defaults to the Debian package's files"},
      {"dataset", "", "KIND", cli::Kind::Value, dataset_help()},
      {"task", "", "NAME", cli::Kind::Value,
       "classify, or detection: Faster R-CNN (--model fasterrcnn_resnet18_fpn, "
       "fasterrcnn_resnet34_fpn or fasterrcnn_resnet50_fpn) on -d PATH: a Pascal VOC folder "
       "(images/ + annotations/, or JPEGImages/ + Annotations/), a COCO instances .json (images "
       "in its folder) or a folder holding one, or a folder holding train/ and test/ such sets; "
       "its defaults: -b 2, -lr 0.01, --weight-decay 1e-4, --augment flip"},
      {"val-split", "", "F", cli::Kind::Value,
       "data without a test split (an image folder without train/ and test/, a CSV without a "
       "split column): hold out this fraction, in [0, 1), of each class as the validation "
       "split (round(F x class size), at least 1 of a class with >= 2 images, drawn from --seed, "
       "never trained on); 0 = no hold-out (then only --eval-every 0 trains such data). "
       "Ignored when the data has a test split or --test-data is given; a resume keeps it"},
      {"test-data", "", "PATH", cli::Kind::Value,
       "a separate evaluation set in any supported format (kind auto-detected; its test split "
       "if it has one, else all of it) instead of the data's test split; its class names must "
       "match the training data's"},
      {"batch-size", "b", "N", cli::Kind::Value, "images per step on each rank (>= 1)"},
      {"epochs", "e", "N", cli::Kind::Value, "passes over the training data (>= 1)"},
      {"learning-rate", "lr", "LR", cli::Kind::Value,
       "base learning rate (> 0); also -lr LR or -lr=LR"},
      {"momentum", "", "M", cli::Kind::Value, "SGD momentum, in [0, 1); AdamW ignores it"},
      {"weight-decay", "", "WD", cli::Kind::Value, "L2 penalty (SGD) or decoupled decay (AdamW), >= 0"},
      {"optimizer", "", "NAME", cli::Kind::Value, "sgd or adamw"},
      {"nesterov", "", "[=BOOL]", cli::Kind::Switch, "Nesterov momentum (SGD with momentum > 0)"},
      {"schedule", "", "SPEC", cli::Kind::Value,
       "learning-rate schedule: constant | step:SIZE:GAMMA | multistep:M1,M2,...:GAMMA | "
       "cosine[:ETA_MIN], optionally after warmup:W[:START]+ (e.g. step:30:0.1, "
       "warmup:5+cosine); epochs count after the warmup"},
      {"warmup-epochs", "", "N", cli::Kind::Value,
       "linear warmup epochs before the schedule (>= 0; same as a warmup:N+ prefix)"},
      {"scale-lr", "", "[=BOOL]", cli::Kind::Switch,
       "linear scaling rule: lr x global batch (batch-size x ranks) / 256"},
      {"workers", "w", "N", cli::Kind::Value, "data loader threads per rank (>= 0; 0 = none)"},
      {"mean", "", "LIST", cli::Kind::Value,
       "normalisation means per channel, e.g. 0.485,0.456,0.406 (empty = the dataset's)"},
      {"std", "", "LIST", cli::Kind::Value,
       "normalisation standard deviations per channel, > 0 (empty = the dataset's)"},
      {"augment", "", "NAME", cli::Kind::Value,
       "training augmentation: none, flip (horizontal), crop-flip (padded random crop + flip, "
       "CIFAR style) or imagenet (random resized crop + flip)"},
      {"image-size", "", "N", cli::Kind::Value,
       "model input height and width; 0 = the dataset's size for fixed-size datasets, else "
       "the model's default size"},
      {"in-channels", "", "N", cli::Kind::Value,
       "model input channels: 1 (every image converted to gray with PIL's convert(\"L\") "
       "rule, e.g. grayscale image folders) or 3 (gray images replicated); 0 = the data's own "
       "(IDX 1, CIFAR 3, image folders and CSV sets 3, as torchvision's loader)"},
      {"skip-bad", "", "[=BOOL]", cli::Kind::Switch,
       "skip images that cannot be read or decoded (counted and reported) instead of stopping"},
      {"distribute-data", "", "[=BOOL]", cli::Kind::Switch,
       "split each epoch's data between the ranks; --distribute-data=false: every rank trains "
       "on the whole dataset"},
      {"min-size", "", "N", cli::Kind::Value,
       "detection: images are resized so that their shorter side is N (>= 32) ..."},
      {"max-size", "", "N", cli::Kind::Value,
       "detection: ... unless their longer side would pass N (>= min-size)"},
      {"trainable-layers", "", "N", cli::Kind::Value,
       "detection: backbone stages that train, 0-5, from layer4 down to conv1 (torchvision's "
       "trainable_backbone_layers; default 3 with --init-weights, whose BatchNorm stays frozen; "
       "from random weights every stage trains, with ordinary BatchNorm, as torchvision does)"},
      {"box-batch-size-per-image", "", "N", cli::Kind::Value,
       "detection: RoIs sampled per image for the box head's loss (torchvision's "
       "box_batch_size_per_image); the head's cost in training is proportional to it"},
      {"rpn-post-nms-top-n-test", "", "N", cli::Kind::Value,
       "detection: proposals kept per image when evaluating (torchvision's "
       "rpn_post_nms_top_n_test); the head's cost in evaluation is proportional to it"},
      {"init-weights", "", "PATH", cli::Kind::Value,
       "fine-tuning: start from these weights, a safetensors state dict with torchvision names "
       "(data_tools/export_torchvision.py) or a run directory / checkpoint of ours; every tensor "
       "must match by name and shape, except the classifier (the model's head), which a new class "
       "count re-initialises. A resume keeps its checkpoint's weights instead"},
      {"init-weights-partial", "", "NAMES", cli::Kind::Value,
       "comma list of tensor names or prefixes that --init-weights may lack or hold with "
       "another shape (they keep their fresh initialisation), or hold when the model lacks them"},
      {"freeze", "", "PREFIXES", cli::Kind::Value,
       "comma list of parameter-name prefixes to freeze (e.g. conv1,bn1,layer1): no gradient, "
       "no update, no allreduce for them; each must match a parameter"},
      {"freeze-backbone", "", "[=BOOL]", cli::Kind::Switch,
       "freeze every parameter except the classifier (the model's head)"},
      {"freeze-bn", "", "[=BOOL]", cli::Kind::Switch,
       "every BatchNorm normalises with its running statistics and keeps them during training "
       "(eval-mode normalisation); its weight and bias still train unless frozen"},
      {"head-lr-mult", "", "X", cli::Kind::Value,
       "the classifier's (the model's head's) learning rate is lr x X (> 0); schedules apply on top"},
      {"save-dir", "s", "DIR", cli::Kind::Value, "run directory (default: runs/<model>-<timestamp>)"},
      {"resume", "", "PATH", cli::Kind::Value, "continue from a checkpoint or a run directory's latest"},
      {"seed", "", "N", cli::Kind::Value, "seed of every random draw (>= 0)"},
      {"threads", "", "N", cli::Kind::Value,
       "compute threads per rank (>= 0; 0 = the CPUs the node's ranks may use / ranks on the node, "
       "at most the rank's own CPUs)"},
      {"eval-every", "", "N", cli::Kind::Value, "evaluate on the test split every N epochs (0 = never)"},
      {"checkpoint-every", "", "N", cli::Kind::Value,
       "checkpoint every N epochs (0 = only at the end)"},
      {"keep-checkpoints", "", "N", cli::Kind::Value, "newest checkpoints kept (0 = all)"},
      {"progress", "", "MODE", cli::Kind::Value,
       "auto (a bar when the output reaches a terminal: under mpiexec, mpiexec's own; plain "
       "lines in batch logs and redirected output), bar, plain or none (no progress lines; the "
       "closing done: line still gives the result)"},
      {"check-sync", "", "N", cli::Kind::Value,
       "every N steps check that all ranks hold the same weights (0 = off)"},
      {"bucket-mb", "", "MB", cli::Kind::Value,
       "gradient allreduce bucket size in MiB (> 0), or 0: an eighth of the model's gradient, "
       "between 64 KiB and 25 MiB (small buckets let communication start early in backward)"},
      {"overlap", "", "MODE", cli::Kind::Value,
       "how gradient allreduces overlap backward: thread (a progress thread drives them while "
       "backward computes; needed over TCP), hooks (MPI tests between layers) or off (one "
       "allreduce after backward)"},
      {"allreduce", "", "ALGO", cli::Kind::Value,
       "ring (all ranks in one allreduce), hierarchical (reduce inside each node, allreduce "
       "among one rank per node, broadcast back) or auto (hierarchical when every node runs "
       "several ranks of a multi-node job)"},
      {"grad-compression", "", "FMT", cli::Kind::Value,
       "none, fp16 or bf16: gradients cast to 16 bits for the allreduce (half the bytes on the "
       "network), back to fp32 after"},
      {"timeout", "", "SECONDS", cli::Kind::Value,
       "a rank that waits on another rank (a collective, a gradient allreduce) for longer ends "
       "the job with one line naming the rank, the operation and the time waited (>= 0; 0 = "
       "never)"},
      {"device", "", "NAME", cli::Kind::Value,
       "auto (the GPU when this build has CUDA and one is visible), cpu or cuda (one GPU per "
       "rank: node-local rank modulo the visible GPUs)"},
      {"precision", "", "P", cli::Kind::Value,
       "GPU math: auto (tf32), fp32, tf32, bf16 or fp16 (with dynamic loss scaling); weights "
       "and activations stay fp32; the CPU computes in fp32 only"},
      {"deterministic", "", "[=BOOL]", cli::Kind::Switch,
       "GPU: deterministic cuDNN algorithms only (bit-identical reruns, maybe slower)"},
      {"config", "", "FILE", cli::Kind::Value,
       "read options from FILE (format below); command-line values override the file's"},
      {"help", "h", "", cli::Kind::Help, "print this help and exit"},
  }, ""};
  return p;
}


std::string file_keys() {
  std::string keys;
  const po::options_description file_options = cli::describe(program(), true);
  for (const auto& d : file_options.options())
    keys += (keys.empty() ? "" : ", ") + d->long_name();
  return keys;
}

// The 1-based line of `key = ...` in a config file's text; 0 when not found (e.g. in a section).
int key_line(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const size_t b = line.find_first_not_of(" \t");
    if (b == std::string::npos || line.compare(b, key.size(), key) != 0) continue;
    const size_t e = line.find_first_not_of(" \t", b + key.size());
    if (e != std::string::npos && line[e] == '=') return n;
  }
  return 0;
}

struct ConfigFile {
  std::string path, text;
  po::variables_map vm;
};

ConfigFile read_config(const std::string& path) {
  ConfigFile cf;
  cf.path = path;
  std::ifstream in(path, std::ios::binary);
  CHECK(in.is_open(), "--config: cannot read '", path, "' (", std::strerror(errno), ")");
  std::ostringstream ss;
  ss << in.rdbuf();
  CHECK(!in.bad(), "--config: cannot read '", path, "'");
  cf.text = ss.str();
  std::istringstream text(cf.text);
  try {
    po::store(po::parse_config_file(text, cli::describe(program(), true), false), cf.vm);
  } catch (const po::unknown_option& e) {
    const std::string key = e.get_option_name();
    const int line = key_line(cf.text, key);
    FAIL(path, line ? ":" + std::to_string(line) : std::string(), ": unknown key '", key,
         "' (keys are the long option names: ", file_keys(), ")");
  } catch (const po::invalid_config_file_syntax& e) {
    // Not e.what(): Boost substitutes the line for "%invalid_line%" in its message until none
    // is left, so a line holding that text never finishes (found by tests/fuzz).
    std::string bad = e.tokens();
    if (bad.size() > 80) bad = bad.substr(0, 77) + "...";
    FAIL(path, ": '", bad, "' is not a 'key = value' line (expected 'key = value' lines and # comments)");
  } catch (const po::error& e) {
    FAIL(path, ": ", e.what(), " (expected 'key = value' lines and # comments)");
  }
  return cf;
}

// Command-line values first, then the config file's, then the base configuration's (a resumed
// checkpoint's recorded options).
class Values {
 public:
  Values(const po::variables_map& cmd, const ConfigFile* file, const Config* base, std::string base_name)
      : cli_(cmd), file_(file), base_(base), base_name_(std::move(base_name)) {}

  std::optional<cli::Given> get(const std::string& key) const {
    const cli::OptionDef& d = cli::find_option(program(), key);
    if (cli_.count(key)) return cli::Given{cli_[key].as<std::string>(), cli::flag_name(d)};
    if (file_ && file_->vm.count(key)) {
      const int line = key_line(file_->text, key);
      return cli::Given{file_->vm[key].as<std::string>(),
                   file_->path + (line ? ":" + std::to_string(line) : std::string()) + ": " + key};
    }
    if (base_) {
      const auto it = base_->find(key);
      if (it != base_->end()) return cli::Given{it->second, base_name_ + ": " + key};
    }
    return std::nullopt;
  }
  // The label for errors about a value that may be the default.
  std::string label(const std::string& key) const {
    const auto g = get(key);
    return g ? g->label : cli::flag_name(cli::find_option(program(), key));
  }

 private:
  const po::variables_map& cli_;
  const ConfigFile* file_;
  const Config* base_;
  std::string base_name_;
};

// A comma list of parameter names or prefixes ("conv1,bn1,layer1"); empty = none. Empty items
// and whitespace are errors naming the flag.
std::vector<std::string> to_name_list(const Given& g) {
  std::vector<std::string> out;
  if (g.value.empty()) return out;
  std::stringstream ss(g.value);
  std::string item;
  while (std::getline(ss, item, ',')) {
    CHECK(!item.empty() && item.find_first_of(" \t") == std::string::npos, g.label, ": '", g.value,
          "' is not a comma list of parameter names or prefixes (e.g. conv1,bn1,layer1)");
    out.push_back(item);
  }
  CHECK(g.value.back() != ',', g.label, ": '", g.value, "' ends with a comma");
  return out;
}

bool detection_kind(const std::string& kind) {
  const data::DatasetKind* k = data::find_dataset_kind(kind);
  return k && k->task == Task::Detection;
}

// --task detection: a VOC folder, a detector, sizes in order; the classifiers' options that
// mean nothing here are refused rather than ignored.
void check_detection_options(TrainOptions& o, const Values& v) {
  CHECK(!o.data.empty(), v.label("task"), " detection: needs -d/--data PATH, a Pascal VOC folder "
        "or a COCO instances JSON");
  CHECK(!v.get("dataset") || o.dataset == "auto" || detection_kind(o.dataset),
        v.label("dataset"), ": --task detection reads Pascal VOC folders (voc) or COCO JSON (coco), not ",
        o.dataset);
  if (!v.get("dataset")) o.dataset = "auto";
  if (!v.get("model")) o.model = "fasterrcnn_resnet50_fpn";
  CHECK(o.max_size >= o.min_size, v.label("max-size"), ": ", o.max_size, " is below --min-size ",
        o.min_size);
  if (!v.get("trainable-layers"))
    o.trainable_layers = o.init_weights.empty() ? 5 : 3;
  else
    CHECK(!o.init_weights.empty() || o.trainable_layers == 5, v.label("trainable-layers"), ": ",
          o.trainable_layers, " without --init-weights: from random weights every stage trains "
          "(torchvision's rule); freeze stages of pretrained weights only");
  CHECK(o.augment == "none" || o.augment == "flip", v.label("augment"), ": detection supports "
        "none or flip, not ", o.augment);
  // By value, not by presence: a resumed run's recorded configuration holds every key.
  const TrainOptions defaults;
  const std::pair<const char*, bool> unsupported[] = {
      {"scale-lr", o.scale_lr}, {"distribute-data", !o.distribute_data},
      {"check-sync", o.check_sync != 0}, {"workers", o.workers != defaults.workers},
      {"val-split", o.val_split != defaults.val_split},
      {"image-size", o.image_size != 0}, {"in-channels", o.in_channels != 0},
      {"mean", !o.mean.empty()}, {"std", !o.std.empty()}, {"freeze", !o.freeze.empty()},
      {"freeze-backbone", o.freeze_backbone}, {"freeze-bn", o.freeze_bn},
      {"init-weights-partial", !o.init_weights_partial.empty()},
      {"head-lr-mult", o.head_lr_mult != 1}, {"device", o.device == "cuda"},
      {"precision", o.precision != "auto" && o.precision != "fp32"}};
  for (const auto& [flag, given] : unsupported)
    CHECK(!given, v.label(flag), ": not supported with --task detection yet");
}

// The rules between options, once each option's own value is known: the data defaults, the
// image size against the model, Nesterov, warmup and the schedule. Errors name the option as
// `v` does (flag, or config file line).
void check_across_options(TrainOptions& o, const Values& v) {
  if (o.task == Task::Detection) {
    check_detection_options(o, v);
  } else {
    const TrainOptions defaults;
    const std::pair<const char*, bool> detection_only[] = {
        {"min-size", o.min_size != defaults.min_size}, {"max-size", o.max_size != defaults.max_size},
        {"trainable-layers", o.trainable_layers != defaults.trainable_layers},
        {"box-batch-size-per-image", o.box_batch_size_per_image != defaults.box_batch_size_per_image},
        {"rpn-post-nms-top-n-test", o.rpn_post_nms_top_n_test != defaults.rpn_post_nms_top_n_test}};
    for (const auto& [flag, given] : detection_only)
      CHECK(!given, v.label(flag), ": only with --task detection");
    CHECK(!detection_kind(o.dataset), v.label("dataset"), ": ", o.dataset,
          " needs --task detection");
  }
  // Fashion-MNIST is the default only when the user named no data at all; a path alone means
  // "detect its format". An empty --data= (as to_config writes for synthetic) counts as none.
  const bool data_given = !o.data.empty(), kind_given = v.get("dataset").has_value();
  if (!kind_given && o.task != Task::Detection) o.dataset = data_given ? "auto" : "fashion-mnist";
  if (!data_given) {
    const data::DatasetKind* k = data::find_dataset_kind(o.dataset);
    CHECK(k && (k->no_path || !k->default_path.empty()), v.label("dataset"), ": '", o.dataset,
          "' needs -d/--data PATH (only ", data::kinds_without_path(), " have no path)");
    o.data = k->default_path;
  }
  if (o.image_size > 0 && o.task != Task::Detection) {
    const ModelSpec& m = model_spec(o.model);
    CHECK(o.image_size >= m.min_size, v.label("image-size"), ": '", o.image_size,
          "' is below ", m.name, "'s smallest input (expected 0 = auto, or >= ", m.min_size, ")");
  }
  if (o.nesterov)
    CHECK(o.optimizer == "sgd" && o.momentum > 0, v.label("nesterov"),
          ": Nesterov momentum needs --optimizer sgd and --momentum > 0");
  CHECK(o.warmup_epochs == 0 || o.schedule.rfind("warmup", 0) != 0, v.label("warmup-epochs"),
        ": the schedule '", o.schedule, "' has its own warmup (use one of the two)");
  CHECK(o.init_weights_partial.empty() || !o.init_weights.empty(), v.label("init-weights-partial"),
        ": needs --init-weights FILE");
  try {
    (void)parse_lr_schedule(o.schedule_spec(), o.learning_rate, o.epochs);
  } catch (const Error& e) {
    FAIL(v.get("schedule") ? v.label("schedule") : v.label("warmup-epochs"), ": ", e.message());
  }
}

}  // namespace

std::vector<std::string> option_names() {
  std::vector<std::string> names;
  for (const cli::OptionDef& d : program().options) names.push_back(d.name);
  return names;
}

std::string TrainOptions::schedule_spec() const {
  return warmup_epochs > 0 ? "warmup:" + std::to_string(warmup_epochs) + "+" + schedule : schedule;
}

TrainOptions parse_train_options(const std::vector<std::string>& args) {
  return parse_train_options(args, nullptr, "");
}

TrainOptions parse_train_options(const std::vector<std::string>& args, const Config* base,
                                 const std::string& base_name) {
  const po::variables_map cmd = cli::parse_command_line(program(), args);
  TrainOptions o;
  if (cmd.count("help")) {
    o.help = true;  // the rest is not validated: --help must work whatever else is on the line
    return o;
  }
  std::optional<ConfigFile> file;
  if (cmd.count("config")) {
    o.config = cmd["config"].as<std::string>();
    file = read_config(o.config);
  }
  const Values v(cmd, file ? &*file : nullptr, base, base_name);
  auto set = [&](const char* key, auto& field, auto convert) {
    if (const auto g = v.get(key)) field = convert(*g);
  };
  auto text = [](const Given& g) { return g.value; };
  auto int_from = [](int64_t lo) { return [lo](const Given& g) { return to_int(g, lo); }; };
  auto int32_from = [](int64_t lo) { return [lo](const Given& g) { return cli::to_int32(g, lo); }; };

  // One set() per option, in help order: a flat table, kept in one piece so that each option's
  // conversion and accepted range read on one line.
  set("task", o.task, [](const Given& g) { return *parse_task(to_choice(g, task_names())); });
  const bool detection = o.task == Task::Detection;
  if (detection) {  // Faster R-CNN's defaults, before the options that may override them
    o.batch_size = 2;
    o.learning_rate = 0.01;
    o.weight_decay = 1e-4;
    o.augment = "flip";
  }
  set("model", o.model, [detection](const Given& g) {
    try {
      if (detection) {
        detect::detection_body(g.value);  // an Error naming the known detectors
        return g.value;
      }
      return model_spec(g.value).name;
    } catch (const Error& e) {
      FAIL(g.label, ": ", e.message());
    }
  });
  set("data", o.data, text);
  set("dataset", o.dataset, [](const Given& g) { return to_choice(g, data::dataset_choices()); });
  set("val-split", o.val_split, [](const Given& g) {
    return to_double(g, [](double x) { return x >= 0 && x < 1; }, "a fraction in [0, 1)");
  });
  set("test-data", o.test_data, text);
  set("batch-size", o.batch_size, int_from(1));
  set("epochs", o.epochs, int_from(1));
  set("learning-rate", o.learning_rate, [](const Given& g) {
    return to_double(g, [](double x) { return x > 0; }, "a number > 0");
  });
  set("momentum", o.momentum, [](const Given& g) {
    return to_double(g, [](double x) { return x >= 0 && x < 1; }, "a number in [0, 1)");
  });
  set("weight-decay", o.weight_decay, [](const Given& g) {
    return to_double(g, [](double x) { return x >= 0; }, "a number >= 0");
  });
  set("optimizer", o.optimizer, [](const Given& g) { return to_choice(g, {"sgd", "adamw"}); });
  set("nesterov", o.nesterov, to_bool);
  set("schedule", o.schedule, text);
  set("warmup-epochs", o.warmup_epochs, int_from(0));
  set("scale-lr", o.scale_lr, to_bool);
  set("workers", o.workers, int32_from(0));
  set("mean", o.mean, [](const Given& g) { return to_float_list(g, false); });
  set("std", o.std, [](const Given& g) { return to_float_list(g, true); });
  set("augment", o.augment,
      [](const Given& g) { return to_choice(g, {"none", "flip", "crop-flip", "imagenet"}); });
  set("image-size", o.image_size, int32_from(0));
  set("in-channels", o.in_channels, [](const Given& g) {
    const int64_t c = to_int(g, 0, 3);
    if (c == 2) bad(g, "0 (the data's own), 1 or 3 (grey or RGB input)");
    return int(c);
  });
  set("skip-bad", o.skip_bad, to_bool);
  set("distribute-data", o.distribute_data, to_bool);
  set("min-size", o.min_size, int32_from(32));
  set("max-size", o.max_size, int32_from(32));
  set("trainable-layers", o.trainable_layers, [](const Given& g) {
    const int n = cli::to_int32(g, 0);
    CHECK(n <= 5, g.label, ": '", g.value, "' is not in 0..5");
    return n;
  });
  set("box-batch-size-per-image", o.box_batch_size_per_image, int32_from(1));
  set("rpn-post-nms-top-n-test", o.rpn_post_nms_top_n_test, int32_from(1));
  set("init-weights", o.init_weights, text);
  set("init-weights-partial", o.init_weights_partial, to_name_list);
  set("freeze", o.freeze, to_name_list);
  set("freeze-backbone", o.freeze_backbone, to_bool);
  set("freeze-bn", o.freeze_bn, to_bool);
  set("head-lr-mult", o.head_lr_mult, [](const Given& g) {
    return to_double(g, [](double x) { return x > 0 && std::isfinite(x); }, "a number > 0");
  });
  set("save-dir", o.save_dir, text);
  set("resume", o.resume, text);
  set("seed", o.seed, to_uint64);
  set("threads", o.threads, int32_from(0));
  set("eval-every", o.eval_every, int_from(0));
  set("checkpoint-every", o.checkpoint_every, int_from(0));
  set("keep-checkpoints", o.keep_checkpoints, int32_from(0));
  set("progress", o.progress,
      [](const Given& g) { return to_choice(g, {"auto", "bar", "plain", "none"}); });
  set("check-sync", o.check_sync, int_from(0));
  set("bucket-mb", o.bucket_mb, [](const Given& g) {
    return to_double(g, [](double x) { return x >= 0 && x <= 1 << 20; }, "a number >= 0 (MiB; 0 = auto)");
  });
  set("overlap", o.overlap, [](const Given& g) { return to_choice(g, {"thread", "hooks", "off"}); });
  set("allreduce", o.allreduce,
      [](const Given& g) { return to_choice(g, {"ring", "hierarchical", "auto"}); });
  set("grad-compression", o.grad_compression,
      [](const Given& g) { return to_choice(g, {"none", "fp16", "bf16"}); });
  set("timeout", o.timeout, [](const Given& g) {
    return to_double(g, [](double x) { return x >= 0 && x <= 1e9; }, "a number of seconds >= 0 (0 = off)");
  });
  set("device", o.device, [](const Given& g) {
    if (g.value == "cuda" && !gpu::compiled_in()) FAIL(g.label, " cuda: ", gpu::unavailable_reason());
    return to_choice(g, {"auto", "cpu", "cuda"});
  });
  set("precision", o.precision,
      [](const Given& g) { return to_choice(g, {"auto", "fp32", "tf32", "bf16", "fp16"}); });
  set("deterministic", o.deterministic, to_bool);

  check_across_options(o, v);
  return o;
}

TrainOptions parse_train_options(int argc, const char* const* argv) {
  CHECK(argc >= 1 && argv != nullptr, "parse_train_options: argv must hold the program name");
  return parse_train_options(std::vector<std::string>(argv + 1, argv + argc));
}

std::map<std::string, std::string> to_config(const TrainOptions& o) {
  auto b = [](bool x) { return std::string(x ? "true" : "false"); };
  auto i = [](auto x) { return std::to_string(x); };
  return {
      {"task", task_name(o.task)},
      {"model", o.model},
      {"data", o.data},
      {"dataset", o.dataset},
      {"val-split", cli::format_double(o.val_split)},
      {"test-data", o.test_data},
      {"batch-size", i(o.batch_size)},
      {"epochs", i(o.epochs)},
      {"learning-rate", cli::format_double(o.learning_rate)},
      {"momentum", cli::format_double(o.momentum)},
      {"weight-decay", cli::format_double(o.weight_decay)},
      {"optimizer", o.optimizer},
      {"nesterov", b(o.nesterov)},
      {"schedule", o.schedule},
      {"warmup-epochs", i(o.warmup_epochs)},
      {"scale-lr", b(o.scale_lr)},
      {"workers", i(o.workers)},
      {"mean", cli::format_float_list(o.mean)},
      {"std", cli::format_float_list(o.std)},
      {"augment", o.augment},
      {"image-size", i(o.image_size)},
      {"in-channels", i(o.in_channels)},
      {"skip-bad", b(o.skip_bad)},
      {"distribute-data", b(o.distribute_data)},
      {"min-size", i(o.min_size)},
      {"max-size", i(o.max_size)},
      {"trainable-layers", i(o.trainable_layers)},
      {"box-batch-size-per-image", i(o.box_batch_size_per_image)},
      {"rpn-post-nms-top-n-test", i(o.rpn_post_nms_top_n_test)},
      {"init-weights", o.init_weights},
      {"init-weights-partial", join(o.init_weights_partial, ",")},
      {"freeze", join(o.freeze, ",")},
      {"freeze-backbone", b(o.freeze_backbone)},
      {"freeze-bn", b(o.freeze_bn)},
      {"head-lr-mult", cli::format_double(o.head_lr_mult)},
      {"save-dir", o.save_dir},
      {"resume", o.resume},
      {"seed", i(o.seed)},
      {"threads", i(o.threads)},
      {"eval-every", i(o.eval_every)},
      {"checkpoint-every", i(o.checkpoint_every)},
      {"keep-checkpoints", i(o.keep_checkpoints)},
      {"progress", o.progress},
      {"check-sync", i(o.check_sync)},
      {"bucket-mb", cli::format_double(o.bucket_mb)},
      {"overlap", o.overlap},
      {"allreduce", o.allreduce},
      {"grad-compression", o.grad_compression},
      {"timeout", cli::format_double(o.timeout)},
      {"device", o.device},
      {"precision", o.precision},
      {"deterministic", b(o.deterministic)},
  };
}

std::string train_help() {
  // Defaults shown are the parser's own (parsing no arguments), so the help cannot drift.
  const std::map<std::string, std::string> defaults = to_config(parse_train_options({}));
  std::ostringstream out;
  out << "Usage: mpiexec -n RANKS ./train [options]     (or ./train [options] for one rank)\n"
         "Trains a CNN data-parallel over MPI ranks: each rank runs --batch-size images per step\n"
         "and gradients are averaged across ranks. The defaults train lenet on Fashion-MNIST\n"
         "(SGD lr 0.05, momentum 0.9, weight decay 5e-4, cosine schedule, 10 epochs of batches of\n"
         "64): about 91% test accuracy at the end, >= 90% from epoch 7 (one rank).\n\nOptions:\n";
  out << cli::format_options(program(), defaults);
  out << "\nModels (--model):\n";
  out << model_list();
  out << "\nSwitches (--nesterov, --scale-lr, --skip-bad, --distribute-data, --freeze-backbone,\n"
         "--freeze-bn) alone mean true; a value sets them: --nesterov=false, --distribute-data off\n"
         "(true/on/yes/1, false/off/no/0).\n"
         "\nConfig file (--config FILE): one 'key = value' per line, keys are the long option\n"
         "names without dashes (every option except config and help), '#' starts a comment;\n"
         "options given on the command line override the file's. For example:\n"
         "    # runs/r18.cfg\n"
         "    model = resnet18\n"
         "    data = data/faces\n"
         "    batch-size = 64\n"
         "    learning-rate = 0.1\n"
         "    schedule = warmup:5+cosine\n"
         "    nesterov = true\n"
         "\nExamples:\n"
         "  ./train                                     lenet on Fashion-MNIST with the defaults\n"
         "  mpiexec -n 4 ./train -m resnet18 -d data/faces --epochs 10 -b 64 -lr 0.1 -s runs/r18\n"
         "  mpiexec -n 2 ./train -m resnet20 --dataset cifar10 -d data/cifar-10-batches-bin \\\n"
         "      --augment crop-flip -e 100 -lr 0.1 --weight-decay 1e-4 --schedule warmup:5+cosine\n"
         "  ./train -d photos/                          class subfolders only: 10% of each class held out\n"
         "                                              for validation (--val-split), or --test-data DIR\n"
         "  ./train --config runs/r18.cfg -lr=0.2        the file's options, another lr\n"
         "  ./train --resume runs/r18                    continue runs/r18 from its latest checkpoint\n"
         "  ./train -m resnet18 -d data/faces --init-weights resnet18.safetensors --freeze-backbone\n"
         "      --head-lr-mult 10 -lr 0.01              fine-tune torchvision's weights on new classes\n"
         "  ./train --dataset synthetic --distribute-data=false --check-sync 10 --progress plain\n"
         "  mpiexec -n 2 ./train --task detection -m fasterrcnn_resnet18_fpn -d data/shapes \\\n"
         "      --min-size 160 --max-size 320 -e 12   Faster R-CNN on train/ and test/ VOC folders\n";
  return out.str();
}

}  // namespace mpicnn::train
