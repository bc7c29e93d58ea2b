// The options of `./train`: command line and `--config FILE` parsing (Boost.ProgramOptions),
// validation with one clear line per bad value, the --help text, and the flat key/value record of
// a run's effective options. Not the trainer: nothing here opens data, builds models or uses MPI.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/task.h"
#include "data/dataset.h"
#include "models/detectors.h"

namespace mpicnn::cli {
template <class Options>
struct Flag;  // core/cli.h
}

namespace mpicnn::train {

// Every field holds its effective value after parsing. The defaults are a Fashion-MNIST run:
// lenet, one rank, measured 91.1% test accuracy after the 10 epochs (>= 90% from epoch 7).
struct TrainOptions {
  bool help = false;  // -h/--help was given: the caller prints train_help() and exits

  // Classify (the models of models/registry.h) or Detection (Faster R-CNN on Pascal VOC folders
  // or COCO JSON)
  Task task = Task::Classify;
  // model and data
  std::string model = "lenet";            // registry.h's, or fasterrcnn_<resnet>_fpn (detection)
  std::string data;                       // dataset path; the Debian package's for fashion-mnist
  std::string dataset = "fashion-mnist";  // kind; "auto" (= detect from the path) when only -d
  // Data without a test split (an image folder without train/ and test/, a CSV without a split
  // column): the fraction held out of it as a stratified validation split (data/holdout.h),
  // drawn from --seed. 0: no hold-out (such data then trains only with --eval-every 0).
  double val_split = 0.1;
  std::string test_data;  // a separate evaluation set (any format, kind auto-detected); empty = none
  int64_t batch_size = 64;                // per rank and micro-batch
  int64_t accumulate = 1;                 // micro-batches per optimizer step (one gradient exchange)
  int64_t epochs = 10;

  // optimisation
  double learning_rate = 0.05;
  double momentum = 0.9;  // SGD and LARS momentum (AdamW ignores it)
  double weight_decay = 5e-4;
  std::string optimizer = "sgd";  // sgd | adamw | lars
  double lars_eta = 0.001;        // LARS's trust coefficient
  bool nesterov = false;
  std::string schedule = "cosine";  // optim/schedule.h grammar, without --warmup-epochs
  int64_t warmup_epochs = 0;
  bool scale_lr = false;  // linear scaling rule: lr * global batch (b * accumulate * K) / 256
  double label_smoothing = 0;     // the classifier's loss: torch's CrossEntropyLoss(label_smoothing)
  bool no_decay_bn_bias = false;  // no weight decay on BatchNorm parameters and biases

  // input pipeline
  int workers = 2;  // loader threads per rank; 0 = load in the training thread
  int64_t shuffle_buffer = int64_t(data::kDefaultShuffleBuffer);  // tar shards: each rank's shuffle buffer
  std::vector<float> mean, std;  // empty = the dataset's standard values
  std::string augment = "none";  // none | flip | crop-flip | imagenet
  int image_size = 0;            // 0 = the dataset's own size, else the model's default size
  // The model's input channels: 1 (images converted to luma as PIL's convert("L")) or 3 (gray
  // replicated); 0 = the data's own (IDX 1, CIFAR 3, image files 3 as torchvision's loader).
  int in_channels = 0;
  bool skip_bad = false;         // skip undecodable samples instead of stopping
  bool distribute_data = true;   // false: every rank trains on the whole dataset

  // detection (--task detection): GeneralizedRCNNTransform's sizes and the backbone stages that
  // train, as torchvision's fasterrcnn_resnet50_fpn defaults
  int min_size = DetectorDefaults::min_size, max_size = DetectorDefaults::max_size;
  int trainable_layers = DetectorDefaults::trainable_layers;
  // torchvision's box_batch_size_per_image and rpn_post_nms_top_n_test: RoIs sampled per image
  // for the box head in training, proposals kept per image in evaluation.
  int box_batch_size_per_image = DetectorDefaults::box_batch_size_per_image;
  int rpn_post_nms_top_n_test = DetectorDefaults::rpn_post_nms_top_n_test;

  // fine-tuning (train/finetune.h)
  std::string init_weights;                       // safetensors file, checkpoint or run directory
  std::vector<std::string> init_weights_partial;  // names / prefixes allowed to be missing or differ
  std::vector<std::string> freeze;                // parameter-name prefixes
  bool freeze_backbone = false;                   // everything but the model's head
  bool freeze_bn = false;                         // BatchNorm keeps and uses its running statistics
  double head_lr_mult = 1;                        // the head's lr = lr x this

  // run management
  std::string save_dir;  // empty: the caller picks runs/<model>-<timestamp>
  std::string resume;    // checkpoint or run directory; empty = fresh run
  uint64_t seed = 0;
  int threads = 0;             // compute threads per rank; 0 = the node's usable CPUs / ranks on the node
  int64_t eval_every = 1;      // epochs; 0 = never
  int64_t checkpoint_every = 1;  // epochs; 0 = only the final checkpoint
  int keep_checkpoints = 3;    // newest kept; 0 = keep all
  // The final epoch's model.safetensors copied into the MLflow run's artifacts as well (one
  // copy, not one per checkpoint, so that a long run does not fill the disk).
  bool log_final_weights = true;
  std::string progress = "auto";  // auto | bar | plain | none
  int64_t check_sync = 0;      // steps between replica-consistency checks; 0 = off
  double bucket_mb = 0;        // gradient allreduce bucket size in MiB; 0 = dist::auto_bucket_bytes
  std::string overlap = "thread";          // thread | hooks | off (dist::SyncMode)
  std::string allreduce = "auto";          // ring | hierarchical | auto (dist::AllreduceAlgo)
  std::string grad_compression = "none";   // none | fp16 | bf16 (dist::GradCompression)
  std::string gpu_allreduce = "mpi";       // nccl | mpi | auto (dist::GpuAllreduce); mpi until
                                           // NCCL has passed its GPU checks
  // A rank that waits on MPI longer than this many seconds ends the job (dist/watchdog.h);
  // 0 = no watchdog. The default is PyTorch DDP's collective timeout.
  double timeout = 1800;
  std::string device = "auto";     // auto | cpu | cuda (core/device.h)
  std::string precision = "auto";  // auto | fp32 | tf32 | bf16 | fp16
  std::string gpu_layout = "nchw";  // nchw | nhwc (core/device.h)
  bool deterministic = false;      // GPU: deterministic cuDNN algorithms
  bool explain_plan = false;       // print each layer's chosen implementation at start

  std::string config;  // the --config file read, if any (not part of to_config)

  // The learning-rate schedule spec to hand to parse_lr_schedule: `schedule` with the warmup
  // of --warmup-epochs prepended ("warmup:5+cosine").
  std::string schedule_spec() const;

  bool operator==(const TrainOptions&) const = default;
};

// argv as main() gets it (argv[0] is the program name). Throws mpicnn::Error with one line
// naming the flag, or the config file, line and key, and the accepted values.
TrainOptions parse_train_options(int argc, const char* const* argv);
// The arguments after the program name.
TrainOptions parse_train_options(const std::vector<std::string>& args);
// The same, with a base configuration (to_config's keys and values) under the command line and
// --config file: values it holds replace the defaults. Errors about its values name
// `base_name` and the key ("runs/x/checkpoints/epoch-0002/trainer.json: model").
using Config = std::map<std::string, std::string>;
TrainOptions parse_train_options(const std::vector<std::string>& args, const Config* base,
                                 const std::string& base_name);

// The --help text: every option with its default, the config file format, examples.
std::string train_help();

// The long name of every option ./train takes (what --config files and sweep grids use as keys),
// in --help order; help and config included.
std::vector<std::string> option_names();

// ./train's flag table, one row per flag in --help order (core/cli.h's Flag: names, help, the
// field it fills and its conversion, the tasks that take it, a sample value). Parsing, --help,
// config keys, option_names, to_config and the per-task refusals all walk it.
using Flag = cli::Flag<TrainOptions>;
const std::vector<Flag>& train_flags();

// Every effective option (keys = long option names, values as the command line takes them;
// help and config left out), for checkpoints and summary.json. Passing each pair back as
// "--key=value" (or as config file lines) gives the same TrainOptions.
std::map<std::string, std::string> to_config(const TrainOptions& options);

}  // namespace mpicnn::train
