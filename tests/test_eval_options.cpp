// Tests of ./pipeline_eval's option parsing (src/eval/options.*): defaults, every flag in its long
// and short forms, switches, one test per kind of error (checked by message text, each naming
// its flag and fitting on one line), and the help text. No evaluation here.
#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/common_flags.h"
#include "core/gpu.h"
#include "data/dataset.h"
#include "eval/options.h"
#include "io/checkpoint.h"
#include "models/registry.h"
#include "testing.h"

using mpicnn::eval::EvalOptions;
using mpicnn::eval::parse_eval_options;

namespace {

EvalOptions parse(std::vector<std::string> args) { return parse_eval_options(args); }

// The smallest valid command lines, to which a test adds the flags it is about.
std::vector<std::string> with_checkpoint(std::vector<std::string> more = {}) {
  std::vector<std::string> a = {"--checkpoint", "runs/x", "-d", "/data/fm"};
  a.insert(a.end(), more.begin(), more.end());
  return a;
}
std::vector<std::string> with_weights(std::vector<std::string> more = {}) {
  std::vector<std::string> a = {"--weights", "r18.safetensors", "--model", "resnet18", "-d",
                                "photos"};
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

// The error contains `part` and is one line.
void expect_parse_error(std::vector<std::string> args, const std::string& part) {
  mpicnn::testing::expect_error([&] { parse(args); }, part);
  try {
    parse(args);
  } catch (const mpicnn::Error& e) {
    CHECK_MESSAGE(e.message().find('\n') == std::string::npos, "error is not one line: ",
                  e.message());
  }
}

}  // namespace

TEST_CASE("eval options: defaults") {
  const EvalOptions o = parse(with_checkpoint());
  CHECK(!o.help);
  CHECK(o.checkpoint == "runs/x");
  CHECK(o.weights.empty());
  CHECK(o.model.empty());
  CHECK(o.num_classes == 0);
  CHECK(o.in_channels == 0);
  CHECK(o.data == "/data/fm");
  CHECK(o.dataset == "auto");
  CHECK(o.split == "auto");
  CHECK(o.limit == 0);
  CHECK(!o.skip_bad);
  CHECK(o.image_size == 0);
  CHECK(o.resize == -1);
  CHECK(o.mean.empty());
  CHECK(o.std.empty());
  CHECK(o.batch_size == 32);
  CHECK(!o.sequential);
  CHECK(!o.compare);
  CHECK(o.threads == 0);
  CHECK(o.credits == 0);
  CHECK(o.batch_credits == 2);
  CHECK(o.stages.empty());  // layout_for(K)
  CHECK(o.output.empty());
  CHECK(!o.json);
  CHECK(o.device == "auto");
  // Only the two given fields differ from a default-constructed EvalOptions.
  EvalOptions d;
  d.checkpoint = "runs/x";
  d.data = "/data/fm";
  CHECK(o == d);
}

TEST_CASE("eval options: every flag, long forms") {
  const EvalOptions o =
      parse({"--weights", "w.safetensors", "--model", "resnet20", "--num-classes", "100",
             "--in-channels", "3", "--data", "/tmp/cifar", "--dataset", "cifar100", "--split",
             "train", "--limit", "18446744073709551615", "--skip-bad", "--image-size", "36",
             "--resize", "40", "--mean", "0.5,0.4,0.3", "--std", "0.2,0.25,0.3", "--batch-size",
             "128", "--compare", "--threads", "6", "--credits", "512", "--batch-credits", "3",
             "--stages", "read=1,decode=4,batch=1,predict=2", "--output", "out/e", "--json", "--device", "cpu"});
  CHECK(o.weights == "w.safetensors");
  CHECK(o.checkpoint.empty());
  CHECK(o.model == "resnet20");
  CHECK(o.num_classes == 100);
  CHECK(o.in_channels == 3);
  CHECK(o.data == "/tmp/cifar");
  CHECK(o.dataset == "cifar100");
  CHECK(o.split == "train");
  CHECK(o.limit == 18446744073709551615ull);
  CHECK(o.skip_bad);
  CHECK(o.image_size == 36);
  CHECK(o.resize == 40);
  CHECK(o.mean == std::vector<float>{0.5f, 0.4f, 0.3f});
  CHECK(o.std == std::vector<float>{0.2f, 0.25f, 0.3f});
  CHECK(o.batch_size == 128);
  CHECK(!o.sequential);
  CHECK(o.compare);
  CHECK(o.threads == 6);
  CHECK(o.credits == 512);
  CHECK(o.batch_credits == 3);
  CHECK(o.stages == "read=1,decode=4,batch=1,predict=2");
  CHECK(o.output == "out/e");
  CHECK(o.json);
  CHECK(o.device == "cpu");

  // '=' forms and the remaining choices
  const EvalOptions a = parse({"--checkpoint=runs/y/latest", "--data=x.csv", "--dataset=csv",
                               "--split=val", "--limit=10", "--resize=0", "--mean=0.5",
                               "--std=0.25", "--weights=", "--sequential",
                               "--device=auto", "--batch-size=1", "--credits=0",
                               "--batch-credits=1", "--threads=0", "--output="});
  CHECK(a.checkpoint == "runs/y/latest");
  CHECK(a.weights.empty());
  CHECK(a.in_channels == 0);
  CHECK(a.data == "x.csv");
  CHECK(a.dataset == "csv");
  CHECK(a.split == "val");
  CHECK(a.limit == 10);
  CHECK(a.resize == 0);
  CHECK(a.mean == std::vector<float>{0.5f});
  CHECK(a.std == std::vector<float>{0.25f});
  CHECK(a.sequential);
  CHECK(a.device == "auto");
  CHECK(a.batch_size == 1);
  CHECK(a.credits == 0);
  // normalize is batch's other name; the value is kept as --stages writes it
  CHECK(parse(with_checkpoint({"--stages=read+decode+normalize=2,predict=1"})).stages == "read+decode+batch=2,predict=1");
  CHECK(parse(with_checkpoint({"--stages", "auto"})).stages == "auto");  // calibrated at run time
  CHECK(a.batch_credits == 1);
  CHECK(a.output.empty());
}

TEST_CASE("eval options: every flag, choices") {
  for (const char* kind : {"auto", "fashion-mnist", "mnist", "idx", "imagefolder", "csv",
                           "cifar10", "cifar100", "synthetic"})
    CHECK(parse(with_checkpoint({"--dataset", kind})).dataset == kind);
  for (const char* split : {"auto", "train", "test", "val", "all"})
    CHECK(parse(with_checkpoint({"--split", split})).split == split);
  for (const auto& s : mpicnn::model_specs())
    CHECK(parse({"--weights", "w", "--model", s.name, "-d", "p"}).model == s.name);
  CHECK(parse(with_weights({"--in-channels", "1"})).in_channels == 1);
  CHECK(parse(with_weights({"--in-channels=3", "--num-classes=1000"})).num_classes == 1000);
  CHECK(parse(with_weights({"--num-classes", "1"})).num_classes == 1);
}

TEST_CASE("eval options: short forms") {
  const EvalOptions o = parse({"-c", "runs/r", "-d", "data/faces", "-b", "16", "-o", "out"});
  CHECK(o.checkpoint == "runs/r");
  CHECK(o.data == "data/faces");
  CHECK(o.dataset == "auto");
  CHECK(o.batch_size == 16);
  CHECK(o.output == "out");
  CHECK(parse({"--weights", "w", "-m", "lenet", "-d", "p"}).model == "lenet");
  CHECK(parse({"-c", "r", "-dp", "-b8"}).batch_size == 8);  // Boost's adjacent short values
  CHECK(parse({"-c", "r", "-dp"}).data == "p");
  CHECK(parse({"-h"}).help);
  CHECK(parse({"--help"}).help);
  // --help wins over values and combinations that would be refused.
  CHECK(parse({"-b", "0", "--help"}).help);
  CHECK(parse({"--help", "--sequential", "--compare"}).help);
}

TEST_CASE("eval options: switches") {
  CHECK(parse(with_checkpoint({"--skip-bad"})).skip_bad);
  CHECK(parse(with_checkpoint({"--skip-bad=true"})).skip_bad);
  CHECK(!parse(with_checkpoint({"--skip-bad=false"})).skip_bad);
  CHECK(parse(with_checkpoint({"--sequential=on"})).sequential);
  CHECK(!parse(with_checkpoint({"--sequential=0"})).sequential);
  CHECK(parse(with_checkpoint({"--compare=yes"})).compare);
  CHECK(!parse(with_checkpoint({"--compare=OFF"})).compare);
  CHECK(parse(with_checkpoint({"--json=1"})).json);
  CHECK(!parse(with_checkpoint({"--json=no"})).json);
  CHECK(!parse(with_checkpoint({"--json", "false"})).json);
  // A switch does not swallow the next option.
  const EvalOptions o = parse(with_checkpoint({"--json", "--batch-size", "4"}));
  CHECK(o.json);
  CHECK(o.batch_size == 4);
  // --sequential=false and --compare together are fine: only one of them is on.
  const EvalOptions c = parse(with_checkpoint({"--sequential=false", "--compare"}));
  CHECK(c.compare);
  CHECK(!c.sequential);
  expect_parse_error(with_checkpoint({"--timeout=-5"}),
                     "--timeout: '-5' is not a number of seconds >= 0 (0 = off)");
  CHECK(parse(with_checkpoint({"--timeout", "0"})).timeout == 0);
  CHECK(parse(with_checkpoint({})).timeout == 1800);
  expect_parse_error(with_checkpoint({"--json=maybe"}),
                     "--json: 'maybe' is not a switch value (true, on, yes, 1, false, off");
  expect_parse_error(with_checkpoint({"--skip-bad", "data/x"}),
                     "--skip-bad: 'data/x' is not a switch value");
}

TEST_CASE("eval options: dataset and data") {
  // fashion-mnist without a path: left empty, open_dataset uses the Debian package's files.
  const EvalOptions f = parse({"-c", "r", "--dataset", "fashion-mnist"});
  CHECK(f.dataset == "fashion-mnist");
  CHECK(f.data.empty());
  CHECK(parse({"-c", "r", "--dataset", "synthetic"}).data.empty());
  CHECK(parse({"-c", "r", "--dataset", "fashion-mnist", "-d", "/fm"}).data == "/fm");
  expect_parse_error({"--weights", "w", "--model", "lenet"},
                     "-d/--data: no dataset given (a path, or --dataset fashion-mnist)");
  expect_parse_error({"--weights", "w", "--model", "lenet", "--data="}, "-d/--data: no dataset given");
  expect_parse_error({"-c", "r", "--dataset", "csv"},
                     "--dataset: 'csv' needs -d/--data PATH (only fashion-mnist and synthetic");
  expect_parse_error({"-c", "r", "--dataset", "auto"}, "--dataset: 'auto' needs -d/--data PATH");
}

TEST_CASE("eval options: --checkpoint without -d evaluates the run's own data, test split") {
  using mpicnn::TrainerState;
  using mpicnn::eval::wants_run_data;
  using mpicnn::eval::with_run_data;
  mpicnn::testing::TempDir dir;
  const std::string data = dir.path.string(), record = "runs/x/checkpoints/epoch-0001/trainer.json";
  TrainerState st;
  st.seed = 7;
  st.config = {{"dataset", "fashion-mnist"}, {"data", data}, {"model", "lenet"}};

  // Only a checkpoint alone (an empty --data= is none) takes the run's data.
  for (const auto& args : {std::vector<std::string>{"-c", "r"}, {"-c", "r", "--data="}}) {
    const EvalOptions o = parse(args);
    CHECK(wants_run_data(o));
    const EvalOptions r = with_run_data(o, st, record);
    CHECK(r.dataset == "fashion-mnist");
    CHECK(r.data == data);
    CHECK(r.split == "test");  // never the training samples by default
    CHECK(r.run_data);
    CHECK(r.synthetic_seed == 7);
  }
  // -d or --dataset overrides it: nothing is taken from the record.
  for (const auto& args : {std::vector<std::string>{"-c", "r", "-d", "/fm"},
                           {"-c", "r", "--dataset", "fashion-mnist"},
                           {"-c", "r", "--dataset", "synthetic"}}) {
    const EvalOptions o = parse(args);
    CHECK_FALSE(wants_run_data(o));
    CHECK(with_run_data(o, st, record) == o);
  }
  CHECK_FALSE(wants_run_data(parse({"--weights", "w", "--model", "lenet", "-d", "p"})));
  // --split is kept.
  CHECK(with_run_data(parse({"-c", "r", "--split", "train"}), st, record).split == "train");

  // Newer runs record the absolute path, which wins over the path as ./train was given it.
  TrainerState moved = st;
  moved.config["data"] = "data/faces";
  moved.config["dataset"] = "auto";
  moved.data_path = data;
  const EvalOptions m = with_run_data(parse({"-c", "r"}), moved, record);
  CHECK(m.data == data);
  CHECK(m.dataset == "auto");
  // Synthetic data has no path; its samples are drawn with the run's seed.
  TrainerState synth = st;
  synth.config = {{"dataset", "synthetic"}, {"data", ""}};
  synth.seed = 123;
  const EvalOptions y = with_run_data(parse({"-c", "r"}), synth, record);
  CHECK((y.dataset == "synthetic" && y.data.empty() && y.synthetic_seed == 123 && y.split == "test"));

  // A run that held out a validation split: its one split ("train"), cut to exactly the
  // held-out samples with the run's seed and fraction; --split overrides it.
  TrainerState val = moved;
  val.val_fraction = 0.1;
  val.val_held_out = 21;
  const EvalOptions v = with_run_data(parse({"-c", "r"}), val, record);
  CHECK((v.split == "train" && v.val_fraction == 0.1 && v.val_seed == 7 && v.val_held_out == 21));
  const EvalOptions all = with_run_data(parse({"-c", "r", "--split", "all"}), val, record);
  CHECK((all.split == "all" && all.val_held_out == 0));
  CHECK(with_run_data(parse({"-c", "r"}), st, record).val_held_out == 0);
  // A run with --test-data: that data, its own kind and split.
  TrainerState td = val;
  td.val_held_out = 0;
  td.test_data_path = data;
  const EvalOptions t = with_run_data(parse({"-c", "r"}), td, record);
  CHECK((t.data == data && t.dataset == "auto" && t.split == "auto" && t.run_test_data && t.val_held_out == 0));
  td.test_data_path = (dir.path / "gone").string();
  mpicnn::testing::expect_error([&] { with_run_data(parse({"-c", "r"}), td, record); },
                                "--checkpoint: the run's --test-data " + td.test_data_path + " is not there");

  // What the record lacks is one line naming the flag to pass instead.
  auto expect_error = [&](TrainerState bad, const std::string& part) {
    mpicnn::testing::expect_error([&] { with_run_data(parse({"-c", "r"}), bad, record); }, part);
  };
  TrainerState none = st;
  none.config.erase("dataset");
  expect_error(none, "--checkpoint: " + record +
                         " does not record the dataset its run trained on; pass -d/--data PATH");
  TrainerState no_path = st;
  no_path.config = {{"dataset", "imagefolder"}};
  expect_error(no_path, "records dataset 'imagefolder' but not its path; pass -d/--data PATH");
  TrainerState gone = st;
  gone.config["data"] = "data/faces_gone";
  expect_error(gone, "--checkpoint: the run trained on data/faces_gone (relative to the folder "
                     "./train ran in), which is not there; pass -d/--data PATH");
  gone.data_path = (dir.path / "gone").string();
  expect_error(gone, "the run trained on " + gone.data_path + ", which is not there; pass -d/--data");
  TrainerState odd = st;
  odd.config["dataset"] = "lmdb";
  expect_error(odd, "records dataset 'lmdb', which ./pipeline_eval does not know; pass -d/--data");
}

TEST_CASE("eval options: checkpoint, weights and model") {
  expect_parse_error({"-d", "p"}, "give --checkpoint RUN or --weights FILE --model NAME");
  expect_parse_error({"-d", "p", "--model", "lenet"},
                     "give --checkpoint RUN or --weights FILE --model NAME");
  expect_parse_error({"-c", "r", "--weights", "w", "--model", "lenet", "-d", "p"},
                     "give --checkpoint RUN or --weights FILE --model NAME (not both)");
  expect_parse_error({"--weights", "w", "-d", "p"}, "--weights needs --model");
  expect_parse_error(with_checkpoint({"--model", "lenet"}),
                     "--model: the checkpoint names the model; --model goes with --weights");
  expect_parse_error(with_checkpoint({"-m", "lenet"}), "--model goes with --weights");
  expect_parse_error(with_checkpoint({"--num-classes", "10"}),
                     "--num-classes: the checkpoint names the");
  expect_parse_error(with_checkpoint({"--num-classes", "10"}), "--num-classes goes with --weights");
  expect_parse_error(with_checkpoint({"--in-channels", "1"}), "--in-channels goes with --weights");
  std::string known;
  for (const auto& s : mpicnn::model_specs()) known += (known.empty() ? "" : ", ") + s.name;
  expect_parse_error({"--weights", "w", "-m", "resnet19", "-d", "p"},
                     "-m/--model: unknown model 'resnet19' (known: " + known + ")");
  // A detector's state dict alone does not say its classes or resize: its run does.
  expect_parse_error({"--weights", "w", "-m", "fasterrcnn_resnet50_fpn", "-d", "p"},
                     "-m/--model fasterrcnn_resnet50_fpn: a detector is evaluated from its ./train --task "
                     "detection run (--checkpoint RUN");
}

TEST_CASE("eval options: command-line errors") {
  expect_parse_error(with_checkpoint({"--bogus"}),
                     "unknown option '--bogus' (./pipeline_eval --help lists the options)");
  expect_parse_error(with_checkpoint({"--check", "r"}), "unknown option '--check'");  // no guessing
  expect_parse_error(with_checkpoint({"-x"}), "unknown option '-x'");
  expect_parse_error(with_checkpoint({"--batch-size"}),
                     "the required argument for option '--batch-size' is missing");
  expect_parse_error(with_checkpoint({"photos/"}),
                     "unexpected argument 'photos/': ./pipeline_eval takes only options");
  expect_parse_error(with_checkpoint({"a", "b"}), "unexpected arguments 'a', 'b'");
  expect_parse_error(with_checkpoint({"-b", "2", "-b", "3"}), "cannot be specified more than once");
  expect_parse_error(with_checkpoint({"--config", "x.cfg"}), "unknown option '--config'");
}

TEST_CASE("eval options: value errors") {
  auto err = [](std::vector<std::string> more, const std::string& part) {
    expect_parse_error(with_checkpoint(std::move(more)), part);
  };
  err({"-b", "x"}, "-b/--batch-size: 'x' is not an integer >= 1");
  err({"--batch-size", "0"}, "--batch-size: '0' is not an integer >= 1");
  err({"--batch-size=12x"}, "--batch-size: '12x' is not an integer >= 1");
  err({"--batch-size=99999999999999999999"}, "--batch-size: '99999999999999999999' is not");
  err({"--limit", "-1"}, "--limit: '-1' is not an integer from 0 to 2^64-1");
  err({"--limit", "all"}, "--limit: 'all' is not an integer");
  err({"--image-size", "0"}, "--image-size: '0' is not an integer >= 1");
  err({"--resize", "-1"}, "--resize: '-1' is not an integer >= 0");
  err({"--resize", "3000000000"}, "--resize: '3000000000' is not an integer");
  err({"--threads", "two"}, "--threads: 'two' is not an integer >= 0");
  err({"--credits", "-4"}, "--credits: '-4' is not an integer >= 0");
  err({"--batch-credits", "0"}, "--batch-credits: '0' is not an integer >= 1");
  err({"--stages", ""}, "--stages: empty (give e.g. read=1,decode=4,batch=1,predict=2)");
  err({"--stages", "read=1,decode=1"}, "--stages: 'read=1,decode=1' leaves out batch");
  err({"--stages", "read=1,decode=1,predict=1,batch=1"}, "--stages: 'predict=1' is out of order");
  err({"--stages", "read=1,read=1,decode=1,batch=1,predict=1"}, "--stages: 'read=1' is out of order");
  err({"--stages", "read+batch=1,decode=1,predict=1"}, "--stages: 'read+batch=1' is out of order");
  err({"--stages", "read=1,decode=0,batch=1,predict=1"}, "--stages: 'decode=0' needs a rank count >= 1");
  err({"--stages", "read=1,decode=2x,batch=1,predict=1"}, "--stages: 'decode=2x' needs a rank count >= 1");
  err({"--stages", "read=1,resize=1,batch=1,predict=1"}, "--stages: 'resize=1' names no stage");
  err({"--stages", "read,decode,batch,predict"}, "--stages: 'read' is not STAGES=N");
  err({"--split", "valid"}, "--split: 'valid' is not one of auto, train, test, val or all");
  err({"--dataset", "imagenet"},
      "--dataset: 'imagenet' is not one of auto, fashion-mnist, mnist, idx, imagefolder, csv, "
      "cifar10, cifar100 or synthetic");
  if (!mpicnn::gpu::compiled_in())
    err({"--device", "cuda"},
        "--device cuda: this build has no CUDA backend (rebuild with make CUDA=1 on a machine "
        "with nvcc)");
  err({"--device", "tpu"}, "--device: 'tpu' is not one of auto, cpu or cuda");
  err({"--mean", "0.5,x"}, "--mean: 'x' in '0.5,x' is not a number");
  err({"--mean", "0.1,0.2"}, "--mean: '0.1,0.2' is not a list of 1 or 3 numbers");
  err({"--std", "0.1,0.2,0.3,0.4"}, "--std: '0.1,0.2,0.3,0.4' is not a list of 1 or 3 numbers");
  err({"--std", "0.2,0,0.2"}, "--std: '0.2,0,0.2' is not a list of numbers > 0");
  err({"--std", "-1"}, "--std: '-1' is not a list of numbers > 0");
  // --weights-only values
  expect_parse_error(with_weights({"--num-classes", "0"}),
                     "--num-classes: '0' is not an integer >= 1");
  expect_parse_error(with_weights({"--in-channels", "2"}), "--in-channels: '2' is not 1 or 3");
  expect_parse_error(with_weights({"--in-channels", "4"}), "--in-channels: '4' is not");
  expect_parse_error(with_weights({"--in-channels", "1", "--mean", "0.1,0.2,0.3"}),
                     "--mean: 3 values for --in-channels 1");
  expect_parse_error(with_weights({"--in-channels", "1", "--std", "0.1,0.2,0.3"}),
                     "--std: 3 values for --in-channels 1");
}

TEST_CASE("eval options: cross-option errors") {
  expect_parse_error(with_checkpoint({"--sequential", "--compare"}),
                     "--sequential and --compare");
  expect_parse_error(with_checkpoint({"--compare", "--sequential=true"}),
                     "--sequential and --compare");
  expect_parse_error(with_checkpoint({"--sequential", "--stages", "read=1,decode=1,batch=1,predict=1"}),
                     "--stages sets the pipeline's ranks; --sequential runs no pipeline");
  // Value errors come first, each naming its own flag.
  expect_parse_error({"-b", "0"}, "-b/--batch-size: '0' is not an integer >= 1");
}

TEST_CASE("eval options: help text") {
  const std::string help = mpicnn::eval::eval_help();
  for (const char* flag :
       {"--checkpoint", "--weights", "--model", "--num-classes", "--in-channels", "--data",
        "--dataset", "--split", "--limit", "--skip-bad", "--image-size", "--resize", "--mean",
        "--std", "--batch-size", "--sequential", "--compare", "--threads", "--credits",
        "--batch-credits", "--stages", "--output", "--json", "--device", "--help"}) {
    CHECK_MESSAGE(help.find(flag) != std::string::npos, "help does not mention ", flag);
  }
  for (const char* s :
       {"-c, --checkpoint RUN", "--weights FILE", "-m, --model NAME", "-d, --data PATH",
        "-b, --batch-size N", "-o, --output DIR", "-h, --help", "--skip-bad[=BOOL]",
        "mpiexec -n K ./pipeline_eval --checkpoint RUN [-d DATA] [options]",
        "./pipeline_eval --weights FILE --model NAME -d DATA", "[default 32]", "[default 2]",
        "[default auto]", "K >= 4", "K = 3", "K = 2", "K = 1", "ranks 3..K-1", "predictions.csv",
        "report.json", "Examples:", "--oversubscribe", "--compare", "resnet18.safetensors",
        "node-local rank", "fashion-mnist", "cifar100", "synthetic"}) {
    CHECK_MESSAGE(help.find(s) != std::string::npos, "help does not mention ", s);
  }
  for (const auto& s : mpicnn::model_specs())
    CHECK_MESSAGE(help.find(s.name) != std::string::npos, "help does not list ", s.name);
  CHECK(help.find(mpicnn::data::kFashionMnistDefaultPath) != std::string::npos);
  mpicnn::testing::expect_shared_flag_help(help);  // the flags ./train takes too
  // Lines fit a 100-column terminal.
  CHECK(mpicnn::testing::longest_line(help) <= 100);
}
