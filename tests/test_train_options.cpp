// Tests of ./train's option parsing (src/train/options.*): defaults, every flag in its long and
// short forms, -lr, config files and their precedence, the to_config round trip, one test per
// kind of error (checked by message text), every row of the flag table under every task, and the
// help text. No training here.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/check.h"
#include "core/cli.h"
#include "core/common_flags.h"
#include "core/gpu.h"
#include "data/dataset.h"
#include "dist/nccl_backend.h"
#include "models/registry.h"
#include "train/options.h"
#include "testing.h"

namespace fs = std::filesystem;
using mpicnn::Task;
using mpicnn::testing::expect_error;
using mpicnn::train::Flag;
using mpicnn::train::parse_train_options;
using mpicnn::train::train_flags;
using mpicnn::train::to_config;
using mpicnn::train::TrainOptions;

namespace {

TrainOptions parse(std::vector<std::string> args) { return parse_train_options(args); }

void expect_parse_error(std::vector<std::string> args, const std::string& part) {
  expect_error([&] { parse(args); }, part);
}

// A config file in a private temporary directory, removed afterwards.
struct TempConfig {
  mpicnn::testing::TempDir dir;
  fs::path path;
  explicit TempConfig(const std::string& text) : path(dir.path / "train.cfg") {
    std::ofstream(path) << text;
  }
  std::string str() const { return path.string(); }
};

// Options that differ from every default, as long flags.
const std::vector<std::string> kAllLong = {
    "--model", "resnet20", "--data", "/tmp/cifar", "--dataset", "cifar10", "--val-split", "0.25",
    "--test-data", "/tmp/cifar-test", "--batch-size", "128", "--accumulate", "4",
    "--epochs", "30", "--learning-rate", "0.2", "--momentum", "0.8", "--weight-decay", "1e-4",
    "--optimizer", "lars", "--lars-eta", "0.002", "--nesterov", "--schedule", "step:10:0.5", "--warmup-epochs", "2",
    "--scale-lr", "--label-smoothing", "0.1", "--no-decay-bn-bias", "--workers", "4", "--shuffle-buffer", "500", "--mean", "0.5,0.4,0.3", "--std", "0.2,0.25,0.3",
    "--augment", "crop-flip", "--image-size", "36", "--skip-bad", "--distribute-data=false",
    "--save-dir", "runs/x", "--resume", "runs/y", "--seed", "18446744073709551615", "--threads",
    "6", "--eval-every", "2", "--checkpoint-every", "5", "--keep-checkpoints", "0",
    "--log-final-weights=false", "--progress",
    "plain", "--check-sync", "100", "--bucket-mb", "12.5", "--device", "cpu",
    "--init-weights", "r20.safetensors", "--init-weights-partial", "fc,bn1.weight",
    "--freeze", "conv1,bn1,layer1", "--freeze-backbone", "--freeze-bn", "--head-lr-mult", "10"};

}  // namespace

TEST_CASE("train options: defaults") {
  const TrainOptions o = parse({});
  CHECK(!o.help);
  CHECK(o.model == "lenet");
  CHECK(o.dataset == "fashion-mnist");
  CHECK(o.data == mpicnn::data::kFashionMnistDefaultPath);
  CHECK(o.val_split == 0.1);
  CHECK(o.test_data.empty());
  CHECK(o.batch_size == 64);
  CHECK(o.epochs == 10);
  CHECK(o.learning_rate == 0.05);
  CHECK(o.momentum == 0.9);
  CHECK(o.weight_decay == 5e-4);
  CHECK(o.optimizer == "sgd");
  CHECK(!o.nesterov);
  CHECK(o.schedule == "cosine");
  CHECK(o.schedule_spec() == "cosine");
  CHECK(o.warmup_epochs == 0);
  CHECK(!o.scale_lr);
  CHECK(o.workers == 2);
  CHECK(o.mean.empty());
  CHECK(o.std.empty());
  CHECK(o.augment == "none");
  CHECK(o.image_size == 0);
  CHECK(!o.skip_bad);
  CHECK(o.distribute_data);
  CHECK(o.save_dir.empty());
  CHECK(o.resume.empty());
  CHECK(o.seed == 0);
  CHECK(o.threads == 0);
  CHECK(o.eval_every == 1);
  CHECK(o.checkpoint_every == 1);
  CHECK(o.keep_checkpoints == 3);
  CHECK(o.log_final_weights);
  CHECK(o.progress == "auto");
  CHECK(o.check_sync == 0);
  CHECK(o.bucket_mb == 0);
  CHECK(o.device == "auto");
  CHECK(o.config.empty());
  // The argc/argv form skips the program name.
  const char* argv[] = {"./train"};
  CHECK(parse_train_options(1, argv) == o);
}

TEST_CASE("train options: every flag, long forms") {
  const TrainOptions o = parse(kAllLong);
  CHECK(o.model == "resnet20");
  CHECK(o.data == "/tmp/cifar");
  CHECK(o.dataset == "cifar10");
  CHECK(o.val_split == 0.25);
  CHECK(o.test_data == "/tmp/cifar-test");
  CHECK(o.batch_size == 128);
  CHECK(o.accumulate == 4);
  CHECK(o.epochs == 30);
  CHECK(o.learning_rate == 0.2);
  CHECK(o.momentum == 0.8);
  CHECK(o.weight_decay == 1e-4);
  CHECK(o.nesterov);
  CHECK(o.schedule == "step:10:0.5");
  CHECK(o.warmup_epochs == 2);
  CHECK(o.schedule_spec() == "warmup:2+step:10:0.5");
  CHECK(o.scale_lr);
  CHECK(o.label_smoothing == 0.1);
  CHECK(o.no_decay_bn_bias);
  CHECK(o.optimizer == "lars");
  CHECK(o.lars_eta == 0.002);
  CHECK(o.workers == 4);
  CHECK(o.shuffle_buffer == 500);
  CHECK(o.mean == std::vector<float>{0.5f, 0.4f, 0.3f});
  CHECK(o.std == std::vector<float>{0.2f, 0.25f, 0.3f});
  CHECK(o.augment == "crop-flip");
  CHECK(o.image_size == 36);
  CHECK(o.skip_bad);
  CHECK(!o.distribute_data);
  CHECK(o.save_dir == "runs/x");
  CHECK(o.resume == "runs/y");
  CHECK(o.seed == 18446744073709551615ull);
  CHECK(o.threads == 6);
  CHECK(o.eval_every == 2);
  CHECK(o.checkpoint_every == 5);
  CHECK(o.keep_checkpoints == 0);
  CHECK(!o.log_final_weights);
  CHECK(o.progress == "plain");
  CHECK(o.check_sync == 100);
  CHECK(o.bucket_mb == 12.5);
  CHECK(o.device == "cpu");
  CHECK(o.init_weights == "r20.safetensors");
  CHECK(o.init_weights_partial == std::vector<std::string>{"fc", "bn1.weight"});
  CHECK(o.freeze == std::vector<std::string>{"conv1", "bn1", "layer1"});
  CHECK(o.freeze_backbone);
  CHECK(o.freeze_bn);
  CHECK(o.head_lr_mult == 10);

  const TrainOptions a = parse({"--optimizer=adamw", "--progress=none", "--augment=imagenet",
                                "--dataset=synthetic", "--schedule=multistep:3,6:0.1"});
  CHECK(a.optimizer == "adamw");
  CHECK(a.progress == "none");
  CHECK(a.augment == "imagenet");
  CHECK(a.dataset == "synthetic");
  CHECK(a.data.empty());  // synthetic data needs no path
  CHECK(a.schedule == "multistep:3,6:0.1");
}

TEST_CASE("train options: short forms") {
  const TrainOptions o =
      parse({"-m", "resnet18", "-d", "data/faces", "-b", "32", "-e", "3", "-w", "0", "-s", "runs/r"});
  CHECK(o.model == "resnet18");
  CHECK(o.data == "data/faces");
  CHECK(o.dataset == "auto");  // a path alone: its format is detected
  CHECK(o.batch_size == 32);
  CHECK(o.epochs == 3);
  CHECK(o.workers == 0);
  CHECK(o.save_dir == "runs/r");
  CHECK(parse({"-b16"}).batch_size == 16);  // Boost's adjacent short value
  CHECK(parse({"-h"}).help);
  CHECK(parse({"--help"}).help);
  // --help wins over values that would be refused, so the user always gets the help.
  CHECK(parse({"-b", "0", "--help"}).help);
}

TEST_CASE("train options: -lr forms") {
  CHECK(parse({"-lr", "0.1"}).learning_rate == 0.1);
  CHECK(parse({"-lr=0.125"}).learning_rate == 0.125);
  CHECK(parse({"--learning-rate", "0.2"}).learning_rate == 0.2);
  CHECK(parse({"--learning-rate=0.3"}).learning_rate == 0.3);
  CHECK(parse({"-b", "8", "-lr", "1e-3", "-e", "2"}).learning_rate == 1e-3);
  expect_parse_error({"-lr0.1"}, "unknown option '-lr0.1' (-lr/--learning-rate takes its value as -lr LR");
  expect_parse_error({"-lr", "fast"}, "-lr/--learning-rate: 'fast' is not a number > 0");
  expect_parse_error({"-lr=0"}, "-lr/--learning-rate: '0' is not a number > 0");
}

TEST_CASE("train options: switches") {
  CHECK(parse({"--nesterov"}).nesterov);
  CHECK(parse({"--nesterov=true"}).nesterov);
  CHECK(parse({"--nesterov=on"}).nesterov);
  CHECK(!parse({"--nesterov=false"}).nesterov);
  CHECK(!parse({"--nesterov=0"}).nesterov);
  CHECK(parse({"--scale-lr=yes"}).scale_lr);
  CHECK(parse({"--skip-bad=1"}).skip_bad);
  CHECK(parse({"--distribute-data"}).distribute_data);
  CHECK(!parse({"--distribute-data=false"}).distribute_data);
  CHECK(!parse({"--distribute-data=off"}).distribute_data);
  CHECK(!parse({"--distribute-data=0"}).distribute_data);
  CHECK(!parse({"--distribute-data=OFF"}).distribute_data);
  // A switch does not swallow the next option.
  const TrainOptions o = parse({"--nesterov", "--epochs", "4"});
  CHECK(o.nesterov);
  CHECK(o.epochs == 4);
  CHECK(!parse({"--distribute-data", "false"}).distribute_data);
  CHECK(!parse({"--distribute-data", "off", "-e", "2"}).distribute_data);
  expect_parse_error({"--skip-bad", "data/x"}, "--skip-bad: 'data/x' is not a switch value");
  expect_parse_error({"-e", "2", "data/x"}, "unexpected argument 'data/x'");
  expect_parse_error({"--nesterov=maybe"},
                     "--nesterov: 'maybe' is not a switch value (true, on, yes, 1, false, off");
}

TEST_CASE("train options: dataset and data") {
  CHECK(parse({"-d", "x.csv"}).dataset == "auto");
  const TrainOptions f = parse({"--dataset", "fashion-mnist", "-d", "/data/fm"});
  CHECK(f.dataset == "fashion-mnist");
  CHECK(f.data == "/data/fm");
  CHECK(parse({"--dataset", "fashion-mnist"}).data == mpicnn::data::kFashionMnistDefaultPath);
  CHECK(parse({"--dataset", "csv", "-d", "t.csv"}).dataset == "csv");
  expect_parse_error({"--dataset", "csv"},
                     "--dataset: 'csv' needs -d/--data PATH (only fashion-mnist and synthetic");
  expect_parse_error({"--dataset", "auto"}, "--dataset: 'auto' needs -d/--data PATH");
  expect_parse_error({"--dataset", "svhn"},
                     "--dataset: 'svhn' is not one of auto, fashion-mnist, mnist, idx, "
                     "imagefolder, csv, cifar10, cifar100, synthetic, shards, voc or coco");
}

TEST_CASE("train options: config file and command-line precedence") {
  TempConfig cfg(
      "# a run\n"
      "model = resnet20   # the CIFAR net\n"
      "dataset = synthetic\n"
      "\n"
      "batch-size = 32\n"
      "epochs = 7\n"
      "nesterov = true\n"
      "distribute-data = off\n"
      "mean = 0.5\n"
      "save-dir = runs/from-file\n");
  const TrainOptions o = parse({"--config", cfg.str(), "-b", "16", "--save-dir=runs/cli"});
  CHECK(o.config == cfg.str());
  CHECK(o.model == "resnet20");
  CHECK(o.dataset == "synthetic");
  CHECK(o.batch_size == 16);  // the command line wins
  CHECK(o.epochs == 7);
  CHECK(o.nesterov);
  CHECK(!o.distribute_data);
  CHECK(o.mean == std::vector<float>{0.5f});
  CHECK(o.save_dir == "runs/cli");
  CHECK(o.learning_rate == 0.05);  // neither: the default
  // Order does not matter: a flag before --config still overrides the file.
  CHECK(parse({"-e", "2", "--config=" + cfg.str()}).epochs == 2);
}

TEST_CASE("train options: config file errors") {
  {
    TempConfig cfg("model = lenet\nbatch-sise = 3\n");
    expect_error([&] { parse({"--config", cfg.str()}); },
                 cfg.str() + ":2: unknown key 'batch-sise' (keys are the long option names: "
                             "model, data,");
  }
  {
    TempConfig cfg("# c\nepochs = 3\nbatch-size = many\n");
    expect_error([&] { parse({"--config", cfg.str()}); },
                 cfg.str() + ":3: batch-size: 'many' is not an integer >= 1");
  }
  {
    TempConfig cfg("model = lenet5\n");
    expect_error([&] { parse({"--config", cfg.str()}); },
                 cfg.str() + ":1: model: unknown model 'lenet5' (known: lenet, resnet20");
  }
  {
    TempConfig cfg("epochs\n");
    expect_error([&] { parse({"--config", cfg.str()}); }, cfg.str() + ": ");
    expect_error([&] { parse({"--config", cfg.str()}); }, "expected 'key = value' lines");
  }
  {
    TempConfig cfg("help = true\n");  // not a config key
    expect_error([&] { parse({"--config", cfg.str()}); }, "unknown key 'help'");
  }
  expect_parse_error({"--config", "/nonexistent/train.cfg"},
                     "--config: cannot read '/nonexistent/train.cfg' (No such file");
}

TEST_CASE("train options: to_config round trip") {
  for (const auto& args : {std::vector<std::string>{}, kAllLong,
                           std::vector<std::string>{"--dataset", "synthetic", "--optimizer",
                                                    "adamw", "-lr", "0.1", "--seed", "7"}}) {
    const TrainOptions o = parse(args);
    const auto config = to_config(o);
    CHECK(config.count("help") == 0);
    CHECK(config.count("config") == 0);
    std::vector<std::string> flags;
    std::string file_text;
    for (const auto& [k, v] : config) {
      flags.push_back("--" + k + "=" + v);
      file_text += k + " = " + v + "\n";
    }
    const TrainOptions back = parse(flags);
    CHECK(back == o);
    CHECK(to_config(back) == config);
    std::vector<std::string> separate;  // "--key" "value": empty values as empty words
    for (const auto& [k, v] : config) separate.insert(separate.end(), {"--" + k, v});
    CHECK(parse(separate) == o);
    TempConfig cfg(file_text);
    TrainOptions from_file = parse({"--config", cfg.str()});
    CHECK(from_file.config == cfg.str());
    from_file.config.clear();
    CHECK(from_file == o);
  }
  // Doubles are written exactly (shortest form that reads back to the same bits).
  const TrainOptions odd = parse({"-lr", "0.1234567890123456789", "--weight-decay=3e-7"});
  CHECK(to_config(odd).at("learning-rate") == "0.12345678901234568");
  CHECK(parse({"-lr", to_config(odd).at("learning-rate")}).learning_rate == odd.learning_rate);
}

TEST_CASE("train options: command-line errors") {
  expect_parse_error({"--bogus"}, "unknown option '--bogus' (./train --help lists the options)");
  expect_parse_error({"--epoch", "3"}, "unknown option '--epoch'");  // no prefix guessing
  expect_parse_error({"-x"}, "unknown option '-x'");
  expect_parse_error({"--batch-size"}, "the required argument for option '--batch-size' is missing");
  expect_parse_error({"-b"}, "is missing");
  expect_parse_error({"train.cfg"}, "unexpected argument 'train.cfg': ./train takes only options");
  expect_parse_error({"-e", "2", "-e", "3"}, "cannot be specified more than once");
  expect_parse_error({"--help=yes"}, "--help");
}

TEST_CASE("train options: value errors") {
  expect_parse_error({"-b", "abc"}, "-b/--batch-size: 'abc' is not an integer >= 1");
  expect_parse_error({"-b", "0"}, "-b/--batch-size: '0' is not an integer >= 1");
  expect_parse_error({"-b", "12x"}, "-b/--batch-size: '12x' is not an integer >= 1");
  expect_parse_error({"--batch-size=99999999999999999999"}, "is not an integer >= 1");
  expect_parse_error({"-e", "0"}, "-e/--epochs: '0' is not an integer >= 1");
  expect_parse_error({"--val-split", "1"}, "--val-split: '1' is not a fraction in [0, 1)");
  expect_parse_error({"--val-split=-0.1"}, "--val-split: '-0.1' is not a fraction in [0, 1)");
  expect_parse_error({"--val-split=x"}, "--val-split: 'x' is not a fraction in [0, 1)");
  expect_parse_error({"--momentum=1"}, "--momentum: '1' is not a number in [0, 1)");
  expect_parse_error({"--momentum=nan"}, "--momentum: 'nan' is not a number in [0, 1)");
  expect_parse_error({"--weight-decay=-1"}, "--weight-decay: '-1' is not a number >= 0");
  expect_parse_error({"--optimizer", "adam"}, "--optimizer: 'adam' is not one of sgd, adamw or lars");
  expect_parse_error({"--warmup-epochs=-1"}, "--warmup-epochs: '-1' is not an integer >= 0");
  expect_parse_error({"-w", "-1"}, "-w/--workers: '-1' is not an integer >= 0");
  expect_parse_error({"--workers=-1"}, "-w/--workers: '-1' is not an integer >= 0");
  expect_parse_error({"--workers=3000000000"}, "-w/--workers: '3000000000' is not an integer");
  expect_parse_error({"--seed=-1"}, "--seed: '-1' is not an integer from 0 to 2^64-1");
  expect_parse_error({"--threads=two"}, "--threads: 'two' is not an integer >= 0");
  expect_parse_error({"--eval-every=-2"}, "--eval-every: '-2' is not an integer >= 0");
  expect_parse_error({"--checkpoint-every=x"}, "--checkpoint-every: 'x' is not an integer >= 0");
  expect_parse_error({"--keep-checkpoints=-1"}, "--keep-checkpoints: '-1' is not an integer");
  expect_parse_error({"--check-sync=1.5"}, "--check-sync: '1.5' is not an integer >= 0");
  expect_parse_error({"--bucket-mb", "-1"}, "--bucket-mb: '-1' is not a number >= 0 (MiB; 0 = auto)");
  expect_parse_error({"--timeout", "-1"}, "--timeout: '-1' is not a number of seconds >= 0 (0 = off)");
  expect_parse_error({"--timeout", "soon"}, "--timeout: 'soon' is not a number of seconds >= 0");
  expect_parse_error({"--progress", "fancy"},
                     "--progress: 'fancy' is not one of auto, bar, plain or none");
  expect_parse_error({"--augment", "mixup"},
                     "--augment: 'mixup' is not one of none, flip, crop-flip or imagenet");
  if (!mpicnn::gpu::compiled_in())
    expect_parse_error({"--device", "cuda"},
                       "--device cuda: this build has no CUDA backend (rebuild with make CUDA=1 "
                       "on a machine with nvcc)");
  expect_parse_error({"--device", "tpu"}, "--device: 'tpu' is not one of auto, cpu or cuda");
  // A build without NCCL refuses nccl where it is asked; one with NCCL decides at start-up
  // (dist::resolve_gpu_allreduce, which tests/test_device_sync.cpp covers).
  if (!mpicnn::dist::nccl::compiled_in())
    expect_parse_error({"--gpu-allreduce", "nccl"},
                       "--gpu-allreduce nccl: this build has no NCCL (rebuild with make CUDA=1 where "
                       "nccl.h is under CUDA_HOME or NCCL_HOME)");
  else
    CHECK(parse({"--gpu-allreduce", "nccl"}).gpu_allreduce == "nccl");
  expect_parse_error({"--gpu-allreduce", "ring"}, "--gpu-allreduce: 'ring' is not one of nccl, mpi or auto");
  expect_parse_error({"--precision", "fp8"},
                     "--precision: 'fp8' is not one of auto, fp32, tf32, bf16 or fp16");
  expect_parse_error({"--mean", "0.5,x"}, "--mean: 'x' in '0.5,x' is not a number");
  expect_parse_error({"--mean", "0.1,0.2"}, "--mean: '0.1,0.2' is not a list of 1 or 3 numbers");
  expect_parse_error({"--std", "0.2,0,0.2"}, "--std: '0.2,0,0.2' is not a list of numbers > 0");
  expect_parse_error({"--in-channels", "2"}, "--in-channels: '2' is not 0 (the data's own), 1 or 3");
  CHECK(parse({"--in-channels", "1"}).in_channels == 1);
  expect_parse_error({"--task", "detection", "-d", "x", "--in-channels", "1"},
                     "--in-channels: not supported with --task detection yet");
  expect_parse_error({"--image-size", "8"},
                     "--image-size: '8' is below lenet's smallest input (expected 0 = auto, or "
                     ">= 12)");
}

TEST_CASE("train options: model, schedule and cross-option errors") {
  std::string known;
  for (const auto& s : mpicnn::model_specs()) known += (known.empty() ? "" : ", ") + s.name;
  expect_parse_error({"-m", "resnet19"},
                     "-m/--model: unknown model 'resnet19' (known: " + known + ")");
  for (const auto& s : mpicnn::model_specs()) CHECK(parse({"-m", s.name}).model == s.name);
  expect_parse_error({"--schedule", "linear"},
                     "--schedule: learning-rate schedule 'linear': unknown schedule 'linear'");
  expect_parse_error({"--schedule", "step:0:0.1"}, "--schedule: learning-rate schedule");
  // cosine needs epochs left after the warmup
  expect_parse_error({"-e", "3", "--warmup-epochs", "3"}, "--warmup-epochs: learning-rate schedule");
  expect_parse_error({"--warmup-epochs", "2", "--schedule", "warmup:1+cosine"},
                     "--warmup-epochs: the schedule 'warmup:1+cosine' has its own warmup");
  CHECK(parse({"--schedule", "warmup:2:0.5+cosine:0.001"}).schedule_spec() ==
        "warmup:2:0.5+cosine:0.001");
  expect_parse_error({"--nesterov", "--optimizer", "adamw"},
                     "--nesterov: Nesterov momentum needs --optimizer sgd or lars and --momentum > 0");
  expect_parse_error({"--nesterov", "--momentum", "0"}, "--nesterov: Nesterov momentum needs");
}

TEST_CASE("train options: label smoothing, no decay on BatchNorm and biases, LARS") {
  const TrainOptions o = parse({});
  CHECK(o.label_smoothing == 0);
  CHECK(!o.no_decay_bn_bias);
  CHECK(parse({"--label-smoothing", "0"}).label_smoothing == 0);
  CHECK(to_config(parse({"--label-smoothing", "0.1"})).at("label-smoothing") == "0.1");
  CHECK(to_config(parse({"--no-decay-bn-bias"})).at("no-decay-bn-bias") == "true");
  CHECK(parse({}).accumulate == 1);
  CHECK(to_config(parse({"--accumulate", "8"})).at("accumulate") == "8");
  expect_parse_error({"--accumulate", "0"}, "--accumulate: '0'");
  expect_parse_error({"--label-smoothing", "1"}, "--label-smoothing: '1' is not a number in [0, 1)");
  expect_parse_error({"--label-smoothing", "-0.1"}, "--label-smoothing");
  expect_parse_error({"--task", "detection", "-d", "x", "--label-smoothing", "0.1"}, "--label-smoothing");
  const TrainOptions lars = parse({"--optimizer", "lars", "--lars-eta", "0.02", "--nesterov"});
  CHECK(lars.optimizer == "lars");
  CHECK(lars.lars_eta == 0.02);
  CHECK(parse({}).lars_eta == 0.001);
  expect_parse_error({"--lars-eta", "0"}, "--lars-eta: '0' is not a number > 0");
  expect_parse_error({"--optimizer", "adamw", "--nesterov"}, "--nesterov: Nesterov momentum needs");
  expect_parse_error({"--lars-eta", "0.02"}, "--lars-eta: the trust coefficient is LARS's; it needs --optimizer lars");
  bool cuda_build = true;  // where --device cuda parses at all
  try {
    parse({"--device", "cuda"});
  } catch (const mpicnn::Error&) {
    cuda_build = false;
  }
  if (cuda_build)
    expect_parse_error({"--optimizer", "lars", "--device", "cuda"}, "--optimizer lars: runs on the CPU only");
}

TEST_CASE("train options: fine-tuning defaults and errors") {
  const TrainOptions o = parse({});
  CHECK(o.init_weights.empty());
  CHECK(o.freeze.empty());
  CHECK(!o.freeze_backbone);
  CHECK(!o.freeze_bn);
  CHECK(o.head_lr_mult == 1);
  CHECK(to_config(o).at("freeze") == "");
  CHECK(to_config(parse({"--freeze", "conv1,layer1"})).at("freeze") == "conv1,layer1");
  expect_parse_error({"--head-lr-mult", "0"}, "--head-lr-mult: '0' is not a number > 0");
  expect_parse_error({"--head-lr-mult", "-2"}, "--head-lr-mult");
  expect_parse_error({"--freeze", "conv1,,bn1"}, "--freeze: 'conv1,,bn1' is not a comma list");
  expect_parse_error({"--freeze", "conv1,"}, "--freeze: 'conv1,' ends with a comma");
  expect_parse_error({"--init-weights-partial", "fc"}, "--init-weights-partial: needs --init-weights FILE");
  CHECK(parse({"--freeze-backbone", "--freeze-bn"}).freeze_bn);  // together: fine
}

TEST_CASE("train options: --task detection, its defaults, sizes and errors") {
  const TrainOptions c = parse({});
  CHECK(c.task == mpicnn::Task::Classify);
  CHECK(c.min_size == 800);
  CHECK(c.max_size == 1333);
  CHECK(c.trainable_layers == 3);
  const TrainOptions o = parse({"--task", "detection", "-d", "data/shapes"});
  CHECK(o.task == mpicnn::Task::Detection);
  CHECK(o.model == "fasterrcnn_resnet50_fpn");
  CHECK(o.dataset == "auto");  // the trainer tells VOC folders from COCO JSON
  CHECK(o.trainable_layers == 5);  // from random weights everything trains (torchvision)
  CHECK(o.batch_size == 2);
  CHECK(o.learning_rate == 0.01);
  CHECK(o.weight_decay == 1e-4);
  CHECK(o.augment == "flip");
  const TrainOptions d = parse({"--task", "detection", "-d", "x", "-m", "fasterrcnn_resnet18_fpn",
                                "-b", "4", "-lr", "0.02", "--min-size", "160", "--max-size", "320",
                                "--trainable-layers", "5", "--augment", "none", "--box-batch-size-per-image",
                                "128", "--rpn-post-nms-top-n-test", "300"});
  CHECK(d.model == "fasterrcnn_resnet18_fpn");
  CHECK(d.batch_size == 4);
  CHECK(d.learning_rate == 0.02);
  CHECK(d.min_size == 160);
  CHECK(d.max_size == 320);
  CHECK(d.trainable_layers == 5);
  CHECK(d.augment == "none");
  CHECK(d.box_batch_size_per_image == 128);
  CHECK(d.rpn_post_nms_top_n_test == 300);
  CHECK(o.box_batch_size_per_image == 512);  // torchvision's defaults
  CHECK(o.rpn_post_nms_top_n_test == 1000);
  // The recorded configuration (what a resume parses back) gives the same options.
  std::vector<std::string> flags;
  for (const auto& [k, v] : to_config(d)) flags.push_back("--" + k + "=" + v);
  CHECK(parse(flags) == d);
  expect_parse_error({"--task", "detection"}, "--task detection: needs -d/--data PATH");
  expect_parse_error({"--task", "segment"}, "--task: 'segment' is not one of classify or detection");
  expect_parse_error({"--task", "detection", "-d", "x", "-m", "resnet18"},
                     "-m/--model: unknown detection model 'resnet18'");
  expect_parse_error({"--task", "detection", "-d", "x", "--min-size", "400", "--max-size", "300"},
                     "--max-size: 300 is below --min-size 400");
  expect_parse_error({"--task", "detection", "-d", "x", "--trainable-layers", "6"},
                     "--trainable-layers: '6' is not in 0..5");
  expect_parse_error({"--task", "detection", "-d", "x", "--trainable-layers", "3"},
                     "--trainable-layers: 3 without --init-weights: from random weights every stage trains");
  CHECK(parse({"--task", "detection", "-d", "x", "--init-weights", "w.safetensors"}).trainable_layers == 3);
  CHECK(parse({"--task", "detection", "-d", "x", "--init-weights", "w.safetensors", "--trainable-layers", "1"})
            .trainable_layers == 1);
  expect_parse_error({"--task", "detection", "-d", "x", "--augment", "crop-flip"},
                     "--augment: detection supports none or flip");
  expect_parse_error({"--task", "detection", "-d", "x", "--freeze-bn"},
                     "--freeze-bn: not supported with --task detection yet");
  // Every other flag a task does not take: "train options: every row of the flag table".
  expect_parse_error({"--task", "detection", "-d", "x", "--dataset", "csv"},
                     "--dataset: --task detection reads Pascal VOC folders (voc) or COCO JSON (coco), not csv");
  expect_parse_error({"--min-size", "300"}, "--min-size: only with --task detection");
  expect_parse_error({"--box-batch-size-per-image", "64"}, "--box-batch-size-per-image: only with --task detection");
  expect_parse_error({"--task", "detection", "-d", "x", "--rpn-post-nms-top-n-test", "0"},
                     "--rpn-post-nms-top-n-test");
  expect_parse_error({"-d", "x", "--dataset", "voc"}, "--dataset: voc needs --task detection");
}

namespace {

// The error parsing `args` over `base` gives; "" when it parses.
std::string parse_error(const std::vector<std::string>& args, const mpicnn::train::Config& base) {
  try {
    parse_train_options(args, &base, "base");
  } catch (const mpicnn::Error& e) {
    return e.message();
  }
  return "";
}

// The one line a run of task `t` gives for a flag, or a value of it, that the task does not take.
std::string refusal(const Flag& f, Task t) {
  return mpicnn::cli::flag_name(f.def) + (t == Task::Detection
                                              ? ": not supported with --task detection yet"
                                              : ": only with --task detection");
}

bool listed(const std::vector<std::string>& list, const std::string& v) {
  return std::find(list.begin(), list.end(), v) != list.end();
}


}  // namespace

// Walks the real table: a row added without a task decision or a sample value fails here, and a
// row's tasks column is proved against the parser for both tasks.
TEST_CASE("train options: every row of the flag table, under every task") {
  using mpicnn::cli::Tasks;
  for (const Flag& f : train_flags()) {
    const std::string name = f.def.name;
    if (!f.value) {  // the two rows that hold no option value
      CHECK_MESSAGE((f.def.kind == mpicnn::cli::Kind::Help || name == "config"), "row --", name,
                    " binds no field");
      continue;
    }
    CHECK_MESSAGE(f.tasks != Tasks::none, "row --", name, " does not say which tasks take it");
    const size_t samples = f.samples.size();
    CHECK_MESSAGE((samples == 1 || samples == 2), "row --", name,
                  " has no sample value (one, or one per task)");
    if (f.tasks == Tasks::none || (samples != 1 && samples != 2)) continue;
    for (Task t : {Task::Classify, Task::Detection}) {
      INFO("--", name, " under --task ", std::string(mpicnn::task_name(t)));
      // A run of task t on made-up data (nothing is opened), with weights to fine-tune from so
      // that every flag has what it needs; the command line's value overrides these.
      // (LARS: the optimizer --lars-eta needs.)
      const mpicnn::train::Config base = {{"task", mpicnn::task_name(t)},
                                          {"data", "x"},
                                          {"init-weights", "w.safetensors"},
                                          {"optimizer", "lars"}};
      const std::string value = f.sample(t);
      const std::vector<std::string> args = {"--" + name + "=" + value};
      const bool value_refused = f.refusal.task == t && listed(f.refusal.values, value);
      if (!takes(f.tasks, t) || value_refused) {
        CHECK(parse_error(args, base) == refusal(f, t));
      } else {
        const std::string error = parse_error(args, base);
        CHECK(error == "");
        if (!error.empty()) continue;
        const TrainOptions o = parse_train_options(args, &base, "base");
        const auto config = to_config(o);
        CHECK(config.at(name) == value);  // stored where to_config reads it, exactly
        CHECK_FALSE(f.value.same(o, TrainOptions{}));  // not the default: a refusal would show
        std::vector<std::string> flags;
        for (const auto& [k, v] : config) flags.push_back("--" + k + "=" + v);
        CHECK(parse(flags) == o);
      }
      // The values t refuses although it takes the flag, unless this build refuses them anyway
      // (--device cuda without CUDA: a run of the other task refuses it too).
      if (!takes(f.tasks, t) || f.refusal.task != t) continue;
      mpicnn::train::Config other = base;
      other["task"] = mpicnn::task_name(t == Task::Detection ? Task::Classify : Task::Detection);
      for (const std::string& v : f.refusal.values) {
        if (!parse_error({"--" + name + "=" + v}, other).empty()) continue;
        CHECK(parse_error({"--" + name + "=" + v}, base) == refusal(f, t));
      }
    }
  }
}

// What keeps the walk above honest: a row parses into a field no other row reads.
TEST_CASE("train options: each row of the flag table fills a field of its own") {
  const TrainOptions defaults;
  for (const Flag& f : train_flags()) {
    if (!f.value || f.samples.empty()) continue;
    const std::string name = f.def.name;
    TrainOptions o;
    f.value.parse(o, {f.sample(Task::Classify), "--" + name});
    CHECK_MESSAGE(!f.value.same(o, defaults), "--", name, "'s sample is its default");
    for (const Flag& g : train_flags())
      if (g.value && &g != &f)
        CHECK_MESSAGE(g.value.same(o, defaults), "--", name, " changes what --",
                      std::string(g.def.name), " holds");
  }
}

TEST_CASE("train options: help text") {
  const std::string help = mpicnn::train::train_help();
  for (const auto& [key, value] : to_config(parse({}))) {
    CHECK_MESSAGE(help.find("--" + key) != std::string::npos, "help does not mention --", key);
  }
  for (const char* s : {"--config", "--help", "-m, --model", "-d, --data", "-b, --batch-size",
                        "-e, --epochs", "-lr, --learning-rate", "-w, --workers", "-s, --save-dir",
                        "-h, --help", "Examples:", "mpiexec", "key = value", "[default 64]",
                        "[default lenet]", "[default 0.05]", "[default cosine]",
                        "--distribute-data=false", "one GPU per rank", "--precision", "--deterministic"}) {
    CHECK_MESSAGE(help.find(s) != std::string::npos, "help does not mention ", s);
  }
  for (const auto& s : mpicnn::model_specs())
    CHECK_MESSAGE(help.find(s.name) != std::string::npos, "help does not list ", s.name);
  CHECK(help.find(mpicnn::data::kFashionMnistDefaultPath) != std::string::npos);
  mpicnn::testing::expect_shared_flag_help(help);  // the flags ./pipeline_eval takes too
  // Lines fit a 100-column terminal (the examples are written to).
  CHECK(mpicnn::testing::longest_line(help) <= 100);
}
