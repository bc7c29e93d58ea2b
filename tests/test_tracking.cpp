// Run tracking tests: metrics.jsonl lines, summary.json fields, the MLflow FileStore layout
// (meta.yaml fields, params / metrics / tags files and their formats), FAILED on unwinding,
// and resume continuing the same MLflow run. mlflow itself is not installed here, so the
// layout is checked against FileStore's documented format rather than read by mlflow.
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "core/check.h"
#include "io/tracking.h"
#include "testing.h"

using namespace mpicnn;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct TrDir {
  fs::path path;
  TrDir() {
    static int n = 0;
    path = fs::temp_directory_path() / ("mpicnn_tr_" + std::to_string(::getpid()) + "_" + std::to_string(n++)) / "myrun";
    fs::remove_all(path.parent_path());
  }
  ~TrDir() {
    std::error_code ec;
    fs::remove_all(path.parent_path(), ec);
  }
};

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  REQUIRE_MESSAGE(in, p.string());
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::vector<std::string> lines_of(const fs::path& p) {
  std::istringstream in(read_text(p));
  std::vector<std::string> v;
  for (std::string l; std::getline(in, l);) v.push_back(l);
  return v;
}

// "key: value" per line, as FileStore's yaml.safe_dump writes flat mappings.
std::map<std::string, std::string> yaml_map(const fs::path& p) {
  std::map<std::string, std::string> m;
  for (const std::string& l : lines_of(p)) {
    const auto c = l.find(": ");
    REQUIRE_MESSAGE(c != std::string::npos, l);
    m[l.substr(0, c)] = l.substr(c + 2);
  }
  return m;
}

RunInfo info() {
  RunInfo i;
  i.model = "resnet18";
  i.dataset = "data/faces";
  i.ranks = 4;
  i.nodes = 2;
  i.threads_per_rank = 8;
  i.hosts = {"n001", "n002"};
  i.batch_per_rank = 64;
  i.global_batch = 256;
  i.epochs = 10;
  i.params = {{"lr", "0.1"}, {"model", "resnet18"}, {"data/path", "x y"}};
  return i;
}

}  // namespace

TEST_CASE("tracking writes metrics.jsonl, summary.json and an MLflow file store") {
  TrDir dir;
  int64_t now = 1700000000000;
  const auto clock = [&] { return now++; };
  std::string run_id, mlrun;
  {
    RunTracker t(dir.path.string(), info(), clock);
    run_id = t.run_id();
    mlrun = t.mlflow_run_dir();
    CHECK(run_id.size() == 32);
    CHECK(run_id.find_first_not_of("0123456789abcdef") == std::string::npos);
    CHECK(fs::path(mlrun) == dir.path / "mlruns" / "0" / run_id);

    auto meta = yaml_map(fs::path(mlrun) / "meta.yaml");
    CHECK(meta["status"] == "1");  // RUNNING
    CHECK(meta["end_time"] == "null");

    for (int s = 1; s <= 3; ++s) t.log_step({s, 0, 2.5 - 0.5 * s, 0.1, 1000.0 + s, 0.25 * s});
    t.log_epoch({0, 1.75, 1.5, 0.5, 0.875, 10.0, 0.125, 0.5, 5000, {}});
    t.log_epoch({1, 1.25, NAN, 0.625, 0.9375, 6.0, 0.25, 1.0, 5000, {}});
    t.set_summary("note", "hello");
    t.finish(RunStatus::Finished);
  }

  // metrics.jsonl: one complete object per line.
  const auto lines = lines_of(dir.path / "metrics.jsonl");
  REQUIRE(lines.size() == 5);
  for (int s = 0; s < 3; ++s) {
    const json j = json::parse(lines[size_t(s)]);
    CHECK(j["kind"] == "step");
    CHECK(j["step"] == s + 1);
    CHECK(j["epoch"] == 0);
    CHECK(j["loss"].get<double>() == 2.5 - 0.5 * (s + 1));
    CHECK(j["lr"].get<double>() == 0.1);
    CHECK(j["images_per_s"].get<double>() == 1000.0 + s + 1);
    CHECK(j["time"].get<double>() == 0.25 * (s + 1));
  }
  const json e0 = json::parse(lines[3]), e1 = json::parse(lines[4]);
  CHECK(e0["kind"] == "epoch");
  for (const char* k : {"epoch", "train_loss", "test_loss", "top1", "top5", "epoch_seconds",
                        "comm_share", "data_wait_s"})
    CHECK_MESSAGE(e0.contains(k), k);
  CHECK(e0["top5"].get<double>() == 0.875);
  CHECK(e1["test_loss"].is_null());  // not measured: null, never invalid JSON

  // summary.json
  const json s = json::parse(read_text(dir.path / "summary.json"));
  CHECK(s["status"] == "FINISHED");
  CHECK(s["run_name"] == "myrun");
  CHECK(s["model"] == "resnet18");
  CHECK(s["dataset"] == "data/faces");
  CHECK(s["ranks"] == 4);
  CHECK(s["nodes"] == 2);
  CHECK(s["threads_per_rank"] == 8);
  CHECK(s["hosts"] == json({"n001", "n002"}));
  CHECK(s["cpu_model"] == cpu_model_name());
  CHECK(s["gpu_model"] == "");
  CHECK(s["batch_per_rank"] == 64);
  CHECK(s["global_batch"] == 256);
  CHECK(s["epochs"] == 10);
  CHECK(s["epochs_done"] == 2);
  CHECK(s["train_seconds"].get<double>() == 16.0);
  CHECK(s["images_per_s"].get<double>() == 10000.0 / 16.0);
  CHECK(s["epoch_seconds"] == json({10.0, 6.0}));
  CHECK(s["final_train_loss"].get<double>() == 1.25);
  CHECK(s["test_top1"].get<double>() == 0.625);
  CHECK(s["test_top5"].get<double>() == 0.9375);
  CHECK(s["note"] == "hello");
  CHECK(s["mlflow_run_id"] == run_id);

  // MLflow experiment 0.
  auto exp = yaml_map(dir.path / "mlruns" / "0" / "meta.yaml");
  CHECK(exp["experiment_id"] == "'0'");
  CHECK(exp["name"] == "Default");
  CHECK(exp["lifecycle_stage"] == "active");
  CHECK(exp["artifact_location"] == "'file://" + (dir.path / "mlruns" / "0").string() + "'");
  CHECK(exp["creation_time"] == "1700000000000");
  CHECK(exp.count("last_update_time") == 1);

  // The run's meta.yaml: every FileStore field, terminal status and times.
  auto meta = yaml_map(fs::path(mlrun) / "meta.yaml");
  std::vector<std::string> keys;
  for (const auto& [k, v] : meta) keys.push_back(k);
  CHECK(keys == std::vector<std::string>{"artifact_uri", "end_time", "entry_point_name", "experiment_id",
                                         "lifecycle_stage", "run_id", "run_name", "run_uuid", "source_name",
                                         "source_type", "source_version", "start_time", "status", "tags",
                                         "user_id"});
  CHECK(meta["run_id"] == "'" + run_id + "'");
  CHECK(meta["run_uuid"] == meta["run_id"]);
  CHECK(meta["experiment_id"] == "'0'");
  CHECK(meta["status"] == "3");  // FINISHED
  CHECK(meta["start_time"] == "1700000000000");
  CHECK(std::stoll(meta["end_time"]) > 1700000000000);
  CHECK(meta["run_name"] == "'myrun'");
  CHECK(meta["artifact_uri"] == "'file://" + mlrun + "/artifacts'");
  CHECK(meta["tags"] == "[]");
  CHECK(fs::is_directory(fs::path(mlrun) / "artifacts"));

  // params hold the raw value; '/' in a key becomes '_' (it would be a subdirectory).
  CHECK(read_text(fs::path(mlrun) / "params" / "lr") == "0.1");
  CHECK(read_text(fs::path(mlrun) / "params" / "data_path") == "x y");
  CHECK(read_text(fs::path(mlrun) / "tags" / "mlflow.runName") == "myrun");
  CHECK(read_text(fs::path(mlrun) / "tags" / "mlflow.source.name") == "mpicnn");
  CHECK(fs::exists(fs::path(mlrun) / "tags" / "mlflow.user"));

  // metrics/<key>: "<timestamp_ms> <value> <step>" per line, values exact.
  const auto loss = lines_of(fs::path(mlrun) / "metrics" / "loss");
  REQUIRE(loss.size() == 3);
  for (int i = 0; i < 3; ++i) {
    std::istringstream in(loss[size_t(i)]);
    int64_t ts = 0, step = 0;
    double v = 0;
    in >> ts >> v >> step;
    CHECK(in.eof());
    CHECK(ts >= 1700000000000);
    CHECK(step == i + 1);
    CHECK(v == 2.5 - 0.5 * (i + 1));
  }
  CHECK(lines_of(fs::path(mlrun) / "metrics" / "top5").size() == 2);
  CHECK(lines_of(fs::path(mlrun) / "metrics" / "test_loss").size() == 1);  // NaN skipped
  CHECK(lines_of(fs::path(mlrun) / "metrics" / "top1")[1].substr(14) == "0.625 1");

  // The YAML as a YAML parser (PyYAML, what FileStore uses) types it: ids are strings,
  // times and status integers.
  const fs::path py = dir.path.parent_path() / "check_yaml.py";
  std::ofstream(py) << "import sys, yaml\n"
                       "e = yaml.safe_load(open(sys.argv[1]))\n"
                       "r = yaml.safe_load(open(sys.argv[2]))\n"
                       "assert e['experiment_id'] == '0' and e['name'] == 'Default', e\n"
                       "assert isinstance(e['creation_time'], int), e\n"
                       "assert r['run_id'] == r['run_uuid'] == sys.argv[3], r\n"
                       "assert r['experiment_id'] == '0' and r['status'] == 3 and r['tags'] == [], r\n"
                       "assert isinstance(r['start_time'], int) and isinstance(r['end_time'], int), r\n"
                       "assert r['artifact_uri'].startswith('file:///') and r['lifecycle_stage'] == 'active', r\n";
  const char* env = std::getenv("PYTHON");
  const std::string cmd = std::string(env && *env ? env : "/usr/bin/python3") + " '" + py.string() + "' '" +
                          (dir.path / "mlruns" / "0" / "meta.yaml").string() + "' '" + mlrun +
                          "/meta.yaml' " + run_id;
  const int status = std::system(cmd.c_str());
  CHECK((status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0));
}

TEST_CASE("tracking: run facts go to summary.json and to MLflow params under the same keys") {
  TrDir dir;
  RunInfo i = info();
  i.facts = {{"model_macs", 1814073344}, {"input_shape", {3, 224, 224}}, {"dataset_kind", "csv"},
             {"distribute_data", false}};
  std::string mlrun;
  {
    RunTracker t(dir.path.string(), i);
    mlrun = t.mlflow_run_dir();
    t.finish(RunStatus::Finished);
  }
  const json s = json::parse(read_text(dir.path / "summary.json"));
  CHECK(s.at("model_macs") == 1814073344);
  CHECK(s.at("input_shape") == json({3, 224, 224}));
  CHECK(s.at("dataset_kind") == "csv");
  CHECK(s.at("distribute_data") == false);
  const fs::path params = fs::path(mlrun) / "params";
  CHECK(read_text(params / "model_macs") == "1814073344");
  CHECK(read_text(params / "input_shape") == "3,224,224");
  CHECK(read_text(params / "dataset_kind") == "csv");
  CHECK(read_text(params / "distribute_data") == "false");
  // The hardware every run records, as params too: MLflow's compare view shows them.
  CHECK(read_text(params / "ranks") == "4");
  CHECK(read_text(params / "nodes") == "2");
  CHECK(read_text(params / "threads_per_rank") == "8");
  CHECK(fs::exists(params / "cpu_model"));
}

TEST_CASE("tracking marks an unfinished run FAILED and resume continues the same run") {
  TrDir dir;
  std::string id;
  try {
    RunTracker t(dir.path.string(), info());
    id = t.run_id();
    t.log_epoch({0, 1.0, 1.0, 0.5, 0.75, 2.0, 0.0, 0.0, 100, {}});
    throw std::runtime_error("boom");
  } catch (const std::runtime_error&) {
  }
  CHECK(yaml_map(dir.path / "mlruns" / "0" / id / "meta.yaml")["status"] == "4");
  CHECK(json::parse(read_text(dir.path / "summary.json"))["status"] == "FAILED");

  RunInfo again = info();
  again.resume = true;
  RunTracker t(dir.path.string(), again);
  CHECK(t.run_id() == id);
  CHECK(yaml_map(dir.path / "mlruns" / "0" / id / "meta.yaml")["status"] == "1");
  t.log_epoch({1, 0.5, 0.5, 0.75, 0.875, 3.0, 0.0, 0.0, 100, {}});
  t.finish(RunStatus::Killed);
  const json s = json::parse(read_text(dir.path / "summary.json"));
  CHECK(s["epochs_done"] == 2);
  CHECK(s["epoch_seconds"] == json({2.0, 3.0}));
  CHECK(s["status"] == "KILLED");
  CHECK(lines_of(dir.path / "metrics.jsonl").size() == 2);
  std::set<std::string> runs;
  for (const auto& d : fs::directory_iterator(dir.path / "mlruns" / "0"))
    if (d.is_directory()) runs.insert(d.path().filename().string());
  CHECK(runs == std::set<std::string>{id});
  std::string msg;
  try {
    t.finish(RunStatus::Finished);
  } catch (const Error& e) {
    msg = e.message();
  }
  CHECK(msg.find("already finished") != std::string::npos);
}
