// The options of `./pipeline_eval`: command line parsing (Boost.ProgramOptions), validation with
// one clear line per bad value, and the --help text. Not the evaluation: nothing here opens
// data, reads checkpoints, builds models or uses MPI.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace mpicnn {
struct TrainerState;  // io/checkpoint.h
}

namespace mpicnn::eval {

// Every field holds its effective value after parsing; 0 / empty means "take it from the
// checkpoint (or, with --weights, from torchvision's ImageNet eval recipe / the dataset)".
struct EvalOptions {
  bool help = false;  // -h/--help: the caller prints eval_help() and exits 0

  // what to evaluate: exactly one of checkpoint / weights (weights needs model)
  std::string checkpoint;  // a ./train run directory, RUN/latest or a checkpoint directory
  std::string weights;     // a safetensors state dict with torchvision's names
  std::string model;       // with --weights: a name from models/registry.h
  int num_classes = 0;     // with --weights: 0 = the dataset's class count
  int in_channels = 0;     // with --weights: 0 = 3

  // data
  std::string data;             // -d: dataset path (empty with dataset fashion-mnist: Debian's)
  std::string dataset = "auto";  // auto, fashion-mnist, mnist, idx, imagefolder, csv, cifar10, cifar100, synthetic
  std::string split = "auto";   // auto (test if the dataset has one, else all), train, test, val, all
  uint64_t limit = 0;           // evaluate the first N samples only; 0 = all
  bool skip_bad = false;        // skip undecodable images (counted and listed) instead of stopping

  // preprocessing (0 / empty = default, see above)
  int image_size = 0;          // model input height = width (the center crop)
  int resize = -1;             // shorter side before the center crop; -1 = default, 0 = no resize
  std::vector<float> mean, std;  // 1 or 3 values each

  // run
  int64_t batch_size = 32;  // images per predicted batch (>= 1)
  bool sequential = false;  // run every stage in rank 0 alone, one after the other (baseline)
  bool compare = false;     // also run the sequential baseline first (rank 0) and report speedup
  int threads = 0;          // compute threads per predicting rank; 0 = usable CPUs / predicting ranks on the node
  int credits = 0;          // in-flight samples allowed from a rank to one of the next stage's; 0 = 4 * batch size
  int batch_credits = 2;    // batches in flight per predicting rank (>= 1)
  std::string stages;       // which ranks run which stages, "read=1,decode=4,batch=1,predict=2" (eval/layout.h); empty = default for K
  std::string output;       // folder for predictions.csv and report.json; empty = write none
  bool json = false;        // print the JSON report on stdout instead of the text report
  std::string device = "auto";  // auto | cpu | cuda: where the predict stage runs
  std::string precision = "auto";  // auto | fp32 | tf32 | bf16 | fp16: its math (core/device.h)
  bool explain_plan = false;          // report each layer's chosen implementation
  std::string gpu_layout = "nchw";  // nchw | nhwc: the GPU's activations (core/device.h)
  double timeout = 1800;        // seconds a rank may wait on another before the job ends; 0 = never

  // Not flags: filled by with_run_data when the data is the checkpoint's run's own.
  bool run_data = false;        // data, dataset and split came from the checkpoint's record
  uint64_t synthetic_seed = 0;  // --dataset synthetic: the seed its samples are drawn with
  // The validation split the run held out of data without a test split (data/holdout.h), taken
  // again from the data with the run's seed and fraction; val_held_out = 0: none.
  double val_fraction = 0;
  uint64_t val_seed = 0, val_held_out = 0;
  bool run_test_data = false;  // data is the run's --test-data

  bool operator==(const EvalOptions&) const = default;
};

// The arguments after the program name. Throws mpicnn::Error with one line naming the flag and
// what is accepted, e.g. "--batch-size: 'x' is not an integer >= 1", "--weights needs --model",
// "give --checkpoint RUN or --weights FILE --model NAME (not both)".
EvalOptions parse_eval_options(const std::vector<std::string>& args);

// True when the data is to be the checkpoint's run's own: --checkpoint given, -d and --dataset
// not (parse_eval_options accepts a checkpoint without them).
bool wants_run_data(const EvalOptions& o);

// The options with the data the run trained on, as its checkpoint's trainer.json records it
// (`st`, read from `record`): its dataset kind and path (the absolute path newer runs record,
// else the path as ./train was given it), its seed for synthetic data, and the test split unless
// --split says otherwise; the run's --test-data instead when it had one; and when the run held
// out a validation split (data without a test split), exactly those held-out samples. `o` itself unless wants_run_data(o). What the record lacks, or a path
// that is not there, is one line naming -d/--data, the flag to pass instead.
EvalOptions with_run_data(EvalOptions o, const TrainerState& st, const std::string& record);

// Every option with its default and meaning, the stage layout for K ranks, examples.
std::string eval_help();

}  // namespace mpicnn::eval
