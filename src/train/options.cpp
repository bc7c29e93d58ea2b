// `./train` option parsing: Boost.ProgramOptions does the tokenising (command line and config
// file); every value is taken as a string and converted by its row of the flag table, so each bad
// value gets one line naming the flag (or file:line: key) and what is accepted. Not the trainer
// and not its main. Over 500 lines: the flag table (59 rows, each a flag's help text, field,
// conversion, tasks and sample value) is over a third of it; config files, the rules between
// options and the help prose are the rest.
#include "train/options.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>

#include "core/check.h"
#include "core/cli.h"
#include "core/common_flags.h"
#include "data/dataset.h"
#include "data/registry.h"
#include "dist/nccl_backend.h"
#include "models/registry.h"
#include "optim/schedule.h"

namespace mpicnn::train {

namespace po = boost::program_options;
using cli::Given;
using cli::to_bool;
using cli::to_choice;
using cli::to_int;
using cli::to_uint64;

namespace {

// --dataset's help, from the registry: "auto, fashion-mnist, ..., synthetic, or voc or coco
// (--task detection); ...".
std::string dataset_help() {
  std::string classify = "auto", detection;
  for (const data::DatasetKind& k : data::dataset_kinds()) {
    if (k.task == Task::Classify) classify += ", " + k.name;
    else detection += (detection.empty() ? "" : " or ") + k.name;
  }
  return classify + ", or " + detection + " (--task detection); auto detects the format from "
         "--data. Without --data and --dataset: fashion-mnist; with --data only: auto";
}

// --model: under --task detection (parsed first) a detector, else a classifier of the registry.
std::string model_name(const Given& g, const TrainOptions& o) {
  try {
    if (o.task == Task::Detection) {
      detection_body(g.value);  // an Error naming the known detectors
      return g.value;
    }
    return model_spec(g.value).name;
  } catch (const Error& e) {
    FAIL(g.label, ": ", e.message());
  }
}

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

}  // namespace

// ./train's flags, in --help order: each row is the flag's names and help, the field it fills
// with its conversion (ranges and accepted values), the tasks that take it, and a sample value
// for the table's test (tests/test_train_options.cpp walks every row under every task).
const std::vector<Flag>& train_flags() {
  using O = TrainOptions;
  using enum cli::Kind;
  using enum cli::Tasks;
  namespace common = cli::common;
  using cli::bind_to, cli::choice, cli::int_from, cli::int32_from, cli::number, cli::text;
  static const std::vector<Flag> rows{
      {{"model", "m", "NAME", Value, "model to train (see the list below)"},
       bind_to(&O::model, model_name), both, {"resnet20", "fasterrcnn_resnet18_fpn"}},
      {common::data(), &O::data, both, {"/tmp/data"}},
      {{"dataset", "", "KIND", Value, dataset_help()},
       bind_to(&O::dataset, choice(data::dataset_choices())), both, {"cifar10", "voc"}},
      {{"task", "", "NAME", Value,
        "classify, or detection: Faster R-CNN (--model fasterrcnn_resnet18_fpn, "
        "fasterrcnn_resnet34_fpn or fasterrcnn_resnet50_fpn) on -d PATH: a Pascal VOC folder "
        "(images/ + annotations/, or JPEGImages/ + Annotations/), a COCO instances .json (images "
        "in its folder) or a folder holding one, or a folder holding train/ and test/ such sets; "
        "its defaults: -b 2, -lr 0.01, --weight-decay 1e-4, --augment flip"},
       bind_to(&O::task, [](const Given& g) { return *parse_task(to_choice(g, task_names())); }),
       both, {"detection"}},
      {{"val-split", "", "F", Value,
        "data without a test split (an image folder without train/ and test/, a CSV without a "
        "split column): hold out this fraction, in [0, 1), of each class as the validation "
        "split (round(F x class size), at least 1 of a class with >= 2 images, drawn from --seed, "
        "never trained on); 0 = no hold-out (then only --eval-every 0 trains such data). "
        "Ignored when the data has a test split or --test-data is given; a resume keeps it"},
       bind_to(&O::val_split,
               number([](double x) { return x >= 0 && x < 1; }, "a fraction in [0, 1)")),
       classify, {"0.25"}},
      {{"test-data", "", "PATH", Value,
        "a separate evaluation set in any supported format (kind auto-detected; its test split "
        "if it has one, else all of it) instead of the data's test split; its class names must "
        "match the training data's"},
       bind_to(&O::test_data, text), both, {"/tmp/test"}},
      {{"batch-size", "b", "N", Value, "images per step on each rank (>= 1)"},
       bind_to(&O::batch_size, int_from(1)), both, {"128"}},
      {{"accumulate", "", "N", Value,
        "gradient accumulation: each optimizer step runs N micro-batches of --batch-size on every "
        "rank and exchanges gradients once, after the last (Horovod's --batches-per-allreduce): "
        "the step's batch is batch-size x N per rank, its memory that of one micro-batch (>= 1)"},
       bind_to(&O::accumulate, int_from(1)), both, {"4"}},
      {{"epochs", "e", "N", Value, "passes over the training data (>= 1)"},
       bind_to(&O::epochs, int_from(1)), both, {"30"}},
      {{"learning-rate", "lr", "LR", Value, "base learning rate (> 0); also -lr LR or -lr=LR"},
       bind_to(&O::learning_rate, number([](double x) { return x > 0; }, "a number > 0")),
       both, {"0.2"}},
      {{"momentum", "", "M", Value, "SGD and LARS momentum, in [0, 1); AdamW ignores it"},
       bind_to(&O::momentum,
               number([](double x) { return x >= 0 && x < 1; }, "a number in [0, 1)")),
       both, {"0.8"}},
      {{"weight-decay", "", "WD", Value,
        "L2 penalty (SGD, and LARS's, in its trust ratio too) or decoupled decay (AdamW), >= 0"},
       bind_to(&O::weight_decay, number([](double x) { return x >= 0; }, "a number >= 0")),
       both, {"0.001"}},
      {{"optimizer", "", "NAME", Value,
        "sgd, adamw or lars (LARS as MLPerf's ResNet-50 reference: a trust ratio per tensor, "
        "weight decay in the gradient, momentum; BatchNorm parameters and biases skip both; "
        "CPU only for now)"},
       bind_to(&O::optimizer, choice({"sgd", "adamw", "lars"})), both, {"adamw"}},
      {{"lars-eta", "", "ETA", Value,
        "LARS's trust coefficient (> 0): a tensor's step is lr x ETA x |w| / (|g| + wd x |w|)"},
       bind_to(&O::lars_eta, number([](double x) { return x > 0; }, "a number > 0")), both,
       {"0.002"}},
      {{"nesterov", "", "[=BOOL]", Switch, "Nesterov momentum (SGD or LARS, with momentum > 0)"},
       bind_to(&O::nesterov, to_bool), both, {"true"}},
      {{"schedule", "", "SPEC", Value,
        "learning-rate schedule: constant | step:SIZE:GAMMA | multistep:M1,M2,...:GAMMA | "
        "cosine[:ETA_MIN] | poly[:POWER[:END_LR]] (MLPerf's LARS decay, POWER 2), optionally "
        "after warmup:W[:START]+ (e.g. step:30:0.1, "
        "warmup:5+cosine); epochs count after the warmup"},
       bind_to(&O::schedule, text), both, {"step:10:0.5"}},
      {{"warmup-epochs", "", "N", Value,
        "linear warmup epochs before the schedule (>= 0; same as a warmup:N+ prefix)"},
       bind_to(&O::warmup_epochs, int_from(0)), both, {"2"}},
      {{"label-smoothing", "", "E", Value,
        "cross-entropy with label smoothing E in [0, 1): the target is (1 - E) on the label plus E "
        "spread evenly over the classes, as torch's CrossEntropyLoss(label_smoothing=E); the "
        "large-batch ImageNet recipes use 0.1. The test loss is measured the same way"},
       bind_to(&O::label_smoothing,
               number([](double x) { return x >= 0 && x < 1; }, "a number in [0, 1)")),
       classify, {"0.1"}},
      {{"no-decay-bn-bias", "", "[=BOOL]", Switch,
        "no weight decay on BatchNorm weights and biases and on every other bias (SGD and AdamW: "
        "torch param groups with weight_decay 0 for them, as the large-batch recipes do; LARS "
        "always leaves them out)"},
       bind_to(&O::no_decay_bn_bias, to_bool), both, {"true"}},
      {{"scale-lr", "", "[=BOOL]", Switch,
        "linear scaling rule: lr x global batch (batch-size x accumulate x ranks) / 256"},
       bind_to(&O::scale_lr, to_bool), both, {"true"}},
      {{"workers", "w", "N", Value, "data loader threads per rank (>= 0; 0 = none)"},
       bind_to(&O::workers, int32_from(0)), classify, {"4"}},
      {{"shuffle-buffer", "", "N", Value,
        "tar shards: samples each rank's stream shuffles through (WebDataset's shuffle(N)); its "
        "shards are shuffled every epoch too. Memory: N encoded images per rank (>= 1; 1 = the shards' order)"},
       bind_to(&O::shuffle_buffer, int_from(1)), classify, {"500"}},
      {common::mean(" (empty = the dataset's)"), &O::mean, classify, {"0.5"}},
      {common::stddev(" (empty = the dataset's)"), &O::std, classify, {"0.25"}},
      {{"augment", "", "NAME", Value,
        "training augmentation: none, flip (horizontal), crop-flip (padded random crop + flip, "
        "CIFAR style) or imagenet (random resized crop + flip)"},
       bind_to(&O::augment, choice({"none", "flip", "crop-flip", "imagenet"})), both, {"flip"}},
      {{"image-size", "", "N", Value,
        "model input height and width; 0 = the dataset's size for fixed-size datasets, else "
        "the model's default size"},
       bind_to(&O::image_size, int32_from(0)), classify, {"36"}},
      {{"in-channels", "", "N", Value,
        "model input channels: 1 (every image converted to gray with PIL's convert(\"L\") "
        "rule, e.g. grayscale image folders) or 3 (gray images replicated); 0 = the data's own "
        "(IDX 1, CIFAR 3, image folders and CSV sets 3, as torchvision's loader)"},
       bind_to(&O::in_channels,
               [](const Given& g) {
                 const int64_t c = to_int(g, 0, 3);
                 if (c == 2) cli::bad(g, "0 (the data's own), 1 or 3 (grey or RGB input)");
                 return int(c);
               }),
       classify, {"1"}},
      {common::skip_bad(), &O::skip_bad, both, {"true"}},
      {{"distribute-data", "", "[=BOOL]", Switch,
        "split each epoch's data between the ranks; --distribute-data=false: every rank trains "
        "on the whole dataset"},
       bind_to(&O::distribute_data, to_bool), both, {"false"}},
      {{"min-size", "", "N", Value,
        "detection: images are resized so that their shorter side is N (>= 32) ..."},
       bind_to(&O::min_size, int32_from(32)), detection, {"160"}},
      {{"max-size", "", "N", Value,
        "detection: ... unless their longer side would pass N (>= min-size)"},
       bind_to(&O::max_size, int32_from(32)), detection, {"900"}},
      {{"trainable-layers", "", "N", Value,
        "detection: backbone stages that train, 0-5, from layer4 down to conv1 (torchvision's "
        "trainable_backbone_layers; default 3 with --init-weights, whose BatchNorm stays frozen; "
        "from random weights every stage trains, with ordinary BatchNorm, as torchvision does)"},
       bind_to(&O::trainable_layers,
               [](const Given& g) {
                 const int n = cli::to_int32(g, 0);
                 CHECK(n <= 5, g.label, ": '", g.value, "' is not in 0..5");
                 return n;
               }),
       detection, {"1"}},
      {{"box-batch-size-per-image", "", "N", Value,
        "detection: RoIs sampled per image for the box head's loss (torchvision's "
        "box_batch_size_per_image); the head's cost in training is proportional to it"},
       bind_to(&O::box_batch_size_per_image, int32_from(1)), detection, {"128"}},
      {{"rpn-post-nms-top-n-test", "", "N", Value,
        "detection: proposals kept per image when evaluating (torchvision's "
        "rpn_post_nms_top_n_test); the head's cost in evaluation is proportional to it"},
       bind_to(&O::rpn_post_nms_top_n_test, int32_from(1)), detection, {"300"}},
      {{"init-weights", "", "PATH", Value,
        "fine-tuning: start from these weights, a safetensors state dict with torchvision names "
        "(data_tools/export_torchvision.py) or a run directory / checkpoint of ours; every tensor "
        "must match by name and shape, except the classifier (the model's head), which a new class "
        "count re-initialises. A resume keeps its checkpoint's weights instead"},
       bind_to(&O::init_weights, text), both, {"w2.safetensors"}},
      {{"init-weights-partial", "", "NAMES", Value,
        "comma list of tensor names or prefixes that --init-weights may lack or hold with "
        "another shape (they keep their fresh initialisation), or hold when the model lacks them"},
       bind_to(&O::init_weights_partial, to_name_list), classify, {"fc,bn1.weight"}},
      {{"freeze", "", "PREFIXES", Value,
        "comma list of parameter-name prefixes to freeze (e.g. conv1,bn1,layer1): no gradient, "
        "no update, no allreduce for them; each must match a parameter"},
       bind_to(&O::freeze, to_name_list), classify, {"conv1,layer1"}},
      {{"freeze-backbone", "", "[=BOOL]", Switch,
        "freeze every parameter except the classifier (the model's head)"},
       bind_to(&O::freeze_backbone, to_bool), classify, {"true"}},
      {{"freeze-bn", "", "[=BOOL]", Switch,
        "every BatchNorm normalises with its running statistics and keeps them during training "
        "(eval-mode normalisation); its weight and bias still train unless frozen"},
       bind_to(&O::freeze_bn, to_bool), classify, {"true"}},
      {{"head-lr-mult", "", "X", Value,
        "the classifier's (the model's head's) learning rate is lr x X (> 0); schedules apply on top"},
       bind_to(&O::head_lr_mult, number([](double x) { return x > 0; }, "a number > 0")),
       classify, {"10"}},
      {{"save-dir", "s", "DIR", Value, "run directory (default: runs/<model>-<timestamp>)"},
       bind_to(&O::save_dir, text), both, {"runs/x"}},
      {{"resume", "", "PATH", Value, "continue from a checkpoint or a run directory's latest"},
       bind_to(&O::resume, text), both, {"runs/y"}},
      {{"seed", "", "N", Value, "seed of every random draw (>= 0)"},
       bind_to(&O::seed, to_uint64), both, {"7"}},
      {common::threads(), &O::threads, both, {"6"}},
      {{"eval-every", "", "N", Value, "evaluate on the test split every N epochs (0 = never)"},
       bind_to(&O::eval_every, int_from(0)), both, {"2"}},
      {{"checkpoint-every", "", "N", Value, "checkpoint every N epochs (0 = only at the end)"},
       bind_to(&O::checkpoint_every, int_from(0)), both, {"5"}},
      {{"keep-checkpoints", "", "N", Value, "newest checkpoints kept (0 = all)"},
       bind_to(&O::keep_checkpoints, int32_from(0)), both, {"0"}},
      {{"log-final-weights", "", "[=BOOL]", Switch,
        "copy the final epoch's weights (model.safetensors) into the MLflow run's artifacts "
        "(RUN/mlruns/0/<run>/artifacts/), beside trainer.json and summary.json; "
        "--log-final-weights=false saves that disk space (the checkpoints keep the weights)"},
       bind_to(&O::log_final_weights, to_bool), both, {"false"}},
      {{"progress", "", "MODE", Value,
        "auto (a bar when the output reaches a terminal: under mpiexec, mpiexec's own; plain "
        "lines in batch logs and redirected output), bar, plain or none (no progress lines; the "
        "closing done: line still gives the result)"},
       bind_to(&O::progress, choice({"auto", "bar", "plain", "none"})), both, {"plain"}},
      {{"check-sync", "", "N", Value,
        "every N steps check that all ranks hold the same weights (0 = off)"},
       bind_to(&O::check_sync, int_from(0)), both, {"100"}},
      {{"bucket-mb", "", "MB", Value,
        "gradient allreduce bucket size in MiB (> 0), or 0: an eighth of the model's gradient, "
        "between 64 KiB and 25 MiB (small buckets let communication start early in backward)"},
       bind_to(&O::bucket_mb, number([](double x) { return x >= 0 && x <= 1 << 20; },
                                     "a number >= 0 (MiB; 0 = auto)")),
       both, {"12.5"}},
      {{"overlap", "", "MODE", Value,
        "how gradient allreduces overlap backward: thread (a progress thread drives them while "
        "backward computes; needed over TCP), hooks (MPI tests between layers) or off (one "
        "allreduce after backward)"},
       bind_to(&O::overlap, choice({"thread", "hooks", "off"})), both, {"hooks"}},
      {{"allreduce", "", "ALGO", Value,
        "ring (all ranks in one allreduce), hierarchical (reduce inside each node, allreduce "
        "among one rank per node, broadcast back) or auto (hierarchical when every node runs "
        "several ranks of a multi-node job)"},
       bind_to(&O::allreduce, choice({"ring", "hierarchical", "auto"})), both, {"ring"}},
      {{"grad-compression", "", "FMT", Value,
        "none, fp16 or bf16: gradients cast to 16 bits for the allreduce (half the bytes on the "
        "network), back to fp32 after"},
       bind_to(&O::grad_compression, choice({"none", "fp16", "bf16"})), both, {"bf16"}},
      {{"gpu-allreduce", "", "HOW", Value,
        "how GPU gradients are summed over ranks: nccl (device to device, each bucket queued on "
        "NCCL's stream as backward completes it; one rank per GPU; --allreduce does not apply), "
        "mpi (through pinned host memory, or device memory with a CUDA-aware MPI) or auto (nccl "
        "when this build has NCCL and each of several ranks has a GPU of its own, else mpi). CPU "
        "runs sum over MPI whatever this says, and refuse nccl. The default stays mpi until the "
        "NCCL path has passed its checks on a GPU"},
       bind_to(&O::gpu_allreduce,
               [](const Given& g) {
                 if (g.value == "nccl" && !dist::nccl::compiled_in())
                   FAIL(g.label, " nccl: ", dist::nccl::unavailable_reason());
                 return to_choice(g, {"nccl", "mpi", "auto"});
               }),
       both, {"auto"}, {Task::Detection, {"nccl"}}},
      {common::timeout(), &O::timeout, both, {"60"}},
      // Detection runs on the CPU in fp32 for now.
      {common::device(), &O::device, both, {"cpu"}, {Task::Detection, {"cuda"}}},
      {common::precision("; fp16 trains with dynamic loss scaling; weights and activations stay fp32"),
       &O::precision, both, {"bf16"}, {Task::Detection, {"tf32", "bf16", "fp16"}}},
      {common::gpu_layout(), &O::gpu_layout, both, {"nhwc"}, {Task::Detection, {"nhwc"}}},
      {{"deterministic", "", "[=BOOL]", Switch,
        "GPU: deterministic cuDNN algorithms only (bit-identical reruns, maybe slower)"},
       bind_to(&O::deterministic, to_bool), both, {"true"}},
      {common::explain_plan(), &O::explain_plan, both, {"true"}},
      // No option value: --config is read before the other options, --help stops parsing.
      {{"config", "", "FILE", Value,
        "read options from FILE (format below); command-line values override the file's"}},
      {{"help", "h", "", Help, "print this help and exit"}},
  };
  return rows;
}

namespace {

const cli::Program& program() {
  static const cli::Program p{"./train", cli::option_defs(train_flags()), ""};
  return p;
}

const Flag& find_flag(const std::string& name) {
  for (const Flag& f : train_flags())
    if (f.def.name == name) return f;
  FAIL("internal: ./train has no option '", name, "'");
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

bool detection_kind(const std::string& kind) {
  const data::DatasetKind* k = data::find_dataset_kind(kind);
  return k && k->task == Task::Detection;
}

// The flags the run's task does not take, or values it does not take of a flag (the table's
// tasks and refusal columns): refused rather than ignored, by value, not by presence (a resumed
// run's recorded configuration holds every key).
void check_task_flags(const TrainOptions& o, const Values& v) {
  for (const Flag& f : train_flags())
    CHECK(!f.refuses(o, o.task), v.label(f.def.name),
          o.task == Task::Detection ? ": not supported with --task detection yet"
                                    : ": only with --task detection");
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
    o.trainable_layers = o.init_weights.empty() ? 5 : DetectorDefaults::trainable_layers;
  else
    CHECK(!o.init_weights.empty() || o.trainable_layers == 5, v.label("trainable-layers"), ": ",
          o.trainable_layers, " without --init-weights: from random weights every stage trains "
          "(torchvision's rule); freeze stages of pretrained weights only");
  CHECK(o.augment == "none" || o.augment == "flip", v.label("augment"), ": detection supports "
        "none or flip, not ", o.augment);
  check_task_flags(o, v);
}

// The rules between options, once each option's own value is known: the data defaults, the
// image size against the model, Nesterov, warmup and the schedule. Errors name the option as
// `v` does (flag, or config file line).
void check_across_options(TrainOptions& o, const Values& v) {
  if (o.task == Task::Detection) {
    check_detection_options(o, v);
  } else {
    check_task_flags(o, v);
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
    CHECK(o.optimizer != "adamw" && o.momentum > 0, v.label("nesterov"),
          ": Nesterov momentum needs --optimizer sgd or lars and --momentum > 0");
  CHECK(o.optimizer == "lars" || o.lars_eta == TrainOptions{}.lars_eta, v.label("lars-eta"),
        ": the trust coefficient is LARS's; it needs --optimizer lars (now ", o.optimizer, ")");
  CHECK(o.optimizer != "lars" || o.device != "cuda", v.label("optimizer"),
        " lars: runs on the CPU only for now; use --optimizer sgd with --device cuda");
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
  auto parse = [&](const Flag& f) {
    if (const auto g = f.value ? v.get(f.def.name) : std::nullopt) f.value.parse(o, *g);
  };
  // --task first: its defaults go under the options that may override them, and --model's
  // check depends on it.
  const Flag& task = find_flag("task");
  parse(task);
  if (o.task == Task::Detection) {  // Faster R-CNN's defaults
    o.batch_size = 2;
    o.learning_rate = 0.01;
    o.weight_decay = 1e-4;
    o.augment = "flip";
  }
  for (const Flag& f : train_flags())
    if (&f != &task) parse(f);

  check_across_options(o, v);
  return o;
}

TrainOptions parse_train_options(int argc, const char* const* argv) {
  CHECK(argc >= 1 && argv != nullptr, "parse_train_options: argv must hold the program name");
  return parse_train_options(std::vector<std::string>(argv + 1, argv + argc));
}

std::map<std::string, std::string> to_config(const TrainOptions& o) {
  std::map<std::string, std::string> config;
  for (const Flag& f : train_flags())
    if (f.value) config[f.def.name] = f.value.text(o);
  return config;
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
         "--freeze-bn, --explain-plan, --log-final-weights) alone mean true; a value sets them:\n"
         "--nesterov=false, --distribute-data off\n"
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
