// `./pipeline_eval` option parsing: Boost.ProgramOptions does the tokenising; every value is taken
// as a string and converted by its row of the flag table, so each bad value gets one line naming
// the flag and what is accepted (core/cli.h; the flags ./train takes too are core/common_flags.h's).
// There is no config file. Not the evaluation and not its main: nothing here opens data,
// checkpoints or MPI.
#include "eval/options.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>

#include "core/check.h"
#include "core/cli.h"
#include "core/common_flags.h"
#include "data/dataset.h"
#include "data/registry.h"
#include "eval/layout.h"
#include "io/checkpoint.h"
#include "models/detectors.h"
#include "models/registry.h"

namespace mpicnn::eval {

namespace fs = std::filesystem;
namespace po = boost::program_options;
using cli::bad;
using cli::Given;
using cli::to_bool;
using cli::to_int;
using cli::to_uint64;

namespace {

// The kinds --dataset takes: "auto" and data/registry.h's classification kinds.
const std::vector<std::string>& datasets() {
  static const std::vector<std::string> names = data::dataset_choices(Task::Classify, /*streamed=*/false);
  return names;
}

// --dataset's help, from the registry: "auto, fashion-mnist, ... or synthetic; ...".
std::string dataset_help() {
  const std::vector<std::string>& names = datasets();
  std::string s;
  for (size_t i = 0; i < names.size(); ++i)
    s += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return s + "; auto detects the format from --data";
}

// --model: a classifier of the registry (a detector's state dict alone does not say how its
// images were resized: its run does).
std::string model_name(const Given& g) {
  const auto& detectors = detection_model_names();
  if (std::find(detectors.begin(), detectors.end(), g.value) != detectors.end())
    FAIL(g.label, " ", g.value, ": a detector is evaluated from its ./train --task detection run "
         "(--checkpoint RUN, which records its classes and --min-size/--max-size), not with --weights");
  try {
    return model_spec(g.value).name;
  } catch (const Error& e) {
    FAIL(g.label, ": ", e.message());
  }
}

using Flag = cli::Flag<EvalOptions>;

// ./pipeline_eval's flags, in --help order: names and help, the field each fills and its
// conversion; the ones ./train takes too come from core/common_flags.h.
const std::vector<Flag>& eval_flags() {
  using O = EvalOptions;
  using enum cli::Kind;
  namespace common = cli::common;
  using cli::bind_to, cli::choice, cli::int_from, cli::int32_from, cli::text;
  static const std::vector<Flag> rows{
      {{"checkpoint", "c", "RUN", Value,
        "the model to evaluate: a ./train run directory (its latest checkpoint), RUN/latest or a "
        "checkpoint directory; it names the model, class count and preprocessing"},
       bind_to(&O::checkpoint, text)},
      {{"weights", "", "FILE", Value,
        "instead of --checkpoint: a safetensors state dict with torchvision's parameter names "
        "(needs --model)"},
       bind_to(&O::weights, text)},
      {{"model", "m", "NAME", Value,
        "with --weights: the architecture the weights belong to (see the list below)"},
       bind_to(&O::model, model_name)},
      {{"num-classes", "", "N", Value,
        "with --weights: classes of the model's last layer (>= 1; default: the dataset's count)"},
       bind_to(&O::num_classes, int32_from(1))},
      {{"in-channels", "", "N", Value,
        "with --weights: input channels of the model, 1 or 3 (default 3)"},
       bind_to(&O::in_channels,
               [](const Given& g) {
                 const int64_t c = to_int(g, 1, 3);
                 if (c == 2) bad(g, "1 or 3 (grey or RGB input)");
                 return int(c);
               })},
      {common::data(std::string(" in ") + data::kFashionMnistDefaultPath +
                    "; with --checkpoint and neither -d nor --dataset: the run's evaluation data "
                    "(its data's test split, else exactly the validation images it held out, or "
                    "its --test-data)"),
       &O::data},
      {{"dataset", "", "KIND", Value, dataset_help()}, bind_to(&O::dataset, choice(datasets()))},
      {{"split", "", "NAME", Value,
        "auto (test if the dataset has one, else all), train, test, val or all"},
       bind_to(&O::split, choice({"auto", "train", "test", "val", "all"}))},
      {{"limit", "", "N", Value, "evaluate the first N samples only (0 = all)"},
       bind_to(&O::limit, to_uint64)},
      {common::skip_bad(), &O::skip_bad},
      {{"image-size", "", "N", Value,
        "model input height = width, the center crop (>= 1; default: the checkpoint's, with "
        "--weights what ./train uses on this data: a fixed-size dataset's own size, else the "
        "model's default size)"},
       bind_to(&O::image_size, int32_from(1))},
      {{"resize", "", "N", Value,
        "shorter image side before the center crop (>= 0; 0 = no resize; default: the "
        "checkpoint's, with --weights torchvision's 256 for 224 crops on image files)"},
       bind_to(&O::resize, int32_from(0))},
      {common::mean(" (default: the checkpoint's, with --weights the dataset kind's as ./train "
                    "uses them: ImageNet's for image files)"),
       &O::mean},
      {common::stddev(" (default as for --mean)"), &O::std},
      {{"batch-size", "b", "N", Value, "images per predicted batch (>= 1)"},
       bind_to(&O::batch_size, int_from(1))},
      {{"sequential", "", "[=BOOL]", Switch,
        "run every stage in rank 0 alone, one after the other (the baseline; other ranks idle)"},
       bind_to(&O::sequential, to_bool)},
      {{"compare", "", "[=BOOL]", Switch,
        "run the sequential baseline first (rank 0 with all the node's cores), then the "
        "pipeline; report the speedup and whether the predictions are identical"},
       bind_to(&O::compare, to_bool)},
      {common::threads("; the ranks here are the predicting ranks (the other stages are light and "
                       "sleep while they wait)"),
       &O::threads},
      {{"credits", "", "N", Value,
        "samples allowed in flight from one rank to one rank of the next stage (>= 0; 0 = 4 x "
        "batch size)"},
       bind_to(&O::credits, int32_from(0))},
      {{"batch-credits", "", "N", Value, "batches in flight per predicting rank (>= 1)"},
       bind_to(&O::batch_credits, int32_from(1))},
      {{"stages", "", "SPEC", Value,
        "ranks per stage, e.g. read=1,decode=4,batch=1,predict=2 (counts >= 1, stages in this "
        "order, adding up to the job's ranks); consecutive stages joined by '+' share their ranks: "
        "read+decode+batch=1,predict=3; auto: measure each stage's cost on the first images "
        "and choose the counts (default: see Stages below)"},
       bind_to(&O::stages, [](const Given& g) { return g.value == "auto" ? g.value : parse_stages(g.value).spec(); })},
      {{"output", "o", "DIR", Value,
        "write DIR/predictions.csv and DIR/report.json (default: write no files)"},
       bind_to(&O::output, text)},
      {{"json", "", "[=BOOL]", Switch, "print the JSON report on stdout instead of the text report"},
       bind_to(&O::json, to_bool)},
      {common::device("; the predict stage runs there"), &O::device},
      {common::precision("; detection evaluates in fp32 on the CPU"), &O::precision},
      {common::gpu_layout(), &O::gpu_layout},
      {common::explain_plan(), &O::explain_plan},
      {common::timeout(), &O::timeout},
      {{"help", "h", "", Help, "print this help and exit"}},
  };
  return rows;
}

const cli::Program& program() {
  static const cli::Program p{"./pipeline_eval", cli::option_defs(eval_flags()),
                              "the dataset is -d PATH"};
  return p;
}

std::string flag(const std::string& key) { return cli::flag_name(cli::find_option(program(), key)); }


// The defaults the help shows, taken from EvalOptions itself so the two cannot drift. Options
// whose default is "decided later" (0 / -1 / empty) say so in their own help text instead.
std::map<std::string, std::string> shown_defaults() {
  const EvalOptions o;
  const std::vector<std::string> decided_later = {"num-classes", "in-channels", "image-size",
                                                  "resize"};
  std::map<std::string, std::string> shown;
  for (const Flag& f : eval_flags())
    if (f.value && std::find(decided_later.begin(), decided_later.end(), f.def.name) ==
                       decided_later.end())
      shown[f.def.name] = f.value.text(o);
  return shown;
}

// The rules between options, once each option's own value is known (`cmd`: which were given):
// what to evaluate, the flags that go with it, the channel lists, and the data.
void check_across_options(const EvalOptions& o, const po::variables_map& cmd) {
  auto given = [&](const char* key) { return cmd.count(key) > 0; };
  // What to evaluate: a checkpoint (which names its model), or a state dict and a model name.
  const bool has_checkpoint = !o.checkpoint.empty(), has_weights = !o.weights.empty();
  CHECK(!(has_checkpoint && has_weights),
        "give --checkpoint RUN or --weights FILE --model NAME (not both)");
  CHECK(has_checkpoint || has_weights,
        "give --checkpoint RUN or --weights FILE --model NAME (nothing to evaluate)");
  if (has_checkpoint) {
    for (const char* key : {"model", "num-classes", "in-channels"})
      CHECK(!given(key), flag(key), ": the checkpoint names the ",
            std::strcmp(key, "model") == 0         ? "model"
            : std::strcmp(key, "num-classes") == 0 ? "class count"
                                                   : "input channels",
            "; --", key, " goes with --weights");
  } else {
    CHECK(!o.model.empty(), "--weights needs --model NAME (the architecture of the state dict)");
  }
  CHECK(!(o.sequential && given("stages")),
        "--stages sets the pipeline's ranks; --sequential runs no pipeline (give one of the two)");
  CHECK(!(o.sequential && o.compare),
        "--sequential and --compare: --compare already runs the sequential baseline before the "
        "pipeline (give one of the two)");

  // The channel lists must fit the input channels when those are known here (--in-channels).
  if (o.in_channels == 1)
    for (const char* key : {"mean", "std"}) {
      const auto& list = std::strcmp(key, "mean") == 0 ? o.mean : o.std;
      CHECK(list.size() <= 1, flag(key), ": ", list.size(),
            " values for --in-channels 1 (give 1 value)");
    }

  // The data: a path, or a kind that needs none, or (neither given) a checkpoint's run's own,
  // which with_run_data fills in from its record. An empty --data= counts as none.
  if (o.data.empty() && (given("dataset") || !has_checkpoint)) {
    CHECK(given("dataset"), "-d/--data: no dataset given (a path, or --dataset fashion-mnist)");
    const data::DatasetKind* k = data::find_dataset_kind(o.dataset);
    CHECK(k && (k->no_path || !k->default_path.empty()), "--dataset: '", o.dataset,
          "' needs -d/--data PATH (only ", data::kinds_without_path(), " have no path)");
  }
}

}  // namespace

EvalOptions parse_eval_options(const std::vector<std::string>& args) {
  const po::variables_map cmd = cli::parse_command_line(program(), args);
  EvalOptions o;
  if (cmd.count("help")) {
    o.help = true;  // the rest is not validated: --help must work whatever else is on the line
    return o;
  }
  for (const Flag& f : eval_flags())
    if (f.value && cmd.count(f.def.name))
      f.value.parse(o, Given{cmd[f.def.name].as<std::string>(), cli::flag_name(f.def)});

  check_across_options(o, cmd);
  return o;
}

bool wants_run_data(const EvalOptions& o) {
  // parse_eval_options refuses --dataset auto without a path, so "auto" here means not given.
  return !o.checkpoint.empty() && o.data.empty() && o.dataset == "auto";
}

EvalOptions with_run_data(EvalOptions o, const TrainerState& st, const std::string& record) {
  if (!wants_run_data(o)) return o;
  const std::string pass = "; pass -d/--data PATH (and --dataset KIND) to name the data";
  const auto kind = st.config.find("dataset");
  CHECK(kind != st.config.end() && !kind->second.empty(), "--checkpoint: ", record,
        " does not record the dataset its run trained on", pass);
  CHECK(std::find(datasets().begin(), datasets().end(), kind->second) != datasets().end(),
        "--checkpoint: ", record, " records dataset '", kind->second, "', which ./pipeline_eval ",
        "does not know", pass);
  o.dataset = kind->second;
  std::error_code ec;
  if (!st.test_data_path.empty()) {  // the run evaluated on --test-data: so does this
    CHECK(fs::exists(st.test_data_path, ec), "--checkpoint: the run's --test-data ", st.test_data_path,
          " is not there", pass);
    o.dataset = "auto";
    o.data = st.test_data_path;
    o.run_data = o.run_test_data = true;
    return o;
  }
  if (o.dataset != "synthetic") {
    const auto given = st.config.find("data");
    o.data = !st.data_path.empty() ? st.data_path : given != st.config.end() ? given->second : "";
    CHECK(!o.data.empty(), "--checkpoint: ", record, " records dataset '", o.dataset,
          "' but not its path", pass);
    CHECK(fs::exists(o.data, ec), "--checkpoint: the run trained on ", o.data,
          fs::path(o.data).is_relative() ? " (relative to the folder ./train ran in)" : "",
          ", which is not there", pass);
  }
  o.synthetic_seed = st.seed;  // the trainer draws synthetic samples with the run's seed
  if (st.val_held_out > 0 && o.split == "auto") {  // the held-out samples of its one split
    o.split = "train";
    o.val_fraction = st.val_fraction;
    o.val_seed = st.seed;
    o.val_held_out = st.val_held_out;
  }
  if (o.split == "auto") o.split = "test";  // never the training samples by default
  o.run_data = true;
  return o;
}

std::string eval_help() {
  const std::map<std::string, std::string> defaults = shown_defaults();
  std::ostringstream out;
  out << "Usage: mpiexec -n K ./pipeline_eval --checkpoint RUN [-d DATA] [options]\n"
         "       ./pipeline_eval --weights FILE --model NAME -d DATA [options]\n"
         "Evaluates a trained CNN on a dataset with the work pipelined across MPI ranks: reading,\n"
         "decoding and resizing, normalising and batching, and predicting run on different ranks\n"
         "at the same time. Rank 0 collects the predictions and prints the report (accuracy,\n"
         "top-5, per-class precision and recall, per-stage busy time, throughput, latency).\n"
         "\nOptions:\n";
  out << cli::format_options(program(), defaults);
  out << "\nModels (--model, with --weights):\n";
  out << model_list();
  out << "\nSwitches (--skip-bad, --sequential, --compare, --json, --explain-plan) alone mean\n"
         "true; a value sets them: --skip-bad=false, --json=on (true/on/yes/1, false/off/no/0).\n"
         "\nStages on K ranks (mpiexec -n K):\n"
         "  K >= 4   rank 0 reads the files (raw bytes) | rank 1 decodes and resizes | rank 2\n"
         "           normalises and batches | ranks 3..K-1 predict (each batch goes to whichever\n"
         "           predictor is free)\n"
         "  K = 3    rank 0 reads | rank 1 decodes, resizes, normalises and batches | rank 2 predicts\n"
         "  K = 2    rank 0 reads, decodes, resizes, normalises and batches | rank 1 predicts\n"
         "  K = 1    everything in one process\n"
         "  --stages  any other split, e.g. read=1,decode=4,batch=1,predict=2 on 8 ranks: each\n"
         "           stage on as many ranks as it needs (blocks of batch-size samples go round the\n"
         "           ranks of a stage; every block becomes the sequential run's batch)\n"
         "Rank 0 also collects the predictions and prints the report. --credits and\n"
         "--batch-credits bound the samples and batches in flight, so a fast stage cannot run\n"
         "far ahead of a slow one.\n"
         "\nOutput:\n"
         "  stdout          the text report: top-1 and top-5 accuracy, confusion matrix, per-class\n"
         "                  precision and recall, skipped images, per-stage busy time and\n"
         "                  utilisation, throughput, per-image latency percentiles and, with\n"
         "                  --compare, the speedup over the sequential baseline (--json: the same\n"
         "                  as JSON)\n"
         "  --output DIR    DIR/predictions.csv (index, path, label, prediction, its probability,\n"
         "                  the top-5 class ids) and DIR/report.json\n"
         "\nExamples:\n"
         "  mpiexec -n 6 --oversubscribe ./pipeline_eval --checkpoint runs/lenet-x \\\n"
         "      --limit 2000                                    the run's own data, its test split\n"
         "  mpiexec -n 6 ./pipeline_eval --checkpoint runs/lenet-x -d data/photos --split all\n"
         "  mpiexec -n 4 ./pipeline_eval --checkpoint runs/r20 --dataset cifar10 \\\n"
         "      -d data/cifar-10-batches-bin --compare          pipeline vs. sequential, speedup\n"
         "  ./pipeline_eval --weights resnet18.safetensors --model resnet18 -d photos/ \\\n"
         "      --num-classes 1000 --skip-bad -o out/           ImageNet-style eval, files in out/\n"
         "  mpiexec -n 5 ./pipeline_eval -c runs/lenet-x --dataset fashion-mnist --json --limit 1000\n"
         "  mpiexec -n 4 ./pipeline_eval -c runs/masks -b 2 -o out/  a ./train --task detection run:\n"
         "      VOC/COCO mAP, predictions.csv one row per box (its --min-size/--max-size, classes)\n";
  return out.str();
}

}  // namespace mpicnn::eval
