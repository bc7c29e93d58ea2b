// Run tracking tests: metrics.jsonl lines, summary.json fields, the MLflow FileStore layout
// (meta.yaml fields, params / metrics / tags files and their formats), FAILED on unwinding,
// resume continuing the same MLflow run, the MLflow user, which options and facts are params,
// artifacts, and a ./train run's store read back. mlflow itself is not installed here, so the
// store is read by tests/mlflow_store.h, written from FileStore's rules, rather than by mlflow.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "core/check.h"
#include "io/tracking.h"
#include "mlflow_store.h"
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
  CHECK(read_text(params / "distribute_data") == "false");  // no option says it here
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

namespace {

namespace mlf = mpicnn::testing::mlflow;

// Sets or (nullptr) unsets environment variables for a scope; restores them after.
struct EnvGuard {
  std::vector<std::pair<std::string, std::optional<std::string>>> saved;
  void set(const std::string& key, const char* value) {
    const char* old = std::getenv(key.c_str());
    saved.push_back({key, old ? std::optional<std::string>(old) : std::nullopt});
    if (value) ::setenv(key.c_str(), value, 1);
    else ::unsetenv(key.c_str());
  }
  ~EnvGuard() {
    for (auto it = saved.rbegin(); it != saved.rend(); ++it) {
      if (it->second) ::setenv(it->first.c_str(), it->second->c_str(), 1);
      else ::unsetenv(it->first.c_str());
    }
  }
};

// The only run of RUN/mlruns's experiment 0, read by FileStore's rules.
mlf::Run only_run(const fs::path& run_dir) {
  const mlf::Experiment x = mlf::read_experiment(run_dir / "mlruns", "0");
  REQUIRE(x.runs.size() == 1);
  return x.runs.begin()->second;
}

}  // namespace

TEST_CASE("tracking: the store reads back by FileStore's rules at every run status") {
  TrDir dir;
  int64_t now = 1700000000000;
  const auto clock = [&] { return now++; };
  std::string id;
  {
    RunTracker t(dir.path.string(), info(), clock);
    id = t.run_id();
    mlf::Run r = only_run(dir.path);
    CHECK(r.dir.filename() == id);
    CHECK(r.status() == mlf::RUNNING);
    CHECK(r.meta.at("start_time").i == 1700000000000);
    CHECK(r.meta.at("run_name").s == "myrun");
    CHECK(r.meta.at("user_id").s == mlflow_user());
    CHECK(r.meta.at("tags").kind == mlf::Value::EmptyList);
    CHECK(r.tags == std::map<std::string, std::string>{{"mlflow.runName", "myrun"},
                                                       {"mlflow.user", mlflow_user()},
                                                       {"mlflow.source.name", "mpicnn"},
                                                       {"mlflow.source.type", "LOCAL"}});
    CHECK(r.artifacts.empty());

    t.log_step({7, 1, 2.0, 0.125, 500.0, 1.0});
    t.log_epoch({1, 2.0, 1.5, 0.5, 0.75, 4.0, 0.25, 0.5, 100, {{"map50", 0.125}, {"map", NAN}}});
    r = only_run(dir.path);
    std::set<std::string> keys;
    for (const auto& [k, v] : r.metrics) keys.insert(k);
    CHECK(keys == std::set<std::string>{"loss", "lr", "images_per_s", "train_loss", "test_loss",
                                        "top1", "top5", "epoch_seconds", "comm_share",
                                        "data_wait_s", "map50"});
    REQUIRE(r.metrics["lr"].size() == 1);
    CHECK(r.metrics["lr"][0].value == 0.125);
    CHECK(r.metrics["lr"][0].step == 7);  // steps by global step, epochs by epoch
    CHECK(r.metrics["lr"][0].timestamp > 1700000000000);
    REQUIRE(r.metrics["map50"].size() == 1);
    CHECK(r.metrics["map50"][0].value == 0.125);
    CHECK(r.metrics["map50"][0].step == 1);
    t.finish(RunStatus::Killed);
  }
  mlf::Run r = only_run(dir.path);
  CHECK(r.status() == mlf::KILLED);
  using Sizes = std::map<std::string, uintmax_t>;
  CHECK(r.artifacts == Sizes{{"summary.json", fs::file_size(dir.path / "summary.json")}});

  // Unwound (FAILED), then resumed into the same MLflow run and FINISHED.
  RunInfo again = info();
  again.resume = true;
  try {
    RunTracker t(dir.path.string(), again);
    CHECK(only_run(dir.path).status() == mlf::RUNNING);
    CHECK(only_run(dir.path).meta.at("end_time").kind == mlf::Value::Null);
    throw std::runtime_error("boom");
  } catch (const std::runtime_error&) {
  }
  CHECK(only_run(dir.path).status() == mlf::FAILED);
  {
    RunTracker t(dir.path.string(), again);
    t.finish(RunStatus::Finished);
  }
  r = only_run(dir.path);
  CHECK(r.dir.filename() == id);
  CHECK(r.status() == mlf::FINISHED);
  CHECK(r.meta.at("start_time").i == 1700000000000);  // the run's, not the resume's
}

TEST_CASE("tracking: the MLflow user is getpass.getuser()'s: LOGNAME, USER, LNAME, USERNAME, pwd") {
  EnvGuard env;
  for (const char* k : {"LOGNAME", "USER", "LNAME", "USERNAME"}) env.set(k, nullptr);
  // With none set: the effective user's name in the password database, as `id -un` prints it.
  std::string id_un;
  if (FILE* p = ::popen("id -un 2>/dev/null", "r")) {
    char buf[256];
    while (std::fgets(buf, sizeof buf, p)) id_un += buf;
    if (::pclose(p) != 0) id_un.clear();
  }
  if (!id_un.empty() && id_un.back() == '\n') id_un.pop_back();
  CHECK(mlflow_user() == (id_un.empty() ? "unknown" : id_un));
  env.set("USERNAME", "d");
  CHECK(mlflow_user() == "d");
  env.set("LNAME", "c");
  CHECK(mlflow_user() == "c");
  env.set("USER", "b");
  CHECK(mlflow_user() == "b");
  env.set("LOGNAME", "a");
  CHECK(mlflow_user() == "a");
  env.set("LOGNAME", "");  // set but empty counts as unset (getpass's `if user:`)
  CHECK(mlflow_user() == "b");

  // meta.yaml's user_id and the mlflow.user tag, quoted so that YAML keeps any name a string:
  // a plain `yes` would read back as a boolean.
  for (const char* name : {"o'brien", "yes"}) {
    env.set("LOGNAME", name);
    TrDir dir;
    {
      RunTracker t(dir.path.string(), info());
      t.finish(RunStatus::Finished);
    }
    const mlf::Run r = only_run(dir.path);
    CHECK(r.meta.at("user_id").is_str());
    CHECK(r.meta.at("user_id").s == name);
    CHECK(r.tags.at("mlflow.user") == name);
  }
}

TEST_CASE("tracking: MLflow params are the options set, under their flag names, and other facts") {
  TrDir dir;
  RunInfo i = info();
  // As trainer.json records options: every flag, "" for one not given.
  i.params = {{"batch-size", "64"}, {"distribute-data", "false"}, {"workers", "4"},
              {"allreduce", "auto"}, {"test-data", ""}, {"resume", ""}, {"min-size", "800"},
              {"save-dir", "runs/x"}};
  // Facts that restate an option (in either spelling) are not second params; the option's recorded
  // value is the param even where the fact holds what it resolved to (allreduce auto -> ring).
  i.facts = {{"distribute_data", false}, {"workers", 4}, {"allreduce", "ring"}, {"min_size", 800},
             {"train_samples", 1024}, {"gpu_model", ""}, {"validation", "10% held out"}};
  std::map<std::string, std::string> want = {
      {"batch-size", "64"}, {"distribute-data", "false"}, {"workers", "4"}, {"allreduce", "auto"},
      {"min-size", "800"}, {"save-dir", "runs/x"}, {"train_samples", "1024"},
      {"validation", "10% held out"}, {"ranks", "4"}, {"nodes", "2"}, {"threads_per_rank", "8"}};
  if (!cpu_model_name().empty()) want["cpu_model"] = cpu_model_name();
  CHECK(mlflow_params(i) == want);
  {
    RunTracker t(dir.path.string(), i);
    t.finish(RunStatus::Finished);
  }
  CHECK(only_run(dir.path).params == want);
  const json s = json::parse(read_text(dir.path / "summary.json"));
  CHECK(s.at("params") == json(i.params));  // summary.json's params: trainer.json's record
  CHECK(s.at("allreduce") == "ring");       // the facts as they are
  CHECK(s.at("distribute_data") == false);

  // A resume with other options leaves no stale param: save-dir is now unset, resume set.
  RunInfo again = i;
  again.resume = true;
  again.params["save-dir"] = "";
  again.params["resume"] = "runs/x";
  {
    RunTracker t(dir.path.string(), again);
    t.finish(RunStatus::Finished);
  }
  want.erase("save-dir");
  want["resume"] = "runs/x";
  CHECK(only_run(dir.path).params == want);
}

TEST_CASE("tracking: artifacts are copied whole into artifact_uri; logging again replaces them") {
  TrDir dir;
  RunTracker t(dir.path.string(), info());
  const fs::path src = dir.path.parent_path() / "weights.bin";
  std::string big((3 << 20) + 12345, '\0');  // over the copy's 1 MiB buffer, not a multiple of it
  for (size_t k = 0; k < big.size(); ++k) big[k] = char(k * 2654435761u >> 13);
  std::ofstream(src, std::ios::binary) << big;
  t.log_artifact(src.string());
  t.log_artifact(src.string(), "model.safetensors");
  const fs::path artifacts = t.artifact_dir();
  CHECK(read_text(artifacts / "weights.bin") == big);
  std::ofstream(src, std::ios::binary | std::ios::trunc) << "second";
  t.log_artifact(src.string());
  CHECK(read_text(artifacts / "weights.bin") == "second");
  CHECK(read_text(artifacts / "model.safetensors") == big);

  // A file that cannot be read: one error naming it, and nothing written.
  std::string msg;
  try {
    t.log_artifact((dir.path / "missing.json").string());
  } catch (const Error& e) {
    msg = e.message();
  }
  CHECK(msg.find((dir.path / "missing.json").string() + ": cannot read it") != std::string::npos);
  CHECK(!fs::exists(artifacts / "missing.json"));

  t.finish(RunStatus::Finished);
  const mlf::Run r = only_run(dir.path);
  using Sizes = std::map<std::string, uintmax_t>;
  CHECK(r.artifacts == Sizes{{"weights.bin", 6}, {"model.safetensors", big.size()},
                             {"summary.json", fs::file_size(dir.path / "summary.json")}});
  CHECK(read_text(artifacts / "summary.json") == read_text(dir.path / "summary.json"));
}

TEST_CASE("tracking: a ./train run's MLflow store: params as trainer.json, artifacts, resume") {
  using mpicnn::testing::run_program;
  mpicnn::testing::TempDir tmp;
  const std::vector<std::string> small = {"--dataset", "synthetic", "-b", "64", "--threads", "1",
                                          "-w", "0", "--progress", "none"};
  auto with = [](std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  auto train = [&](const std::vector<std::string>& args) {
    const auto r = run_program("train", with(small, args));
    INFO(r.output);
    REQUIRE(r.rc == 0);
  };
  // The run as its files say: one FINISHED MLflow run whose params are trainer.json's options
  // that are set plus facts no option states, and whose artifacts are the run's latest files.
  auto check_run = [&](const fs::path& run, int64_t epochs, bool weights) {
    const mlf::Run r = only_run(run);
    CHECK(r.status() == mlf::FINISHED);
    CHECK(r.meta.at("user_id").s == mlflow_user());
    CHECK(r.tags.at("mlflow.user") == mlflow_user());
    const json trainer = json::parse(read_text(run / "latest" / "trainer.json"));
    const json summary = json::parse(read_text(run / "summary.json"));
    CHECK(trainer.at("epoch") == epochs);
    const json& config = trainer.at("config");
    CHECK(summary.at("params") == config);
    for (const auto& [k, v] : config.items()) {
      const std::string value = v.get<std::string>();
      if (value.empty()) CHECK_MESSAGE(!r.params.count(k), "unset option ", k, " is a param");
      else CHECK_MESSAGE((r.params.count(k) && r.params.at(k) == value), "option ", k);
    }
    for (const auto& [k, v] : r.params) {
      if (config.contains(k)) continue;
      std::string flag = k;
      std::replace(flag.begin(), flag.end(), '_', '-');
      CHECK_MESSAGE(!config.contains(flag), "param ", k, " restates --", flag);
      CHECK_MESSAGE(summary.contains(k), "param ", k, " is neither an option nor a fact");
      CHECK(!v.empty());
    }
    CHECK(r.params.at("train_samples") == "1024");
    CHECK(r.metrics.at("train_loss").size() == size_t(epochs));
    std::map<std::string, uintmax_t> want = {
        {"trainer.json", fs::file_size(run / "latest" / "trainer.json")},
        {"summary.json", fs::file_size(run / "summary.json")}};
    if (weights) want["model.safetensors"] = fs::file_size(run / "latest" / "model.safetensors");
    CHECK(r.artifacts == want);
    const fs::path artifacts = r.dir / "artifacts";
    for (const auto& [name, bytes] : want) {
      const fs::path original = name == "summary.json" ? run / name : run / "latest" / name;
      CHECK_MESSAGE(read_text(artifacts / name) == read_text(original), name, " differs from ",
                    original);
    }
  };

  // Killed (SIGKILL, by fault injection) at the first step of epoch 2 of 2: epoch 1's trainer.json
  // is logged, but no weights (not the final epoch) and no summary (the run could not end).
  const fs::path run = tmp / "run";
  const auto killed = run_program("train", with(small, {"-e", "2", "-s", run.string()}),
                                  "MPICNN_FAULT=forward:0:17 ");  // 1024 samples / 64 = 16 steps
  INFO(killed.output);
  REQUIRE(killed.rc != 0);
  mlf::Run r = only_run(run);
  CHECK(r.status() == mlf::RUNNING);  // a SIGKILL leaves it so; the resume below ends it
  CHECK(r.artifacts == std::map<std::string, uintmax_t>{
                           {"trainer.json", fs::file_size(run / "latest" / "trainer.json")}});
  CHECK(json::parse(read_text(r.dir / "artifacts" / "trainer.json")).at("epoch") == 1);
  // The resume continues the MLflow run and logs the artifacts of the end: epoch 2's.
  train({"--resume", run.string()});
  check_run(run, 2, true);
  CHECK(only_run(run).dir.filename() == r.dir.filename());
  CHECK(only_run(run).params.at("resume") == run.string());

  const fs::path light = tmp / "light";
  train({"-e", "1", "-s", light.string(), "--log-final-weights=false"});
  check_run(light, 1, false);
  CHECK(only_run(light).params.at("log-final-weights") == "false");
}
