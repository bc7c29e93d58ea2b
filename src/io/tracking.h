// Run tracking on rank 0: RUN/metrics.jsonl (one JSON object per line, flushed per line),
// RUN/summary.json (rewritten atomically each epoch and at the end) and an MLflow FileStore
// under RUN/mlruns (experiment 0, one run). Not MPI (the caller gathers per-rank numbers) and
// not progress output (io/progress.h).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace mpicnn {

struct StepRecord {
  int64_t step = 0;   // global step
  int64_t epoch = 0;
  double loss = 0, lr = 0, images_per_s = 0;
  double time = 0;    // seconds since the run started
};

struct EpochRecord {
  int64_t epoch = 0;
  double train_loss = 0, test_loss = 0;
  double top1 = 0, top5 = 0;  // fractions in [0, 1]
  double epoch_seconds = 0;
  double comm_share = 0;      // fraction of step time spent in gradient communication
  double data_wait_s = 0;     // seconds the step loop waited for data
  int64_t images = 0;         // training images this epoch, over all ranks
  // A task's own figures (detection: the four losses, map50, map), by name: in the epoch's
  // metrics.jsonl line and summary.json entry, and as MLflow metrics; NaN is left out.
  std::vector<std::pair<std::string, double>> metrics;
};

struct RunInfo {
  std::string run_name;  // shown by MLflow; default: the run directory's name
  std::string model, dataset;
  int ranks = 1, nodes = 1, threads_per_rank = 1;
  std::vector<std::string> hosts;
  int batch_per_rank = 0, global_batch = 0;
  int epochs = 0;
  // The run's options as the checkpoint's trainer.json records them (every flag's long name ->
  // its value as the command line takes it, "" for a flag not set): summary.json's "params",
  // and the MLflow params (mlflow_params says which).
  std::map<std::string, std::string> params;
  // What the configuration amounts to on this hardware, as `recommend` reads it: written into
  // summary.json at the top level and as MLflow params under the same keys (strings: as they
  // are; numbers: their JSON text; arrays: their elements joined by ','), so MLflow's compare
  // view and `recommend report` show the same facts. Keys (set by the trainer): cpus_per_node,
  // gpus_per_node, workers, distribute_data, input_shape [C, H, W], num_classes,
  // train_samples, test_samples, model_params, model_macs (forward multiply-adds per image),
  // dataset_kind, validation. ranks, nodes, threads_per_rank, cpu_model and gpu_model become
  // MLflow params as well.
  nlohmann::json facts = nlohmann::json::object();
  bool resume = false;  // continue RUN's metrics, summary and MLflow run instead of a new one
};

enum class RunStatus { Running = 1, Finished = 3, Failed = 4, Killed = 5 };  // MLflow's numbers

class RunTracker {
 public:
  // Creates RUN (and mlruns), writes the MLflow run as RUNNING and a first summary.json.
  // `clock_ms` (Unix milliseconds) is injectable for tests.
  RunTracker(const std::string& run_dir, RunInfo info, std::function<int64_t()> clock_ms = {});
  // An unfinished tracker (an exception unwinding) marks the run FAILED.
  ~RunTracker();
  RunTracker(const RunTracker&) = delete;
  RunTracker& operator=(const RunTracker&) = delete;

  void log_step(const StepRecord& r);
  void log_epoch(const EpochRecord& r);  // also rewrites summary.json
  void set_summary(const std::string& key, nlohmann::json value);  // caller's extra fields
  // summary.json (also as an artifact), MLflow status and end_time; once.
  void finish(RunStatus status);
  // Copies `file` into the MLflow run's artifacts/ as `name` (default: the file's name), atomically
  // (a crash leaves the old artifact or the new one, never a torn one); logging a name again
  // replaces it. Errors name the file.
  void log_artifact(const std::string& file, const std::string& name = "");

  const std::string& run_id() const { return run_id_; }
  const std::string& mlflow_run_dir() const { return mlrun_; }
  std::string artifact_dir() const;  // mlflow_run_dir()/artifacts: meta.yaml's artifact_uri
  nlohmann::json summary() const;

 private:
  void append_jsonl(const nlohmann::json& j);
  void log_metric(const std::string& key, double value, int64_t step, int64_t ts);
  void write_run_meta(RunStatus status, int64_t end_ms);
  void write_summary();

  void write_params();

  std::string run_dir_, mlruns_, mlrun_, run_id_, user_;
  RunInfo info_;
  std::function<int64_t()> clock_ms_;
  int64_t start_ms_ = 0;
  std::vector<EpochRecord> epochs_;
  nlohmann::json extra_ = nlohmann::json::object();
  std::string status_ = "RUNNING";
  bool finished_ = false;
};

// The run's MLflow params, one per key: the options that are set, under their flag names and
// with the values trainer.json records, then the facts (RunInfo::facts plus ranks, nodes,
// threads_per_rank, cpu_model, gpu_model) except those that restate an option (distribute_data
// is --distribute-data's, allreduce --allreduce's: the option's recorded value is the param, the
// fact stays in summary.json). No param is empty: "" is a flag not given, or no GPU.
std::map<std::string, std::string> mlflow_params(const RunInfo& info);

// Helpers shared with the apps: the first "model name" of /proc/cpuinfo ("" if unknown),
// this host's name, and a key made safe for an MLflow file name.
std::string cpu_model_name();
std::string host_name();
std::string mlflow_safe_key(const std::string& key);
// Who runs this, as Python's getpass.getuser() (what MLflow records as mlflow.user) says:
// $LOGNAME, $USER, $LNAME, $USERNAME (the first set and non-empty), else the effective user's
// name in the password database, else "unknown".
std::string mlflow_user();

}  // namespace mpicnn
