// run_training and the setup of its Trainer (trainer_class.h, Caffe's Solver): threads, one
// device for all ranks, the task's data and model replica (task.h), the optimizer, resume or
// fresh start, gradient sync, the run directory. The epochs, the step, evaluation and
// checkpoints are trainer_epochs.cpp's.
#include "train/trainer.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "core/device.h"
#include "core/threads.h"
#include "core/text.h"
#include "core/timer.h"
#include "data/dataset.h"
#include "data/holdout.h"
#include "data/loader.h"
#include "data/transform.h"
#include "dist/grad_sync.h"
#include "dist/nccl_backend.h"
#include "dist/shard.h"
#include "dist/split_data.h"
#include "io/progress.h"
#include "io/tracking.h"
#include "layers/dropout.h"
#include "layers/softmax_xent.h"
#include "models/registry.h"
#include "optim/adamw.h"
#include "optim/lars.h"
#include "optim/schedule.h"
#include "optim/sgd.h"
#include "train/finetune.h"
#include "train/trainer_class.h"

namespace mpicnn::train {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// Rank 0, before anything is written: a run directory that exists but cannot be written to
// (a read-only file system, no permission) is named now, by the flag that chose it, rather
// than as whichever file deep in mlruns/ happened to be written first.
void check_run_dir_writable(const std::string& dir, const char* flag) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return;  // created later, with its own message
  const fs::path probe = fs::path(dir) / ".mpicnn_write_probe";
  std::FILE* f = std::fopen(probe.c_str(), "w");
  CHECK(f != nullptr, flag, ": run directory ", dir, " cannot be written to (", std::strerror(errno), ")");
  std::fclose(f);
  fs::remove(probe, ec);
}


// ---- the pieces of a run ------------------------------------------------------------------------


// "ring allreduce, progress thread, fp32, 1 bucket of 1.0 MiB": the sync as it runs.
std::string describe_sync(const dist::GradSync& s) {
  const dist::GradSyncOptions& o = s.options();
  int64_t floats = 0;
  for (const dist::Bucket& b : s.buckets()) floats += b.end - b.begin;
  const char* mode = o.mode == dist::SyncMode::Thread  ? "progress thread"
                     : o.nccl && o.mode == dist::SyncMode::Hooks ? "queued as backward completes buckets"
                     : o.mode == dist::SyncMode::Hooks ? "tested between layers"
                                                       : "after backward";
  const bool fp32 = o.compression == dist::GradCompression::None;
  char size[32];
  std::snprintf(size, sizeof size, "%.1f MiB", double(floats) * (fp32 ? 4 : 2) / (1 << 20));
  return std::string(o.nccl ? "nccl" : dist::to_string(o.algo)) + " allreduce, " + mode + ", " +
         (fp32 ? "fp32" : dist::to_string(o.compression)) + ", " + std::to_string(s.buckets().size()) +
         " bucket" + (s.buckets().size() > 1 ? "s" : "") + " of " + size + " in all";
}

// The hosts of the job's ranks, each once, in rank order.
std::vector<std::string> job_hosts(const dist::Comm& comm) {
  std::vector<std::string> hosts;
  for (const std::string& h : comm.allgather(comm.host()))
    if (std::find(hosts.begin(), hosts.end(), h) == hosts.end()) hosts.push_back(h);
  return hosts;
}

std::unique_ptr<Optimizer> make_optimizer(const TrainOptions& o, ParamStore& store, double lr) {
  if (o.optimizer == "adamw") {
    AdamWOptions a;
    a.lr = lr;
    a.weight_decay = o.weight_decay;
    a.exclude_bn_bias = o.no_decay_bn_bias;
    return std::make_unique<AdamW>(store, a);
  }
  if (o.optimizer == "lars") {
    LarsOptions l;
    l.lr = lr;
    l.momentum = o.momentum;
    l.weight_decay = o.weight_decay;
    l.eta = o.lars_eta;
    l.nesterov = o.nesterov;
    return std::make_unique<LARS>(store, l);
  }
  SgdOptions s;
  s.lr = lr;
  s.momentum = o.momentum;
  s.weight_decay = o.weight_decay;
  s.nesterov = o.nesterov;
  s.exclude_bn_bias = o.no_decay_bn_bias;
  return std::make_unique<SGD>(store, s);
}

void replicate_from_root(const dist::Comm& comm, Model& model, Optimizer& opt) {
  comm.broadcast(model.params().values());
  if (model.params().buffers().numel() > 0) comm.broadcast(model.params().buffers());
  for (Tensor t : opt.state_slabs()) comm.broadcast(t);
  int64_t steps = opt.steps();
  comm.broadcast(steps);
  opt.set_steps(steps);
}

std::string utc_now(const char* format) {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, format, &tm);
  return buf;
}


}  // namespace

// ---- the trainer's setup ------------------------------------------------------------------------

Trainer::Trainer(const TrainOptions& o, const dist::Comm& comm, std::ostream& out,
                 const TrainHooks& hooks)
    : o_(o), comm_(comm), out_(out), hooks_(hooks), grad_average_factor_(1.0f / float(comm.size())) {
  threads_ = comm.threads_per_rank(o.threads);
  set_num_threads(threads_);
  task_ = o.task == Task::Detection ? make_detection_task(o, comm) : make_classify_task(o, comm);
  loss_parts_ = task_->loss_parts();
  choose_same_device();
  task_->open_data(state_);
  build_replica();
  resume_or_start();
  start_gradient_sync();
  open_run();
}

// The device, once: every rank chooses the same way (one GPU per rank on a node); a rank that
// cannot fails the job with one line.
void Trainer::choose_same_device() {
  comm_.on_all([&] {
    const std::string device = task_->cpu_only() && o_.device == "auto" ? "cpu" : o_.device;
    exec_ = make_exec_config({.device = device,
                              .precision = o_.precision,
                              .gpu_layout = o_.gpu_layout,
                              .deterministic = o_.deterministic},
                             comm_.local_rank());
  });
  // --device auto decides per rank: a rank without a visible GPU would train on the CPU in
  // fp32 while the others use the GPU, and the replicas would drift apart unnoticed.
  CHECK(comm_.agree(std::array<int, 2>{int(exec_.device), int(exec_.precision)}), "--device ",
        o_.device, ": the ranks chose different devices or precisions (rank ", comm_.rank(), ": ",
        describe_device(exec_), "); give every rank a GPU, or pass --device cpu");
  fp16_ = exec_.device == Device::CUDA && exec_.precision == Precision::kFp16;
  state_.execution = exec_json(exec_);
}

// The task's model replica on the device, the schedule and the optimizer.
void Trainer::build_replica() {
  result_.model = task_->build_model(exec_);
  model_ = result_.model.get();
  const int64_t b = o_.batch_size * o_.accumulate;  // samples per optimizer step and rank
  const uint64_t N = task_->train_size();

  // Fewer samples than ranks: some rank would train only on copies of the others' samples,
  // which is a launch mistake (mpiexec -n too big for the data), not a plan.
  if (o_.distribute_data && N < uint64_t(comm_.size()))
    throw dist::SharedError(detail::concat("-d: ", task_->data_description(), ": fewer training samples than the ",
                                           comm_.size(), " ranks; run at most ", N,
                                           " (mpiexec -n) or pass --distribute-data=false"));
  epoch_steps_ = dist::epoch_steps(int64_t(N), o_.distribute_data ? comm_.size() : 1, b);
  const int64_t global_batch = b * comm_.size();
  base_lr_ = o_.scale_lr ? scale_lr(o_.learning_rate, global_batch) : o_.learning_rate;
  schedule_.emplace(parse_lr_schedule(o_.schedule_spec(), base_lr_, o_.epochs));
  opt_ = make_optimizer(o_, model_->params(), base_lr_);
}

// Rank 0 continues the checkpoint of --resume or starts a run directory; then its weights,
// optimizer state and position are every rank's.
void Trainer::resume_or_start() {
  state_.seed = o_.seed;
  state_.ranks = comm_.size();
  state_.config = to_config(o_);
  if (!o_.data.empty()) state_.data_path = fs::absolute(o_.data).lexically_normal().string();
  if (!o_.test_data.empty()) state_.test_data_path = fs::absolute(o_.test_data).lexically_normal().string();
  task_->record(state_);
  state_.run_started = utc_now("%Y-%m-%dT%H:%M:%SZ");
  run_dir_ = o_.save_dir;
  ResumePoint at;
  comm_.on_root([&] {
    if (!o_.resume.empty()) {
      at = load_resume_point();
      if (!o_.init_weights.empty()) init_line_ = "init weights: not reloaded (the checkpoint's weights continue)";
    } else {
      // Fine-tuning starts from --init-weights; a resume continues from its checkpoint instead.
      if (!o_.init_weights.empty()) init_line_ = task_->load_init_weights();
      if (run_dir_.empty()) run_dir_ = "runs/" + o_.model + "-" + utc_now("%Y%m%d-%H%M%S");
      CHECK(!fs::exists(fs::path(run_dir_) / "summary.json") && !fs::exists(fs::path(run_dir_) / "checkpoints"),
            "--save-dir: ", run_dir_, " already holds a run; continue it with --resume ", run_dir_,
            " or choose another directory");
    }
    check_run_dir_writable(run_dir_, o_.resume.empty() ? "--save-dir" : "--resume");
    CHECK(at.step_in_epoch < epoch_steps_.steps, "--resume: the checkpoint stopped at step ",
          at.step_in_epoch, " of an epoch that now has ", epoch_steps_.steps,
          " steps (batch size or rank count changed)");
  });
  comm_.broadcast(at);
  state_.epoch = at.epoch;
  state_.step_in_epoch = at.step_in_epoch;
  state_.global_step = at.global_step;
  state_.samples_seen = at.samples_seen;
  state_.loss_scale = at.scaler.scale;  // carried into later checkpoints as it was
  state_.scale_clean_steps = at.scaler.clean_steps;
  state_.scale_skipped_steps = at.scaler.skipped_steps;
  scaler_ = FP16LossScaler(fp16_, at.scaler);
  replicate_from_root(comm_, *model_, *opt_);
}

// Rank 0: loads the checkpoint of --resume into the replica and optimizer, and keeps its run
// directory (unless --save-dir names another), start time and RNG counters.
ResumePoint Trainer::load_resume_point() {
  const CheckpointPaths ck = resolve_checkpoint(o_.resume);
  const TrainerState saved = load_checkpoint(ck.dir, *model_, *opt_);
  resumed_from_ = ck.dir;
  state_.rng_counters = saved.rng_counters;
  state_.run_started = saved.run_started;
  CHECK(saved.seed == o_.seed, "--seed: ", o_.seed, " differs from the checkpoint's ", saved.seed,
        " (", ck.trainer, ")");
  // The validation split is part of what the run trains on: another one would train on
  // samples it held out before. Checkpoints without the key predate it and held out none.
  const auto vs = saved.config.find("val-split");
  const std::string saved_split = vs == saved.config.end() ? "0" : vs->second;
  CHECK(saved_split == to_config(o_).at("val-split"), "--val-split: ", to_config(o_).at("val-split"),
        " differs from the run's ", saved_split, " (", ck.trainer, "); a resumed run keeps its validation split");
  CHECK(saved.val_held_out == state_.val_held_out, "--resume: the run held out ", saved.val_held_out,
        " validation images, this one ", state_.val_held_out, " (--test-data or the data changed; ", ck.trainer,
        "); a resumed run keeps its validation split");
  CHECK(saved.epoch < o_.epochs || (saved.epoch == o_.epochs && saved.step_in_epoch == 0),
        "--resume: ", ck.dir, " is past --epochs ", o_.epochs);
  // The model the options build must be the one the run trained (a detector's settings).
  CHECK(saved.model_options.is_null() || saved.model_options == state_.model_options, "--resume: ",
        ck.trainer, " records the model ", saved.model_options.dump(), ", these options build ",
        state_.model_options.dump());
  if (saved.step_in_epoch > 0) check_mid_epoch_layout(saved, ck.dir);
  if (run_dir_.empty()) {
    CHECK(!ck.run_dir.empty(), "--resume: ", ck.dir,
          " is not inside a run directory; name one with --save-dir");
    run_dir_ = ck.run_dir;
  }
  return {saved.epoch, saved.step_in_epoch, saved.global_step, saved.samples_seen,
          FP16LossScaler::saved_in(saved)};
}

// Mid-epoch, the samples already trained are positions [0, steps x ranks x batch) of the epoch's
// order (dist/shard.h: rank r holds positions r, r + K, ...). Another rank count resumes exactly
// there only with the same global batch (ranks x batch size, hence the same steps per epoch);
// with --distribute-data=false every rank has its own order, so ranks and batch must both stay.
// Anything else would train some samples twice and skip others: refused. At an epoch boundary
// any rank count and batch size continue (the next epoch is sharded over the new ranks).
void Trainer::check_mid_epoch_layout(const TrainerState& saved, const std::string& dir) const {
  const auto cfg = to_config(o_);
  const auto was = [&](const char* key) {
    const auto it = saved.config.find(key);
    return it == saved.config.end() ? cfg.at(key) : it->second;  // older checkpoints: as now
  };
  // The batch of an optimizer step (--accumulate micro-batches; older checkpoints: 1).
  const int64_t b0 = std::stoll(was("batch-size")) *
                     (saved.config.count("accumulate") ? std::stoll(saved.config.at("accumulate")) : 1);
  const int64_t b1 = o_.batch_size * o_.accumulate, k0 = saved.ranks, k1 = comm_.size();
  const bool dist0 = was("distribute-data") == "true", dist1 = o_.distribute_data;
  const bool same = dist0 == dist1 && (dist1 ? k0 * b0 == k1 * b1 : k0 == k1 && b0 == b1);
  if (same) return;
  std::string hint = "resume from an epoch-boundary checkpoint (epoch-NNNN)";
  if (dist0 && dist1 && (k0 * b0) % (k1 * o_.accumulate) == 0)
    hint = "pass -b " + std::to_string(k0 * b0 / (k1 * o_.accumulate)) +
           (o_.accumulate > 1 ? " (with --accumulate " + std::to_string(o_.accumulate) + ")" : "") +
           " to keep the global batch of " + std::to_string(k0 * b0) + ", or " + hint;
  FAIL("--resume: ", dir, " stopped mid-epoch (step ", saved.step_in_epoch, " of epoch ", saved.epoch + 1,
       ") with ", k0, " ranks x batch ", b0, (dist0 ? "" : " (--distribute-data=false)"), "; ", k1,
       " ranks x batch ", b1, (dist1 ? "" : " (--distribute-data=false)"),
       " would not continue with the samples it had not trained: ", hint);
}

void Trainer::start_gradient_sync() {
  dist::GradSyncOptions sopt;
  sopt.bucket_bytes = o_.bucket_mb > 0 ? std::max<int64_t>(4, int64_t(o_.bucket_mb * (1 << 20)))
                                       : dist::auto_bucket_bytes(model_->params());
  sopt.mode = dist::parse_overlap(o_.overlap, "--overlap");
  sopt.algo = dist::parse_allreduce(o_.allreduce, "--allreduce");
  sopt.compression = dist::parse_grad_compression(o_.grad_compression, "--grad-compression");
  sopt.average = false;  // 1/K is in the loss gradient (grad_average_factor_)
  dist::GpuAllreduceFacts facts;
  facts.nccl_built = dist::nccl::compiled_in();
  facts.cuda = exec_.device == Device::CUDA;
  facts.ranks = comm_.size();
  if (facts.cuda) facts.shared_gpu = dist::first_duplicate(comm_.allgather(gpu::backend().device_uuid()));
  // The facts are the same on every rank, so is a refusal: reported once (SharedError).
  comm_.on_all([&] {
    sopt.nccl = dist::resolve_gpu_allreduce(dist::parse_gpu_allreduce(o_.gpu_allreduce, "--gpu-allreduce"),
                                            facts, "--gpu-allreduce") == dist::GpuAllreduce::Nccl;
  });
  sync_.emplace(comm_, model_->params(), sopt);
  if (task_->sync_during_backward()) sync_->attach(*model_);
}

// The run directory's tracker and the header lines (rank 0), and progress output.
void Trainer::open_run() {
  const std::vector<std::string> hosts = job_hosts(comm_);
  ProgressMode mode = ProgressMode::None;
  comm_.on_root([&] {
    RunInfo ri;
    ri.run_name = fs::path(run_dir_).filename().string();
    ri.model = o_.model;
    ri.dataset = task_->data_description();
    ri.ranks = comm_.size();
    ri.nodes = comm_.nodes();
    ri.threads_per_rank = threads_;
    ri.hosts = hosts;
    ri.batch_per_rank = int(o_.batch_size);
    ri.global_batch = int(o_.batch_size * o_.accumulate * comm_.size());  // per optimizer step
    ri.epochs = int(o_.epochs);
    ri.params = state_.config;  // as trainer.json records it
    ri.resume = !resumed_from_.empty() && fs::exists(fs::path(run_dir_) / "summary.json");
    ri.facts = run_facts();
    // A fact, not an option: the MLflow param "validation" says what --val-split came to
    // (summary.json's "validation", set below, holds the numbers).
    if (state_.val_held_out > 0)
      ri.facts["validation"] = data::describe_holdout(state_.val_fraction, state_.val_held_out);
    tracker_.emplace(run_dir_, ri);
    if (state_.val_held_out > 0)
      tracker_->set_summary("validation", {{"fraction", state_.val_fraction}, {"held_out", state_.val_held_out},
                                           {"stratified", true}});
    if (!state_.test_data_path.empty()) tracker_->set_summary("test_data", state_.test_data_path);
    mode = resolve_progress_mode(parse_progress_mode(o_.progress), stdout_is_terminal());
    print_header();
  });
  progress_.emplace(out_, mode);
  if (comm_.root()) result_.run_dir = run_dir_;
}

// What the configuration amounts to (RunInfo::facts): what `recommend` learns from.
nlohmann::json Trainer::run_facts() const {
  const bool gpu = exec_.device == Device::CUDA;
  nlohmann::json facts = {{"cpus_per_node", int(std::thread::hardware_concurrency())},
                          {"gpus_per_node", gpu ? gpu::backend().device_count() : 0},
                          {"gpu_model", gpu ? gpu::backend().device_name() : std::string()},
                          {"distribute_data", o_.distribute_data},
                          {"train_samples", task_->train_size()},
                          {"model_params", model_->params().num_params()},
                          {"allreduce", dist::to_string(sync_->options().algo)},
                          {"overlap", dist::to_string(sync_->options().mode)},
                          {"grad_compression", dist::to_string(sync_->options().compression)}};
  facts.update(task_->facts());
  return facts;
}

void Trainer::print_header() const {
  const int K = comm_.size(), nodes = comm_.nodes();
  const int64_t b = o_.batch_size;
  const std::string frozen_line = describe_frozen(*model_);
  out_ << "mpicnn train: " << o_.model << " (" << model_->params().num_params()
       << " parameters) on " << task_->data_description() << task_->header_lines() << "\n  " << K
       << " rank" << (K > 1 ? "s" : "") << " on " << nodes << " node" << (nodes > 1 ? "s" : "")
       << ", " << threads_ << " thread" << (threads_ > 1 ? "s" : "") << " per rank; batch " << b
       << " per rank"
       << (o_.accumulate > 1 ? " x " + std::to_string(o_.accumulate) + " accumulated" : std::string())
       << ", " << b * o_.accumulate * K << " global; " << epoch_steps_.steps << " steps per epoch"
       << (epoch_steps_.padded > 0 ? " (" + std::to_string(epoch_steps_.padded) +
                                         " samples repeated to even out the ranks)"
                                   : "")
       << (state_.val_held_out > 0
               ? "\n  validation: " +
                     data::describe_holdout(state_.val_fraction, state_.val_held_out)
               : std::string())
       << (init_line_.empty() ? std::string() : "\n  " + init_line_)
       << (frozen_line.empty() ? std::string() : "\n  " + frozen_line)
       << (K > 1 || sync_->options().nccl ? "\n  gradient sync: " + describe_sync(*sync_)
                                          : std::string())
       << "\n  device " << describe_device(exec_) << "\n  execution: " << describe_exec(exec_)
       << "\n  " << opt_->name() << ", " << schedule_->describe()
       << describe_head_lr(*model_, o_.head_lr_mult) << "\n  run directory " << run_dir_
       << (resumed_from_.empty()
               ? ""
               : ", resumed from " + resumed_from_ + " (epoch " + std::to_string(state_.epoch) +
                     ", step " + std::to_string(state_.step_in_epoch) + ")")
       << "\n";
  if (o_.explain_plan) {
    // A detector plans its parts itself: its backbone's plan, where it made one through Model.
    if (model_->planned_input().ndim > 0)
      out_ << "  plan, per layer:\n" << indent(model_->explain_plan(), "    ");
    else
      out_ << "  plan: --explain-plan lists a classifier's layers; this model plans in parts\n";
  }
  out_.flush();
}

TrainOptions resume_options(const std::vector<std::string>& args) {
  const TrainOptions given = parse_train_options(args);
  CHECK(!given.resume.empty(), "resume_options: no --resume in the arguments");
  const CheckpointPaths ck = resolve_checkpoint(given.resume);
  const TrainerState st = read_trainer_state(ck.trainer);
  Config base = st.config;
  base.erase("resume");
  base.erase("save-dir");
  base.emplace("val-split", "0");  // checkpoints without it predate the hold-out: none was held out
  return parse_train_options(args, &base, ck.trainer);
}

TrainResult run_training(const TrainOptions& o, const dist::Comm& comm, std::ostream& out,
                         const TrainHooks& hooks) {
  Trainer trainer(o, comm, out, hooks);  // data, model replica and optimizer, resumed or fresh
  while (trainer.state().epoch < o.epochs) {
    bool stop = trainer.train_epoch();
    // A stop (the same decision on every rank) in the middle of an epoch checkpoints right
    // here; one after the epoch's last step first finishes the epoch (evaluation, logs).
    if (trainer.epoch_complete()) trainer.end_epoch();
    // A signal that came during the epoch's end (after the last step's vote: evaluation, the
    // checkpoint) stops here, before the next epoch starts: the launcher may kill the ranks
    // soon after its signal (Open MPI's mpiexec 1 s after a SIGTERM).
    if (!stop && trainer.state().epoch < o.epochs) stop = trainer.stop_agreed();
    if (stop) return trainer.stop();
  }
  return trainer.finish();
}

}  // namespace mpicnn::train
