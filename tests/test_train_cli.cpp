// ./train as a user runs it (one rank, MPI singleton): --help, one-line errors for bad options
// and bad data, and a small synthetic run whose run directory holds what the docs promise
// (summary.json, metrics.jsonl, an MLflow file store, checkpoints with `latest`), then a resume
// that continues it. The multi-rank behaviour is tested in tests/mpi/test_train.cpp.
#include <fstream>
#include <nlohmann/json.hpp>

#include "testing.h"

using namespace mpicnn;
using mpicnn::testing::expect_cli_error;
using mpicnn::testing::run_program;
using mpicnn::testing::TempDir;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

json read_json(const std::string& path) {
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.is_open(), "cannot read ", path);
  return json::parse(in);
}

std::vector<json> read_jsonl(const std::string& path) {
  std::ifstream in(path);
  std::vector<json> out;
  for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
  return out;
}

const std::vector<std::string> kSmall = {"--dataset", "synthetic", "--batch-size", "32",
                                         "--threads", "1", "--workers", "1", "--progress", "plain"};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

TEST_CASE("train CLI: --help, and one clear line for bad options and data") {
  TempDir dir;
  const auto help = run_program("train", {"--help"});
  CHECK(help.rc == 0);
  CHECK(help.output.find("Usage: mpiexec -n RANKS ./train") != std::string::npos);
  expect_cli_error("train", {"--epochs", "0"}, "-e/--epochs: '0'");
  expect_cli_error("train", {"--bogus"}, "--bogus");
  expect_cli_error("train", {"-d", dir / "missing"}, dir / "missing");
  expect_cli_error("train", {"--model", "resnet18", "-s", dir / "r"}, "--image-size");
  expect_cli_error("train", {"--resume", dir / "nothing"}, dir / "nothing");
  const std::vector<std::string> syn = {"--dataset", "synthetic", "-m", "resnet20", "-e", "1", "-s", dir / "r"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), syn.begin(), syn.end());
    return extra;
  };
  expect_cli_error("train", with({"--freeze", "conv1,layer9"}), "--freeze: 'layer9' matches no parameter of resnet20");
  expect_cli_error("train", with({"--freeze", "conv1,bn1,layer1,layer2,layer3,fc"}), "--freeze: nothing left to train");
  expect_cli_error("train", with({"--head-lr-mult", "0"}), "--head-lr-mult: '0'");
  expect_cli_error("train", with({"--init-weights", dir / "w.safetensors"}),
                   "--init-weights: " + (dir / "w.safetensors") + " does not exist");
  CHECK(!fs::exists(dir / "r"));  // nothing written by a run that could not start
}

TEST_CASE("train CLI: a run writes its run directory, and --resume continues it") {
  TempDir dir;
  const std::string run = dir / "run";
  const auto first = run_program("train", with(kSmall, {"--epochs", "2", "-s", run, "--check-sync", "5"}));
  INFO(first.output);
  REQUIRE(first.rc == 0);
  CHECK(first.output.find("epoch 2/2 done") != std::string::npos);

  const json s = read_json(run + "/summary.json");
  CHECK(s["status"] == "FINISHED");
  CHECK(s["model"] == "lenet");
  CHECK(s["ranks"] == 1);
  CHECK(s["nodes"] == 1);
  CHECK(s["threads_per_rank"] == 1);
  CHECK(s["hosts"].size() == 1);
  CHECK(s["batch_per_rank"] == 32);
  CHECK(s["global_batch"] == 32);
  CHECK(s["epochs_done"] == 2);
  CHECK(s["epoch_seconds"].size() == 2);
  CHECK(s["images_per_s"].get<double>() > 0);
  CHECK(s["test_top1"].get<double>() > 0.5);  // synthetic classes are easy to tell apart
  CHECK(s["test_top5"].get<double>() >= s["test_top1"].get<double>());
  CHECK(s.contains("comm_share"));

  const std::vector<json> m = read_jsonl(run + "/metrics.jsonl");
  const auto steps = std::count_if(m.begin(), m.end(), [](const json& j) { return j["kind"] == "step"; });
  const auto epochs = std::count_if(m.begin(), m.end(), [](const json& j) { return j["kind"] == "epoch"; });
  CHECK(steps == 2 * 32);  // 1024 samples / 32 per step, 2 epochs
  CHECK(epochs == 2);
  CHECK(fs::exists(run + "/latest/model.safetensors"));
  CHECK(fs::exists(run + "/checkpoints/epoch-0002/trainer.json"));
  const std::string run_id = s["mlflow_run_id"];
  CHECK(fs::exists(run + "/mlruns/0/" + run_id + "/meta.yaml"));
  CHECK(fs::exists(run + "/mlruns/0/" + run_id + "/metrics/top1"));

  // A second run into the same directory is refused; --resume continues with the saved
  // options (lenet, synthetic, batch 32), here for one more epoch.
  expect_cli_error("train", with(kSmall, {"--epochs", "2", "-s", run}), "already holds a run");
  const auto more = run_program("train", {"--resume", run, "--epochs", "3", "--progress", "plain"});
  INFO(more.output);
  REQUIRE(more.rc == 0);
  CHECK(more.output.find("resumed from") != std::string::npos);
  const json s2 = read_json(run + "/summary.json");
  CHECK(s2["epochs_done"] == 3);
  CHECK(s2["status"] == "FINISHED");
  CHECK(s2["mlflow_run_id"] == run_id);  // the same MLflow run, continued
  CHECK(fs::exists(run + "/checkpoints/epoch-0003"));
  // A resume that contradicts the checkpoint is one line naming the problem.
  expect_cli_error("train", {"--resume", run, "--model", "alexnet", "--epochs", "4"}, "alexnet");
}

TEST_CASE("train CLI: under mpiexec with its output in a pipe, --progress auto draws no bar") {
  // Open MPI gives each rank a pseudo-terminal; mpiexec's own output (here this test's pipe) is
  // what the user sees, so the lines must be plain: no '\r' frames (make demo > log).
  TempDir dir;
  std::vector<std::string> args = kSmall;
  args.resize(args.size() - 2);  // no --progress: auto
  const auto r = testing::run_mpi(2, "train", with(args, {"--epochs", "1", "-s", dir / "run"}));
  INFO(r.output);
  REQUIRE(r.rc == 0);
  CHECK(r.output.find("epoch 1/1 done") != std::string::npos);
  CHECK(r.output.find('\r') == std::string::npos);
}

TEST_CASE("train CLI: --progress none prints no epoch lines, but the closing line has the result") {
  TempDir dir;
  const std::string run = dir / "run";
  std::vector<std::string> args = kSmall;
  args.back() = "none";  // --progress none
  const auto r = run_program("train", with(args, {"--epochs", "1", "-s", run}));
  INFO(r.output);
  REQUIRE(r.rc == 0);
  CHECK(r.output.find("epoch 1/1") == std::string::npos);
  const json s = read_json(run + "/summary.json");
  char want[96];
  std::snprintf(want, sizeof want, "test top-1 %.2f%% (", 100 * s["test_top1"].get<double>());
  CHECK(r.output.find("done: " + run + ": " + want) != std::string::npos);
  // Without evaluation the line says so.
  const auto quiet = run_program("train", with(args, {"--epochs", "1", "--eval-every", "0",
                                                      "-s", dir / "run2"}));
  INFO(quiet.output);
  REQUIRE(quiet.rc == 0);
  CHECK(quiet.output.find("done: " + (dir / "run2") + ": no test evaluation (") != std::string::npos);
}

// --precision bf16 on the CPU: the convolutions and linear layers multiply bf16-rounded inputs
// (core/precision.h), the header says which path, the checkpoint records the precision
// (a resume keeps it), and the weights differ from an fp32 run's (bf16 ran, not fp32 under its
// name). Precisions the CPU has not are one line.
TEST_CASE("train CLI: --precision bf16 on the CPU") {
  TempDir dir;
  const auto bf = run_program("train", with(kSmall, {"--epochs", "1", "--precision", "bf16",
                                                     "--explain-plan", "-s", dir / "bf"}));
  INFO(bf.output);
  REQUIRE(bf.rc == 0);
  CHECK(bf.output.find("device cpu, bf16 GEMMs ") != std::string::npos);  // native or emulated
  CHECK(bf.output.find("execution: cpu bf16, training, ") != std::string::npos);
  CHECK(read_json(dir / "bf/summary.json")["params"]["precision"] == "bf16");
  // The plan as the run took it: in its header per layer (LeNet's convolutions and linear
  // layers), and in trainer.json.
  CHECK(bf.output.find("plan, per layer:\n    conv1  Conv2d  ") != std::string::npos);
  CHECK(bf.output.find("  Linear  bf16 GEMM\n") != std::string::npos);
  const json exec = read_json(dir / "bf/latest/trainer.json")["execution"];
  CHECK(exec["precision"] == "bf16");
  CHECK(exec["device"] == "cpu");
  CHECK(exec["inference"] == false);
  const auto fp = run_program("train", with(kSmall, {"--epochs", "1", "-s", dir / "fp"}));
  REQUIRE(fp.rc == 0);
  CHECK(fp.output.find("device cpu\n") != std::string::npos);
  CHECK(fp.output.find("execution: cpu fp32, training, ") != std::string::npos);
  CHECK(fp.output.find("plan, per layer") == std::string::npos);  // only when asked
  std::ifstream a(dir / "bf/latest/model.safetensors", std::ios::binary), b(dir / "fp/latest/model.safetensors", std::ios::binary);
  const std::string wa{std::istreambuf_iterator<char>(a), {}}, wb{std::istreambuf_iterator<char>(b), {}};
  CHECK(wa.size() == wb.size());
  CHECK(wa != wb);
  expect_cli_error("train", with(kSmall, {"--precision", "fp16", "-s", dir / "x"}),
                   "--precision fp16: the CPU computes in fp32 or bf16 (fp16 needs --device cuda)");
}
