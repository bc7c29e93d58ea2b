// ./pipeline_eval's orchestration: setup on rank 0, model on the predicting ranks, the runs,
// the report. See evaluate.h. A detection checkpoint takes the same path with the detector's
// setup, stages and scoring (eval/detect_stages.h).
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
#include "data/holdout.h"
#include "detect/evaluate.h"
#include "dist/messenger.h"
#include "dist/watchdog.h"
#include "eval/detect_stages.h"
#include "eval/pipeline.h"
#include "eval/setup.h"
#include "io/checkpoint.h"

namespace mpicnn::eval {

namespace fs = std::filesystem;

namespace {

// Samples that differ between two runs of the same samples (both sorted by index): `same`
// compares two results of one sample; a sample present in one run only counts too.
// Classifiers compare their top-5 classes, detectors their labels in the detector's order;
// probabilities, scores and boxes are not compared: with other thread counts (the baseline runs
// with all cores) a matrix product may round its last bit differently.
template <class T, class Same>
int64_t count_mismatches(const std::vector<T>& a, const std::vector<T>& b, Same same) {
  int64_t n = 0;
  size_t i = 0, j = 0;
  while (i < a.size() || j < b.size()) {
    if (j == b.size() || (i < a.size() && a[i].index < b[j].index)) {
      ++n, ++i;
    } else if (i == a.size() || b[j].index < a[i].index) {
      ++n, ++j;
    } else {
      n += !same(a[i], b[j]), ++i, ++j;
    }
  }
  return n;
}
bool same_top5(const Prediction& x, const Prediction& y) { return std::equal(x.top, x.top + 5, y.top); }
bool same_labels(const ImageDetections& x, const ImageDetections& y) { return x.labels == y.labels; }

// mAP of the detected images (skipped ones are left out) against the set's boxes.
detect::MapResult score_detections(const data::DetectionSet& set, const std::vector<ImageDetections>& found) {
  std::vector<int64_t> indices;
  std::vector<detect::Detections> predictions;
  for (const ImageDetections& d : found) {
    indices.push_back(int64_t(d.index));
    predictions.push_back({d.boxes, d.scores, d.labels});
  }
  return detect::evaluate_predictions(set, indices, predictions);
}

// --checkpoint without -d/--dataset: the data its run trained on, from its trainer.json.
EvalOptions resolve_data(const EvalOptions& o) {
  if (!wants_run_data(o)) return o;
  const CheckpointPaths ck = resolve_checkpoint(o.checkpoint);
  return with_run_data(o, read_trainer_state(ck.trainer), ck.trainer);
}

// The setup, and the data opened: the classifier's `dataset` or the detector's `boxes`.
EvalSetup open_data(const EvalOptions& o, std::unique_ptr<data::Dataset>& dataset, data::DetectionSet& boxes) {
  if (is_detection_checkpoint(o)) {
    std::string note;
    EvalSetup setup = make_detection_setup(o, boxes, note);
    setup.dataset += note;
    return setup;
  }
  const EvalOptions eo = resolve_data(o);
  EvalSetup setup = make_setup(eo, dataset);
  if (eo.run_test_data)
    setup.dataset += " (the run's --test-data)";
  else if (eo.val_held_out > 0)
    setup.dataset += " (the run's validation split: " + data::describe_holdout(eo.val_fraction, eo.val_held_out) +
                     ", never trained on)";
  else if (eo.run_data)
    setup.dataset += " (" + eo.split + " split of the data the run trained on)";
  return setup;
}

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

// How a predicting rank computes (--device, --precision, --gpu-layout): core/device.h, once.
ExecConfig predict_exec(const EvalOptions& o, const dist::Comm& comm) {
  return make_exec_config(
             {.device = o.device, .precision = o.precision, .gpu_layout = o.gpu_layout},
             comm.local_rank())
      .for_inference();
}

// --stages auto, collective: the first images through every stage on rank 0 alone, with one
// thread and then (predicting on the CPU) with a thread on each of the node's CPUs, then the
// layout with the highest rate at those costs on this node (eval/layout.h: balance, NodeModel:
// the stages share the node's CPUs; predict runs on the threads the pipeline will give it).
// Every rank returns the layout; rank 0 fills `cal` with what it measured and chose.
Layout calibrate(const EvalOptions& o, const EvalSetup& setup, const data::Dataset* dataset,
                 const data::DetectionSet& boxes, const PipelineOptions& po, const dist::Comm& comm, Calibration& cal) {
  std::string spec;
  on_root_napping(comm, [&] {
    EvalSetup few = setup;
    few.count = std::min<uint64_t>(setup.count, uint64_t(std::max<int64_t>(2 * setup.batch_size, 16)));
    const ExecConfig exec = setup.task == Task::Detection ? ExecConfig{} : predict_exec(o, comm);
    std::unique_ptr<DetectionPredictor> detector;
    std::unique_ptr<Predictor> predictor;
    if (setup.task == Task::Detection)
      detector = std::make_unique<DetectionPredictor>(few);
    else
      predictor = std::make_unique<Predictor>(few, exec);
    const auto run = [&](const EvalSetup& s) {
      return detector ? run_sequential(s, boxes, *detector, po) : run_sequential(s, *dataset, *predictor, po);
    };
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
    node.predict_on_cpu = exec.device != Device::CUDA;
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
  std::unique_ptr<data::Dataset> dataset;
  data::DetectionSet boxes;  // a detection setup's evaluation set (the reading ranks)
  EvalSetup setup;
  std::string text;
  comm.on_root([&] {
    prepare_output(o);
    setup = open_data(o, dataset, boxes);
    text = setup_to_json(setup);
  });
  comm.broadcast(text);
  if (!comm.root()) setup = setup_from_json(text);
  const bool detection = setup.task == Task::Detection;
  CHECK(!detection || o.precision == "auto" || o.precision == "fp32", "--precision ", o.precision,
        ": a detection checkpoint evaluates in fp32 on the CPU");
  PipelineOptions po;
  po.credits = o.credits > 0 ? o.credits : int(4 * setup.batch_size);
  po.batch_credits = o.batch_credits;
  po.skip_bad = o.skip_bad;
  Calibration cal;
  if (pipeline && o.stages == "auto") layout = calibrate(o, setup, dataset.get(), boxes, po, comm, cal);
  po.layout = layout;
  // The other reading ranks open the same data themselves: samples are read where they are read.
  comm.on_all([&] {
    if (comm.root() || !pipeline || layout.first(r) != kRead) return;
    const EvalSetup mine = open_data(o, dataset, boxes);
    CHECK(mine.count == setup.count, "rank ", r, " (read) found ", mine.count, " samples where rank 0 found ",
          setup.count, " in ", setup.dataset);
  });

  // Who predicts: the pipeline's predicting ranks, and rank 0 for the sequential baseline.
  const bool predicts = (pipeline && layout.last(r) == kPredict) || (baseline && comm.root());
  // The predicting ranks share the node's cores: the other stages are light and nap while they
  // wait, so counting them (as Comm::threads_per_rank would) leaves cores idle.
  const int predictors_here = comm.node_sum(pipeline && layout.last(r) == kPredict ? 1 : 0);
  const int threads = dist::threads_per_rank(o.threads, comm.node_cpus(), std::max(1, predictors_here),
                                             comm.own_cpus());
  std::unique_ptr<Predictor> predictor;
  std::unique_ptr<DetectionPredictor> detector;  // detection plans: the CPU (make_detection_setup refuses cuda)
  // A predicting rank's describe_device, describe_exec and (--explain-plan) model plan.
  std::string device, execution, plan;
  comm.on_all([&] {
    if (predicts && detection) {
      detector = std::make_unique<DetectionPredictor>(setup);
      device = "cpu";
    } else if (predicts) {
      const ExecConfig exec = predict_exec(o, comm);
      predictor = std::make_unique<Predictor>(setup, exec);
      device = describe_device(exec);
      execution = describe_exec(exec);
      if (o.explain_plan) plan = predictor->explain_plan();
    }
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
      if (detection) {
        detector->warm_up();
        seq = run_sequential(setup, boxes, *detector, po);
      } else {
        predictor->warm_up();
        seq = run_sequential(setup, *dataset, *predictor, po);
      }
    });
  }
  RunOutput run;
  if (pipeline) {
    set_num_threads(layout.last(r) == kPredict ? threads : 1);
    comm.on_all([&] {
      if (layout.last(r) == kPredict) detection ? detector->warm_up() : predictor->warm_up();
    });
    run = detection ? run_pipeline(setup, &boxes, detector.get(), comm, po)
                    : run_pipeline(setup, dataset.get(), predictor.get(), comm, po);
  } else {
    run = std::move(*seq);
  }

  rep.stages = std::move(run.stages);
  rep.calibration = std::move(cal);
  if (!comm.root()) return rep;
  rep.predictions = std::move(run.predictions);
  rep.skipped = std::move(run.skipped);
  rep.latency_s = std::move(run.latency_s);
  rep.wall_s = run.wall_s;
  rep.sources.reserve(setup.count);
  if (detection) {
    for (uint64_t i = 0; i < setup.count; ++i) rep.sources.push_back(boxes.samples[size_t(i)].image);
    rep.detections = std::move(run.detections);
    rep.map = score_detections(boxes, rep.detections);
    const detect::ResizeOptions resize = resize_options(setup);
    rep.resize = "min-size " + std::to_string(resize.min_size) + ", max-size " + std::to_string(resize.max_size) +
                 " (the run's), padded to a multiple of 32";
    if (o.compare) {
      rep.sequential_images_per_s = seq->wall_s > 0 ? double(seq->detections.size()) / seq->wall_s : 0;
      rep.mismatches_vs_sequential = count_mismatches(rep.detections, seq->detections, same_labels);
    }
    return rep;
  }
  for (uint64_t i = 0; i < setup.count; ++i) rep.sources.push_back(dataset->source(size_t(i)));
  rep.metrics = compute_metrics(rep.predictions, setup.num_classes);
  if (o.compare) {
    rep.sequential_images_per_s = seq->wall_s > 0 ? double(seq->predictions.size()) / seq->wall_s : 0;
    rep.mismatches_vs_sequential = count_mismatches(rep.predictions, seq->predictions, same_top5);
  }
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
