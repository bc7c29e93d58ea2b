// ./pipeline_eval's orchestration: the task (eval/task.h) and its setup on rank 0, the model on
// the predicting ranks, the runs, the report. See evaluate.h. Every task takes the same path.
#include "eval/evaluate.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <optional>

#include "core/check.h"
#include "core/device.h"
#include "core/threads.h"
#include "dist/messenger.h"
#include "dist/watchdog.h"
#include "eval/pipeline.h"
#include "eval/task.h"

namespace mpicnn::eval {

namespace fs = std::filesystem;

namespace {

// Comm::on_root, but the other ranks nap while rank 0 runs fn: in Comm::on_root they would spin in
// MPI, each on a core that rank 0's threads (the baseline's) or time slices (more ranks than
// cores) need, and its timings would measure that contention.
void on_root_napping(const dist::Comm& comm, const std::function<void()>& fn) {
  std::exception_ptr failed;
  if (comm.root()) {
    try {
      fn();
    } catch (...) {
      failed = std::current_exception();
    }
  }
  dist::napping_barrier(comm);
  comm.on_root([&] {
    if (failed) std::rethrow_exception(failed);
  });
}

// --stages auto, collective: the first images through every stage on rank 0 alone, with one
// thread and then (predicting on the CPU) with a thread on each of the node's CPUs, then the
// layout with the highest rate at those costs on this node (eval/layout.h: balance, NodeModel:
// the stages share the node's CPUs; predict runs on the threads the pipeline will give it).
// Every rank returns the layout; rank 0 fills `cal` with what it measured and chose.
Layout calibrate(const EvalOptions& o, const EvalTask& task, const PipelineOptions& po, const dist::Comm& comm,
                 Calibration& cal) {
  const EvalSetup& setup = task.setup();
  std::string spec;
  on_root_napping(comm, [&] {
    EvalSetup few = setup;
    few.count = std::min<uint64_t>(setup.count, uint64_t(std::max<int64_t>(2 * setup.batch_size, 16)));
    const std::unique_ptr<Predictor> predictor = task.predictor(o, comm);
    const auto run = [&](const EvalSetup& s) { return run_sequential(s, task, *predictor, po); };
    // Seconds per image of each stage on `threads` threads, after one batch through every stage
    // unmeasured (first calls: the decoder's and the allocator's buffers, the model's on these
    // threads).
    const auto measure = [&](int threads) {
      set_num_threads(threads);
      EvalSetup first = few;
      first.count = std::min<uint64_t>(few.count, uint64_t(setup.batch_size));
      (void)run(first);
      const RunOutput run_few = run(few);
      StageCosts cost{};
      for (const StageTime& t : run_few.stages)
        for (int st = kRead; st <= kPredict; ++st)
          if (t.stage == stage_name(st)) cost[size_t(st)] += t.busy_s / double(std::max<uint64_t>(few.count, 1));
      return cost;
    };
    const StageCosts cost = measure(1);
    NodeModel node;
    node.cpus = comm.node_cpus();
    node.predict_on_cpu = predictor->exec().device != Device::CUDA;
    node.predict_threads = [&](int predictors) {
      return dist::threads_per_rank(o.threads, comm.node_cpus(), predictors, comm.own_cpus());
    };
    if (node.predict_on_cpu && node.cpus > 1) {
      const NodeWideAffinity wide(comm.node_cpu_ids());
      cal.threads = NodeWideAffinity::cpus();
      const double wide_s = measure(cal.threads)[kPredict];
      if (wide_s > 0 && cal.threads == node.cpus) node.speedup_at_cpus = std::clamp(cost[kPredict] / wide_s, 1.0, double(node.cpus));
      cal.predict_rate_threads = wide_s > 0 ? 1 / wide_s : 0;
    }
    const Layout l = balance(cost, comm.size(), node);
    int slow = 0;
    cal.images = few.count;
    cal.predicted_images_per_s = layout_rate(l, cost, &slow, node);
    for (double c : cost) cal.rates.push_back(c > 0 ? 1 / c : std::numeric_limits<double>::infinity());
    if (slow < 0) {
      cal.bottleneck = "the node's " + std::to_string(node.cpus) + " CPUs, shared by every stage";
    } else {
      const StageGroup& g = l.groups[size_t(slow)];
      for (int st = g.lo; st <= g.hi; ++st) {
        if (st > g.lo) cal.bottleneck += '+';
        cal.bottleneck += stage_key(st);
      }
      cal.bottleneck += " on " + std::to_string(g.count) + (g.count > 1 ? " ranks" : " rank");
    }
    spec = l.spec();
  });
  comm.broadcast(spec);
  return parse_stages(spec, comm.size());
}

// Every thread of this process allowed onto `mask`; false if any refused. All threads, not only
// the calling one: OpenMP's (and so OpenBLAS's) pool threads keep the binding they were born with.
bool set_all_threads_affinity(const cpu_set_t& mask) {
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return sched_setaffinity(0, sizeof mask, &mask) == 0;
  bool ok = true;
  while (const dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    const pid_t tid = pid_t(std::atol(e->d_name));
    ok &= sched_setaffinity(tid, sizeof mask, &mask) == 0 || errno == ESRCH;  // ESRCH: it has just ended
  }
  closedir(dir);
  return ok;
}

}  // namespace

NodeWideAffinity::NodeWideAffinity(const std::vector<int>& cpu_ids) {
  CPU_ZERO(&own_);
  if (sched_getaffinity(0, sizeof own_, &own_) != 0) return;
  cpu_set_t wide;
  CPU_ZERO(&wide);
  for (int c : cpu_ids) CPU_SET(c, &wide);
  widened_ = set_all_threads_affinity(wide);
  if (!widened_) set_all_threads_affinity(own_);  // all or nothing
}

NodeWideAffinity::~NodeWideAffinity() {
  if (widened_) set_all_threads_affinity(own_);
}

int NodeWideAffinity::cpus() {
  cpu_set_t now;
  return sched_getaffinity(0, sizeof now, &now) == 0 ? std::max(1, CPU_COUNT(&now)) : 1;
}

Report run_evaluation(const EvalOptions& o, const dist::Comm& comm) {
  const int K = comm.size(), r = comm.rank();
  const bool baseline = o.sequential || o.compare;
  const bool pipeline = !o.sequential;
  // Which ranks run which stages: --stages, else the default for K ranks (checked first, on
  // every rank alike, so that a wrong count fails before any data is read).
  Layout layout;
  comm.on_all([&] { layout = o.stages.empty() || o.stages == "auto" ? layout_for(K) : parse_stages(o.stages, K); });
  // Rank 0 opens the data and makes the setup; the others get the task of that setup.
  std::unique_ptr<EvalTask> task;
  std::string text;
  comm.on_root([&] {
    prepare_output(o);
    task = open_eval_task(o);
    text = setup_to_json(task->setup());
  });
  comm.broadcast(text);
  if (!comm.root()) task = make_eval_task(setup_from_json(text));
  const EvalSetup& setup = task->setup();
  PipelineOptions po;
  po.credits = o.credits > 0 ? o.credits : int(4 * setup.batch_size);
  po.batch_credits = o.batch_credits;
  po.skip_bad = o.skip_bad;
  Calibration cal;
  if (pipeline && o.stages == "auto") layout = calibrate(o, *task, po, comm, cal);
  po.layout = layout;
  // The other reading ranks open the same data themselves: samples are read where they are read.
  comm.on_all([&] {
    if (comm.root() || !pipeline || layout.first(r) != kRead) return;
    const uint64_t count = task->open_data(o);
    CHECK(count == setup.count, "rank ", r, " (read) found ", count, " samples where rank 0 found ", setup.count,
          " in ", setup.dataset);
  });

  // Who predicts: the pipeline's predicting ranks, and rank 0 for the sequential baseline.
  const bool predicts = (pipeline && layout.last(r) == kPredict) || (baseline && comm.root());
  // The predicting ranks share the node's cores: the other stages are light and nap while they
  // wait, so counting them (as Comm::threads_per_rank would) leaves cores idle.
  const int predictors_here = comm.node_sum(pipeline && layout.last(r) == kPredict ? 1 : 0);
  const int threads = dist::threads_per_rank(o.threads, comm.node_cpus(), std::max(1, predictors_here),
                                             comm.own_cpus());
  std::unique_ptr<Predictor> predictor;
  // A predicting rank's describe_device, describe_exec and (--explain-plan) model plan.
  std::string device, execution, plan;
  comm.on_all([&] {
    if (!predicts) return;
    predictor = task->predictor(o, comm);
    device = describe_device(predictor->exec());
    execution = describe_exec(predictor->exec());
    if (o.explain_plan) plan = predictor->explain_plan();
  });

  Report rep;
  rep.task = setup.task;
  rep.mode = pipeline ? "pipeline" : "sequential";
  rep.ranks = pipeline ? K : 1;
  rep.layout = pipeline ? layout.describe() : "rank 0: all stages, one after the other";
  rep.stage_ranks = pipeline ? layout.spec() : "";
  rep.model = setup.model;
  rep.weights = setup.weights;
  rep.dataset = setup.dataset;
  rep.batch_size = int(setup.batch_size);
  rep.threads = threads;
  for (const std::string& d : comm.allgather(device))  // the first predicting rank's
    if (rep.device.empty()) rep.device = d;
  for (const std::string& e : comm.allgather(execution))
    if (rep.execution.empty()) rep.execution = e;
  for (const std::string& p : comm.allgather(plan))
    if (rep.plan.empty()) rep.plan = p;
  rep.node_cpus = comm.node_cpus();
  rep.node_ranks = comm.local_size();
  rep.class_names = setup.class_names;

  std::optional<RunOutput> seq;
  if (baseline) {
    // Rank 0 alone, on the node's CPUs that the pipeline uses, with a thread on each (or
    // --threads); the others wait without spinning so that the baseline has the machine to
    // itself, for as long as it takes (no --timeout: a large dataset's baseline may run for hours).
    const dist::WatchdogPause long_wait;
    on_root_napping(comm, [&] {
      const NodeWideAffinity wide(comm.node_cpu_ids());
      const int cpus = NodeWideAffinity::cpus();
      rep.baseline = {dist::threads_per_rank(o.threads, cpus, 1, cpus), cpus, comm.node_cpus(), comm.own_cpus()};
      if (!pipeline) rep.threads = rep.baseline.threads;
      set_num_threads(rep.baseline.threads);
      predictor->warm_up();
      seq = run_sequential(setup, *task, *predictor, po);
    });
  }
  RunOutput run;
  if (pipeline) {
    set_num_threads(layout.last(r) == kPredict ? threads : 1);
    comm.on_all([&] {
      if (layout.last(r) == kPredict) predictor->warm_up();
    });
    run = run_pipeline(setup, *task, predictor.get(), comm, po);
  } else {
    run = std::move(*seq);
  }

  rep.stages = std::move(run.stages);
  rep.calibration = std::move(cal);
  if (!comm.root()) return rep;
  rep.skipped = std::move(run.skipped);
  rep.latency_s = std::move(run.latency_s);
  rep.wall_s = run.wall_s;
  rep.sources.reserve(setup.count);
  if (o.compare && seq->wall_s > 0) rep.sequential_images_per_s = double(seq->results.size()) / seq->wall_s;
  task->score(rep, run, o.compare ? &*seq : nullptr);
  return rep;
}

void prepare_output(const EvalOptions& o) {
  if (o.output.empty()) return;
  std::error_code ec;
  fs::create_directories(o.output, ec);
  CHECK(fs::is_directory(o.output), "--output: cannot create the folder ", o.output,
        ec ? " (" + ec.message() + ")" : std::string());
  // Before the evaluation, not after it: a folder we cannot write to fails in a second, not at
  // the end of a long run. The probe is created and removed at once.
  const fs::path probe = fs::path(o.output) / ".mpicnn_write_probe";
  std::FILE* f = std::fopen(probe.c_str(), "w");
  CHECK(f != nullptr, "--output: cannot write into ", o.output, " (", std::strerror(errno), ")");
  std::fclose(f);
  fs::remove(probe, ec);
}

void write_outputs(const EvalOptions& o, const Report& report) {
  if (o.output.empty()) return;
  prepare_output(o);
  write_predictions_csv((fs::path(o.output) / "predictions.csv").string(), report);
  write_report_json((fs::path(o.output) / "report.json").string(), report);
}

}  // namespace mpicnn::eval
