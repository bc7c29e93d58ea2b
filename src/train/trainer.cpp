// The training loop: a Trainer (Caffe's Solver) sets up the data of each rank, the model replica
// and its optimizer, then runs steps (forward, loss, backward with the overlapped gradient
// allreduce, update), evaluations, checkpoints, tracking and progress. run_training drives it.
#include "train/trainer.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/device.h"
#include "core/threads.h"
#include "core/timer.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/transform.h"
#include "dist/grad_sync.h"
#include "dist/shard.h"
#include "dist/split_data.h"
#include "io/progress.h"
#include "io/tracking.h"
#include "layers/dropout.h"
#include "layers/softmax_xent.h"
#include "models/registry.h"
#include "optim/adamw.h"
#include "optim/schedule.h"
#include "optim/sgd.h"
#include "train/fp16_scaler.h"

namespace mpicnn::train {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string utc_now(const char* format) {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, format, &tm);
  return buf;
}

// ---- data of this rank ------------------------------------------------------------------------

using dist::SplitData;  // dist/split_data.h
using dist::SplitInfo;

// ---- preprocessing ------------------------------------------------------------------------------

// The normalisation a dataset kind is usually trained with (mean or std per channel).
std::vector<float> default_mean_std(const std::string& kind, int channels, bool mean) {
  std::vector<float> v;
  if (kind == "fashion-mnist") v = {mean ? data::kFashionMnistMean : data::kFashionMnistStd};
  else if (kind == "mnist") v = {mean ? 0.1307f : 0.3081f};
  else if (kind == "cifar10" || kind == "cifar100") {
    const auto& a = mean ? data::kCifar10Mean : data::kCifar10Std;
    v.assign(a.begin(), a.end());
  } else if (kind == "imagefolder" || kind == "csv") {
    const auto& a = mean ? data::kImageNetMean : data::kImageNetStd;
    v.assign(a.begin(), a.end());
  } else {
    v = {0.5f};  // idx, synthetic: x / 255 mapped to [-1, 1]
  }
  if (v.size() == 3 && channels == 1) v = {(v[0] + v[1] + v[2]) / 3};
  return v;
}

// The model's input size and the train / eval preprocessing for this split.
struct InputPlan {
  int channels = 3, height = 0, width = 0;
  data::Preprocess train, eval;
};

InputPlan plan_input(const TrainOptions& o, const SplitInfo& info) {
  const ModelSpec& spec = model_spec(o.model);
  InputPlan p;
  p.channels = info.channels > 0 ? info.channels : 3;
  const bool fixed = info.height > 0;
  if (o.image_size > 0) {
    p.height = p.width = o.image_size;
  } else if (fixed) {
    p.height = info.height;
    p.width = info.width;
    CHECK(std::min(p.height, p.width) >= spec.min_size, "--image-size: ", info.kind, "'s ",
          info.height, "x", info.width, " images are below ", spec.name, "'s smallest input ",
          spec.min_size, "; pass --image-size N (N >= ", spec.min_size, ") to resize them");
  } else {
    p.height = p.width = spec.default_size;
  }
  data::Preprocess base;
  base.channels = p.channels;
  base.height = p.height;
  base.width = p.width;
  base.mean = o.mean.empty() ? default_mean_std(info.kind, p.channels, true) : o.mean;
  base.stddev = o.std.empty() ? default_mean_std(info.kind, p.channels, false) : o.std;
  base.seed = o.seed;
  const bool same_size = fixed && p.height == info.height && p.width == info.width;

  p.eval = base;
  if (!fixed) {  // torchvision's eval recipe: resize the shorter side by 256/224, center crop
    p.eval.geometry = data::Geometry::ResizeCenterCrop;
    p.eval.resize = int(std::lround(p.height * 256.0 / 224.0));
  } else {
    p.eval.geometry = same_size ? data::Geometry::None : data::Geometry::Resize;
  }
  p.train = p.eval;
  if (o.augment == "flip" || o.augment == "crop-flip") p.train.hflip = true;
  if (o.augment == "crop-flip") {
    CHECK(fixed || o.image_size > 0, "--augment crop-flip: needs fixed-size images");
    CHECK(same_size, "--augment crop-flip: pads and crops at the images' own size; drop --image-size");
    p.train.geometry = data::Geometry::PadRandomCrop;
    p.train.padding = std::max(1, p.height / 8);
  }
  if (o.augment == "imagenet") {
    p.train.geometry = data::Geometry::RandomResizedCrop;
    p.train.hflip = true;
  }
  return p;
}

// ---- the pieces of a run ------------------------------------------------------------------------

std::unique_ptr<Optimizer> make_optimizer(const TrainOptions& o, ParamStore& store, double lr) {
  if (o.optimizer == "adamw") {
    AdamWOptions a;
    a.lr = lr;
    a.weight_decay = o.weight_decay;
    return std::make_unique<AdamW>(store, a);
  }
  SgdOptions s;
  s.lr = lr;
  s.momentum = o.momentum;
  s.weight_decay = o.weight_decay;
  s.nesterov = o.nesterov;
  return std::make_unique<SGD>(store, s);
}

// Everything rank 0 holds (the model replica, optimizer) made equal on all ranks.
void replicate_from_root(const dist::Comm& comm, Model& model, Optimizer& opt) {
  comm.broadcast(model.params().values());
  if (model.params().buffers().numel() > 0) comm.broadcast(model.params().buffers());
  for (Tensor t : opt.state_slabs()) comm.broadcast(t);
  int64_t steps = opt.steps();
  comm.broadcast(steps);
  opt.set_steps(steps);
}

// The loader for one pass over `ds`: float batches made on the CPU for a CPU model; for a GPU
// model, 8-bit windows in page-locked memory (a quarter of the bytes to copy up, in one DMA)
// that the GPU normalises and mirrors (model_input).
std::unique_ptr<data::Loader> make_loader(const data::Dataset& ds, const data::Transform& tf,
                                          const data::LoaderOptions& lopt, Device device) {
  const Shape sample{tf.channels(), tf.height(), tf.width()};
  if (device == Device::CUDA)
    return std::make_unique<data::Loader>(
        ds, sample,
        data::ByteSamples{[&tf](uint8_t* out, const data::Image& im, uint64_t e, uint64_t id) { return tf.window(out, im, e, id); },
                          [](size_t bytes) { return gpu::backend().alloc_pinned(bytes); }},
        lopt);
  return std::make_unique<data::Loader>(
      ds, sample, [&tf](float* out, const data::Image& im, uint64_t e, uint64_t id) { tf.apply(out, im, e, id); },
      lopt);
}

// A batch of make_loader's on the model's device.
Tensor model_input(InputStage& stage, const data::Transform& tf, const data::Batch& b) {
  return b.pixels ? stage.put_u8(b.pixels, b.flips, tf.mean(), tf.stddev()) : stage.put(b.images);
}

struct EvalResult {
  double loss = NAN, top1 = NAN, top5 = NAN;
};

// An evaluation's sums over this rank's samples, then over the ranks.
struct EvalSums {
  using reduce_as = double;  // Comm::allreduce_sum adds it member by member
  double loss = 0, top1_hits = 0, top5_hits = 0, samples = 0;
};

// Loss, top-1 and top-5 over the whole test split: each rank evaluates its strided shard (the
// wrapped-around padding is not counted), the sums are reduced.
EvalResult evaluate(const dist::Comm& comm, Model& model, SplitData& test,
                    const data::Transform& tf, const data::LoaderOptions& lopt,
                    SoftmaxCrossEntropy& xent, InputStage& stage) {
  model.set_training(false);
  auto [ds, order] = test.epoch(0, 0, /*shuffle=*/false);
  const int K = comm.size(), r = comm.rank();
  const uint64_t N = test.info().size;
  const std::unique_ptr<data::Loader> loader = make_loader(*ds, tf, lopt, stage.device());
  loader->start_epoch(0, order);
  EvalSums sums;
  data::Batch b;
  uint64_t pos = 0;  // position of the batch's first sample in this rank's shard
  while (loader->next(b)) {
    const Tensor& logits = model.forward(model_input(stage, tf, b));
    xent.forward(logits, b.labels.data());
    const Tensor p = to_host(xent.probabilities());
    const int64_t C = logits.shape()[1];
    for (int i = 0; i < b.size; ++i, ++pos) {
      if (uint64_t(r) + pos * uint64_t(K) >= N) continue;  // padding: a repeat of an earlier sample
      const float* row = p.data() + int64_t(i) * C;
      const int y = b.labels[size_t(i)];
      const float py = row[y];
      int above = 0;  // classes ranked strictly before the label (ties go to the label)
      for (int64_t c = 0; c < C; ++c) above += row[c] > py || (row[c] == py && c < y);
      sums.loss += -std::log(std::max(double(py), 1e-45));
      sums.top1_hits += above < 1;
      sums.top5_hits += above < 5;
      sums.samples += 1;
    }
  }
  model.set_training(true);
  sums = comm.allreduce_sum(sums);
  return {sums.loss / sums.samples, sums.top1_hits / sums.samples, sums.top5_hits / sums.samples};
}

// The hosts of the job's ranks, each once, in rank order.
std::vector<std::string> job_hosts(const dist::Comm& comm) {
  std::vector<std::string> hosts;
  for (const std::string& h : comm.allgather(comm.host()))
    if (std::find(hosts.begin(), hosts.end(), h) == hosts.end()) hosts.push_back(h);
  return hosts;
}

// ---- the trainer --------------------------------------------------------------------------------

// Where a run starts: rank 0 reads it from the checkpoint of --resume (zeros for a fresh run)
// and every rank receives it as one unit.
struct ResumePoint {
  int64_t epoch = 0, step_in_epoch = 0, global_step = 0, samples_seen = 0;  // as TrainerState
  FP16LossScaler::State scaler;
};

// What the ranks add up after every step.
struct StepTotals {
  using reduce_as = double;  // Comm::allreduce_sum adds it member by member
  double loss_sum = 0;       // loss x samples
  double samples = 0;
  double stop_votes = 0;     // ranks asked to stop (a signal)
};

// The current epoch's training, over all ranks, for its log line.
struct EpochRecord {
  double seconds = 0, loss_sum = 0, samples = 0;
  double loader_wait = 0;  // this rank's seconds waiting for batches
};

// One rank's part of a run. The constructor sets everything up (collective); then
// train_epoch, end_epoch once the epoch is complete, and finish or stop (run_training).
class Trainer {
 public:
  Trainer(const TrainOptions& o, const dist::Comm& comm, std::ostream& out,
          const TrainHooks& hooks);

  const TrainerState& state() const { return state_; }
  // The current epoch's remaining steps; true when a stop was requested (the same on every
  // rank, after the same step).
  bool train_epoch();
  bool epoch_complete() const { return state_.step_in_epoch == plan_.steps; }
  void end_epoch();      // evaluation, the epoch's log line and checkpoint
  TrainResult stop();    // after a stop request: a checkpoint unless one was just written
  TrainResult finish();  // after the last epoch: the final checkpoint and summary

 private:
  void choose_same_device();
  void open_data();
  void build_replica();
  void resume_or_start();
  ResumePoint load_resume_point();
  void start_gradient_sync();
  void open_run();
  void print_header() const;

  double train_step(const data::Batch& batch);
  void seed_dropout();
  void advance(int batch_size);
  void log_step(int64_t step, const StepTotals& totals, double seconds);
  void check_replicas_in_sync() const;
  void share_batchnorm_statistics();
  void save(const std::string& why);
  TrainResult result();

  const TrainOptions& o_;
  const dist::Comm& comm_;
  std::ostream& out_;
  const TrainHooks& hooks_;
  Timer run_clock_;
  int threads_ = 1;
  DeviceChoice dev_;
  bool fp16_ = false;

  std::optional<SplitData> train_, test_;
  InputPlan input_;
  std::optional<data::Transform> train_tf_, eval_tf_;
  data::LoaderOptions lopt_;

  TrainResult result_;  // result_.model is this rank's replica
  Model* model_ = nullptr;
  SoftmaxCrossEntropy xent_;
  InputStage stage_;
  std::vector<Dropout*> dropouts_;
  Tensor dlogits_;  // (b, classes)
  dist::EpochPlan plan_;
  double base_lr_ = 0;
  std::optional<LrSchedule> schedule_;
  std::unique_ptr<Optimizer> opt_;

  TrainerState state_;
  std::string run_dir_, resumed_from_;
  // d(mean loss over the global batch) / d(this rank's mean loss): the loss gradient carries the
  // average over ranks, so the gradient allreduce only sums.
  float grad_average_factor_ = 1;
  FP16LossScaler scaler_;
  std::optional<dist::GradSync> sync_;
  std::optional<RunTracker> tracker_;  // rank 0
  std::optional<Progress> progress_;

  EpochRecord epoch_;
  bool saved_last_ = false;  // the last epoch's end wrote a checkpoint
  double train_seconds_ = 0, comm_wait_ = 0, step_time_ = 0;
  int64_t images_this_process_ = 0;
};

Trainer::Trainer(const TrainOptions& o, const dist::Comm& comm, std::ostream& out,
                 const TrainHooks& hooks)
    : o_(o), comm_(comm), out_(out), hooks_(hooks), grad_average_factor_(1.0f / float(comm.size())) {
  threads_ = comm.threads_per_rank(o.threads);
  set_num_threads(threads_);
  choose_same_device();
  open_data();
  build_replica();
  resume_or_start();
  start_gradient_sync();
  open_run();
}

// The device, once: every rank chooses the same way (one GPU per rank on a node); a rank that
// cannot fails the job with one line.
void Trainer::choose_same_device() {
  comm_.on_all([&] {
    dev_ = choose_device(o_.device, o_.precision, o_.deterministic, comm_.local_rank());
  });
  // --device auto decides per rank: a rank without a visible GPU would train on the CPU in
  // fp32 while the others use the GPU, and the replicas would drift apart unnoticed.
  CHECK(comm_.agree(std::array<int, 2>{int(dev_.device), int(dev_.precision)}), "--device ", o_.device,
        ": the ranks chose different devices or precisions (rank ", comm_.rank(), ": ",
        dev_.description, "); give every rank a GPU, or pass --device cpu");
  fp16_ = dev_.device == Device::CUDA && dev_.precision == gpu::Precision::FP16;
}

// The train split (and the test split unless --eval-every 0) and their preprocessing.
void Trainer::open_data() {
  data::DatasetSpec spec;
  spec.kind = o_.dataset;
  spec.path = o_.data;
  spec.synthetic.seed = o_.seed;
  spec.split = "train";
  train_.emplace(comm_, spec, o_.distribute_data);
  if (o_.eval_every > 0) {
    spec.split = "test";
    spec.kind = train_->info().kind;
    try {
      test_.emplace(comm_, spec, /*distribute=*/true);
    } catch (const dist::SharedError& e) {
      throw dist::SharedError(e.message() + " (--eval-every 0 trains without a test split)");
    }
  }
  const SplitInfo& info = train_->info();
  comm_.on_root([&] { input_ = plan_input(o_, info); });
  input_ = plan_input(o_, info);  // the same on every rank now that rank 0 found no error
  if (test_ && test_->info().class_names.size() != info.class_names.size())  // known to every rank
    throw dist::SharedError(detail::concat("test split of ", o_.data, " has ", test_->info().class_names.size(),
                                           " classes, the train split ", info.class_names.size()));
  train_tf_.emplace(input_.train);
  eval_tf_.emplace(input_.eval);
  lopt_.batch_size = int(o_.batch_size);
  lopt_.workers = o_.workers;
  lopt_.skip_bad = o_.skip_bad;
  lopt_.channels = input_.channels;
}

// The model replica on its device, planned for the batch, its loss, schedule and optimizer.
void Trainer::build_replica() {
  ModelOptions mopt;
  mopt.num_classes = int(train_->info().class_names.size());
  mopt.in_channels = input_.channels;
  result_.model = build_model(o_.model, mopt, o_.seed);
  model_ = result_.model.get();
  const int64_t b = o_.batch_size;
  model_->to(dev_.device);
  model_->plan(Shape{b, input_.channels, input_.height, input_.width});
  model_->set_training(true);
  xent_.plan(b, mopt.num_classes, dev_.device);
  stage_ = InputStage(dev_.device, b, Shape{input_.channels, input_.height, input_.width});
  model_->root().for_each_layer([&](Layer& l, const std::string&) {
    if (auto* d = dynamic_cast<Dropout*>(&l)) dropouts_.push_back(d);
  });
  dlogits_ = Tensor::zeros(Shape{b, mopt.num_classes}, dev_.device);

  plan_ = train_->plan(b);
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
  state_.input = {data::geometry_name(input_.eval.geometry), input_.channels, input_.height, input_.width,
                  input_.eval.resize, input_.eval.mean, input_.eval.stddev, train_->info().class_names};
  state_.run_started = utc_now("%Y-%m-%dT%H:%M:%SZ");
  run_dir_ = o_.save_dir;
  ResumePoint at;
  comm_.on_root([&] {
    if (!o_.resume.empty()) {
      at = load_resume_point();
    } else {
      if (run_dir_.empty()) run_dir_ = "runs/" + o_.model + "-" + utc_now("%Y%m%d-%H%M%S");
      CHECK(!fs::exists(fs::path(run_dir_) / "summary.json") && !fs::exists(fs::path(run_dir_) / "checkpoints"),
            "--save-dir: ", run_dir_, " already holds a run; continue it with --resume ", run_dir_,
            " or choose another directory");
    }
    CHECK(at.step_in_epoch < plan_.steps, "--resume: the checkpoint stopped at step ",
          at.step_in_epoch, " of an epoch that now has ", plan_.steps,
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
  CHECK(saved.epoch < o_.epochs || (saved.epoch == o_.epochs && saved.step_in_epoch == 0),
        "--resume: ", ck.dir, " is past --epochs ", o_.epochs);
  if (run_dir_.empty()) {
    CHECK(!ck.run_dir.empty(), "--resume: ", ck.dir,
          " is not inside a run directory; name one with --save-dir");
    run_dir_ = ck.run_dir;
  }
  return {saved.epoch, saved.step_in_epoch, saved.global_step, saved.samples_seen,
          FP16LossScaler::saved_in(saved)};
}

void Trainer::start_gradient_sync() {
  dist::GradSyncOptions sopt;
  sopt.bucket_bytes = std::max<int64_t>(4, int64_t(o_.bucket_mb * (1 << 20)));
  sopt.average = false;  // 1/K is in the loss gradient (grad_average_factor_)
  sync_.emplace(comm_, model_->params(), sopt);
  sync_->attach(*model_);
}

// The run directory's tracker and the header lines (rank 0), and progress output.
void Trainer::open_run() {
  const std::vector<std::string> hosts = job_hosts(comm_);
  ProgressMode mode = ProgressMode::None;
  comm_.on_root([&] {
    RunInfo ri;
    ri.run_name = fs::path(run_dir_).filename().string();
    ri.model = o_.model;
    ri.dataset = train_->info().description;
    ri.ranks = comm_.size();
    ri.nodes = comm_.nodes();
    ri.threads_per_rank = threads_;
    ri.hosts = hosts;
    ri.batch_per_rank = int(o_.batch_size);
    ri.global_batch = int(o_.batch_size * comm_.size());
    ri.epochs = int(o_.epochs);
    ri.params = state_.config;
    ri.resume = !resumed_from_.empty() && fs::exists(fs::path(run_dir_) / "summary.json");
    tracker_.emplace(run_dir_, ri);
    mode = resolve_progress_mode(parse_progress_mode(o_.progress), stdout_is_terminal());
    print_header();
  });
  progress_.emplace(out_, mode);
  if (comm_.root()) result_.run_dir = run_dir_;
}

void Trainer::print_header() const {
  const int K = comm_.size(), nodes = comm_.nodes();
  const int64_t b = o_.batch_size;
  out_ << "mpicnn train: " << o_.model << " (" << model_->params().num_params() << " parameters) on "
       << train_->info().description << "\n  " << K << " rank" << (K > 1 ? "s" : "") << " on " << nodes
       << " node" << (nodes > 1 ? "s" : "") << ", " << threads_ << " thread"
       << (threads_ > 1 ? "s" : "") << " per rank; batch " << b << " per rank, " << b * K
       << " global; " << plan_.steps << " steps per epoch"
       << (plan_.padded > 0 ? " (" + std::to_string(plan_.padded) + " samples repeated to even out the ranks)" : "")
       << "\n  device " << dev_.description
       << "\n  " << opt_->name() << ", " << schedule_->describe() << "\n  run directory " << run_dir_
       << (resumed_from_.empty() ? "" : ", resumed from " + resumed_from_ + " (epoch " +
                                             std::to_string(state_.epoch) + ", step " +
                                             std::to_string(state_.step_in_epoch) + ")")
       << "\n";
  out_.flush();
}

bool Trainer::train_epoch() {
  const int64_t epoch = state_.epoch;
  saved_last_ = false;
  auto [ds, order] = train_->epoch(o_.seed, uint64_t(epoch), /*shuffle=*/true);
  // A resumed epoch skips the batches already trained on.
  const int64_t done = std::min<int64_t>(int64_t(order.size()), state_.step_in_epoch * o_.batch_size);
  order.erase(order.begin(), order.begin() + done);
  const std::unique_ptr<data::Loader> loader = make_loader(*ds, *train_tf_, lopt_, dev_.device);
  loader->start_epoch(uint64_t(epoch), std::move(order));
  sync_->reset_stats();
  progress_->begin_epoch(epoch + 1, o_.epochs, plan_.steps);
  Timer epoch_clock;
  epoch_ = {};
  data::Batch batch;
  bool stop = false;
  for (int64_t step = state_.step_in_epoch; step < plan_.steps && !stop; ++step) {
    Timer step_clock;
    opt_->set_lr(schedule_->lr(epoch, step, plan_.steps));
    CHECK(loader->next(batch), "rank ", comm_.rank(), ": data ran out at step ", step, " of epoch ", epoch + 1);
    const double loss = train_step(batch);
    if (hooks_.after_step) hooks_.after_step(state_);
    // One small allreduce: the global loss sum, sample count and stop votes.
    const StepTotals totals = comm_.allreduce_sum(
        StepTotals{loss * batch.size, double(batch.size), stop_requested() ? 1.0 : 0.0});
    CHECK(std::isfinite(totals.loss_sum), "epoch ", epoch + 1, " step ", step + 1,
          ": the loss is not finite (lower -lr/--learning-rate, now ", base_lr_, ")");
    log_step(step, totals, step_clock.seconds());
    if (o_.check_sync > 0 && state_.global_step % o_.check_sync == 0) check_replicas_in_sync();
    stop = totals.stop_votes > 0;
  }
  epoch_.seconds = epoch_clock.seconds();
  epoch_.loader_wait = loader->wait_seconds();
  train_seconds_ += epoch_.seconds;
  comm_wait_ += sync_->stats().wait_seconds;
  step_time_ += sync_->stats().step_seconds;
  result_.train_loss = epoch_.samples > 0 ? epoch_.loss_sum / epoch_.samples : NAN;
  return stop;
}

// One optimizer step, the same on every rank: forward, loss, backward with the gradient sums
// over ranks overlapped, update (skipped when fp16 gradients overflowed). Returns this rank's
// mean loss over its batch.
double Trainer::train_step(const data::Batch& batch) {
  seed_dropout();
  const Tensor& logits = model_->forward(model_input(stage_, *train_tf_, batch));
  xent_.forward(logits, batch.labels.data());
  Tensor dlogits = dlogits_.slice0(0, batch.size);
  model_->params().zero_grad();
  sync_->begin_step();  // buckets are summed over ranks as backward finishes them
  xent_.backward(dlogits, batch.labels.data(), grad_average_factor_ * scaler_.scale());
  model_->backward(dlogits);
  const double loss = xent_.loss();  // on a GPU, read while backward runs
  sync_->finish();
  if (scaler_.accept(model_->params().grads(), *opt_)) opt_->step();
  advance(batch.size);
  return loss;
}

// Dropout masks from (seed, global step, this rank's first sample).
void Trainer::seed_dropout() {
  const uint64_t first_sample = uint64_t(comm_.rank()) * uint64_t(o_.batch_size);
  for (Dropout* d : dropouts_) d->set_draw(o_.seed, uint64_t(state_.global_step), first_sample);
}

void Trainer::advance(int batch_size) {
  ++state_.global_step;
  ++state_.step_in_epoch;
  state_.samples_seen += int64_t(batch_size) * comm_.size();  // every rank's batch has this size
}

void Trainer::log_step(int64_t step, const StepTotals& totals, double seconds) {
  epoch_.loss_sum += totals.loss_sum;
  epoch_.samples += totals.samples;
  images_this_process_ += int64_t(totals.samples);
  if (!comm_.root()) return;
  const double mean_loss = totals.loss_sum / totals.samples;
  const double ips = totals.samples / std::max(seconds, 1e-9);
  progress_->step(step + 1, mean_loss, ips);
  tracker_->log_step(
      {state_.global_step, state_.epoch + 1, mean_loss, opt_->lr(), ips, run_clock_.seconds()});
}

// --check-sync: every rank's weights must equal rank 0's.
void Trainer::check_replicas_in_sync() const {
  const std::vector<int> bad = comm_.ranks_out_of_sync(model_->params().values());
  if (bad.empty()) return;
  std::string list;
  for (int x : bad) list += (list.empty() ? "" : ", ") + std::to_string(x);
  throw dist::SharedError("--check-sync: after step " + std::to_string(state_.global_step) +
                          " the weights of rank(s) " + list + " differ from rank 0's");
}

// Rank 0's BatchNorm running statistics become every rank's (see trainer.h).
void Trainer::share_batchnorm_statistics() {
  if (model_->params().buffers().numel() > 0) comm_.broadcast(model_->params().buffers());
}

void Trainer::end_epoch() {
  ++state_.epoch;
  state_.step_in_epoch = 0;
  const bool last = state_.epoch == o_.epochs;
  EvalResult ev;
  if (test_ && (state_.epoch % o_.eval_every == 0 || last)) {
    share_batchnorm_statistics();
    ev = evaluate(comm_, *model_, *test_, *eval_tf_, lopt_, xent_, stage_);
    result_.test_loss = ev.loss;
    result_.top1 = ev.top1;
    result_.top5 = ev.top5;
  }
  if (comm_.root()) {
    const EpochRecord& e = epoch_;
    progress_->end_epoch(
        {result_.train_loss, ev.loss, ev.top1, e.seconds, e.samples / std::max(e.seconds, 1e-9)});
    tracker_->log_epoch({state_.epoch, result_.train_loss, ev.loss, ev.top1, ev.top5, e.seconds,
                         sync_->stats().wait_share(), e.loader_wait, int64_t(e.samples)});
  }
  saved_last_ = o_.checkpoint_every > 0 && (state_.epoch % o_.checkpoint_every == 0 || last);
  if (saved_last_) save("");
}

// Rank 0 writes the checkpoint with rank 0's BatchNorm running statistics, which are then also
// every rank's (see trainer.h); a failed save stops every rank.
void Trainer::save(const std::string& why) {
  share_batchnorm_statistics();
  scaler_.record(state_);
  comm_.on_root([&] {
    const CheckpointPaths p = save_checkpoint(run_dir_, *model_, *opt_, state_, o_.keep_checkpoints);
    if (!why.empty()) out_ << why << ": " << p.dir << "\n";
  });
}

TrainResult Trainer::stop() {
  const int sig = comm_.allreduce_max(stop_signal());
  result_.stopped = true;
  result_.stop_signal = sig;
  const std::string why = "stop requested (signal " + std::to_string(sig) + ")";
  if (!saved_last_) save(why + ", checkpoint written");
  comm_.on_root([&] {
    if (saved_last_) out_ << why << "\n";
    tracker_->set_summary("stopped_by_signal", sig);
    tracker_->finish(RunStatus::Killed);
    out_ << "resume with: --resume " << run_dir_ << "\n";
  });
  return result();
}

TrainResult Trainer::finish() {
  if (!saved_last_) save("");
  comm_.on_root([&] {
    const double comm_share = step_time_ > 0 ? comm_wait_ / step_time_ : 0.0;
    tracker_->set_summary("comm_share", comm_share);
    tracker_->set_summary("device", dev_.description);
    if (fp16_) tracker_->set_summary("fp16_skipped_steps", scaler_.skipped_steps());
    tracker_->set_summary("resumed_from", resumed_from_);
    tracker_->finish(RunStatus::Finished);
    out_ << "done: " << run_dir_ << " (" << Progress::format_eta(train_seconds_) << " training, "
         << int64_t(train_seconds_ > 0 ? double(images_this_process_) / train_seconds_ : 0)
         << " images/s, " << int(std::lround(100 * comm_share))
         << "% of step time waiting on gradient communication)\n";
  });
  return result();
}

TrainResult Trainer::result() {
  result_.state = state_;
  result_.train_seconds = train_seconds_;
  result_.images_per_s = train_seconds_ > 0 ? double(images_this_process_) / train_seconds_ : 0;
  result_.comm_share = step_time_ > 0 ? comm_wait_ / step_time_ : 0;
  return std::move(result_);
}

}  // namespace

TrainOptions resume_options(const std::vector<std::string>& args) {
  const TrainOptions given = parse_train_options(args);
  CHECK(!given.resume.empty(), "resume_options: no --resume in the arguments");
  const CheckpointPaths ck = resolve_checkpoint(given.resume);
  const TrainerState st = read_trainer_state(ck.trainer);
  Config base = st.config;
  base.erase("resume");
  base.erase("save-dir");
  return parse_train_options(args, &base, ck.trainer);
}

TrainResult run_training(const TrainOptions& o, const dist::Comm& comm, std::ostream& out,
                         const TrainHooks& hooks) {
  Trainer trainer(o, comm, out, hooks);  // data, model replica and optimizer, resumed or fresh
  while (trainer.state().epoch < o.epochs) {
    const bool stop = trainer.train_epoch();
    // A stop (the same decision on every rank) in the middle of an epoch checkpoints right
    // here; one after the epoch's last step first finishes the epoch (evaluation, logs).
    if (trainer.epoch_complete()) trainer.end_epoch();
    if (stop) return trainer.stop();
  }
  return trainer.finish();
}

}  // namespace mpicnn::train
