// The training loop: data of each rank, the model replica and its optimizer, the step (forward,
// loss, overlapped gradient allreduce, update), evaluation, checkpoints, tracking and progress.
#include "train/trainer.h"

#include <algorithm>
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
#include "io/progress.h"
#include "io/tracking.h"
#include "layers/dropout.h"
#include "layers/softmax_xent.h"
#include "models/registry.h"
#include "optim/adamw.h"
#include "optim/schedule.h"
#include "optim/sgd.h"

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

// What every rank needs to know about a split that only rank 0 opened.
struct SplitInfo {
  std::string kind, description;
  std::vector<std::string> class_names;
  int channels = 0, height = 0, width = 0;  // 0: sizes vary (image files)
  uint64_t size = 0;
};

// One split (train or test) as seen by this rank. Where the samples live:
//  - Scatter: rank 0 holds the whole split (IDX and CIFAR samples, or an image file list) and
//    hands each rank its shard of every epoch with MPI_Scatterv;
//  - Local: every rank can produce every sample itself (synthetic data, or the whole split
//    broadcast once for --distribute-data=false) and picks its samples by index.
class SplitData {
 public:
  // Collective. Rank 0 opens the split; a failure there is a SharedError on every rank.
  SplitData(const dist::Comm& comm, const data::DatasetSpec& spec, bool distribute)
      : comm_(comm), distribute_(distribute) {
    std::unique_ptr<data::Dataset> opened;
    comm.on_root([&] {
      opened = data::open_dataset(spec);
      CHECK(opened->size() > 0, opened->describe(), ": no samples");
      info_.kind = spec.kind == "auto" ? data::detect_dataset_kind(spec.path) : spec.kind;
      info_.description = opened->describe();
      info_.class_names = opened->class_names();
      info_.channels = opened->channels();
      info_.height = opened->height();
      info_.width = opened->width();
      info_.size = opened->size();
    });
    share_info();
    if (info_.kind == "synthetic") {  // every rank generates samples itself: nothing to send
      local_ = comm.root() ? std::move(opened) : data::open_dataset(spec);
      return;
    }
    if (comm.root()) {
      if (auto* m = dynamic_cast<data::InMemoryDataset*>(opened.get())) mem_ = m->data();
      else if (auto* f = dynamic_cast<data::FileListDataset*>(opened.get())) files_ = f->data();
    }
    bool in_memory = mem_.has_value();
    int flag = in_memory ? 1 : 0;
    MPI_CHECK(MPI_Bcast(&flag, 1, MPI_INT, 0, comm.world()));
    in_memory = flag != 0;
    if (!distribute) {  // the whole split on every rank, once
      if (in_memory)
        local_ = std::make_unique<data::InMemoryDataset>(
            dist::broadcast_in_memory(comm, mem_ ? &*mem_ : nullptr));
      else
        local_ = std::make_unique<data::FileListDataset>(
            dist::broadcast_file_list(comm, files_ ? &*files_ : nullptr));
      mem_.reset();
      files_.reset();
    } else {
      scatter_in_memory_ = in_memory;
    }
  }

  const SplitInfo& info() const { return info_; }

  // This rank's dataset for the epoch and the order to load it in (the epoch's shard, shuffled
  // when `shuffle`). Collective when the data is scattered. The dataset stays valid until the
  // next call.
  std::pair<const data::Dataset*, std::vector<uint64_t>> epoch(uint64_t seed, uint64_t epoch,
                                                               bool shuffle) {
    const int K = comm_.size(), r = comm_.rank();
    if (local_) {
      if (!distribute_) {  // the whole split, in this rank's own order
        std::vector<uint64_t> order = shuffle ? data::shuffled_order(info_.size, seed, epoch * K + r)
                                              : identity(info_.size);
        return {local_.get(), std::move(order)};
      }
      return {local_.get(), dist::rank_shard(dist::padded_epoch_order(info_.size, K, seed, epoch, shuffle), K, r)};
    }
    if (scatter_in_memory_)
      shard_ = std::make_unique<data::InMemoryDataset>(
          dist::scatter_in_memory(comm_, mem_ ? &*mem_ : nullptr, seed, epoch, shuffle));
    else
      shard_ = std::make_unique<data::FileListDataset>(
          dist::scatter_file_list(comm_, files_ ? &*files_ : nullptr, seed, epoch, shuffle));
    return {shard_.get(), identity(shard_->size())};
  }

  // Samples per rank and steps per epoch at this per-rank batch size.
  dist::EpochPlan plan(int64_t batch) const {
    if (!distribute_) return dist::epoch_plan(int64_t(info_.size), 1, batch);
    return dist::epoch_plan(int64_t(info_.size), comm_.size(), batch);
  }

 private:
  static std::vector<uint64_t> identity(size_t n) {
    std::vector<uint64_t> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = i;
    return v;
  }

  void share_info() {
    std::string text;
    if (comm_.root())
      text = json{{"kind", info_.kind}, {"description", info_.description},
                  {"classes", info_.class_names}, {"c", info_.channels}, {"h", info_.height},
                  {"w", info_.width}, {"n", info_.size}}.dump();
    comm_.broadcast(text);
    const json j = json::parse(text);
    info_.kind = j["kind"];
    info_.description = j["description"];
    info_.class_names = j["classes"].get<std::vector<std::string>>();
    info_.channels = j["c"];
    info_.height = j["h"];
    info_.width = j["w"];
    info_.size = j["n"];
  }

  const dist::Comm& comm_;
  bool distribute_;
  SplitInfo info_;
  std::unique_ptr<data::Dataset> local_;
  std::optional<data::InMemoryData> mem_;     // rank 0, scattered splits
  std::optional<data::FileListData> files_;   // rank 0, scattered splits
  bool scatter_in_memory_ = false;
  std::unique_ptr<data::Dataset> shard_;      // this epoch's shard
};

// ---- preprocessing ------------------------------------------------------------------------------

// The model's input size and the train / eval preprocessing for this split: data::default_preprocess,
// the recipe ./pipeline_eval also defaults to, with this run's choices.
using InputPlan = data::InputPreprocess;

InputPlan plan_input(const TrainOptions& o, const SplitInfo& info) {
  const ModelSpec& spec = model_spec(o.model);
  data::PreprocessQuery q;
  q.kind = info.kind;
  q.channels = info.channels > 0 ? info.channels : 3;
  q.data_height = info.height;
  q.data_width = info.width;
  q.image_size = o.image_size;
  q.default_size = spec.default_size;
  q.mean = o.mean;
  q.stddev = o.std;
  q.augment = o.augment;
  q.seed = o.seed;
  if (o.image_size == 0 && info.height > 0)
    CHECK(std::min(info.height, info.width) >= spec.min_size, "--image-size: ", info.kind, "'s ",
          info.height, "x", info.width, " images are below ", spec.name, "'s smallest input ",
          spec.min_size, "; pass --image-size N (N >= ", spec.min_size, ") to resize them");
  return data::default_preprocess(q);
}

// ---- the run ------------------------------------------------------------------------------------

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
  MPI_CHECK(MPI_Bcast(&steps, 1, MPI_INT64_T, 0, comm.world()));
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
  double sums[4] = {0, 0, 0, 0};  // loss sum, top-1 hits, top-5 hits, samples
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
      sums[0] += -std::log(std::max(double(py), 1e-45));
      sums[1] += above < 1;
      sums[2] += above < 5;
      sums[3] += 1;
    }
  }
  model.set_training(true);
  comm.allreduce_sum(std::span<double>(sums, 4));
  return {sums[0] / sums[3], sums[1] / sums[3], sums[2] / sums[3]};
}

std::vector<std::string> gather_hosts(const dist::Comm& comm) {
  std::string mine = comm.host();
  mine.resize(256, '\0');
  std::vector<char> all(256 * size_t(comm.size()));
  MPI_CHECK(MPI_Allgather(mine.data(), 256, MPI_CHAR, all.data(), 256, MPI_CHAR, comm.world()));
  std::vector<std::string> hosts;
  for (int i = 0; i < comm.size(); ++i) {
    std::string h(all.data() + 256 * size_t(i));
    if (std::find(hosts.begin(), hosts.end(), h) == hosts.end()) hosts.push_back(h);
  }
  return hosts;
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
  const int K = comm.size(), rank = comm.rank();
  const bool root = comm.root();
  TrainResult result;
  Timer run_clock;

  // ---- threads, data, model ---------------------------------------------------------------------
  const int threads = comm.threads_per_rank(o.threads);
  set_num_threads(threads);
  // The device, once: every rank chooses the same way (one GPU per rank on a node); a rank
  // that cannot fails the job with one line.
  DeviceChoice dev;
  comm.on_all([&] {
    dev = choose_device(o.device, o.precision, o.deterministic, comm.local_rank());
  });
  // --device auto decides per rank: a rank without a visible GPU would train on the CPU in
  // fp32 while the others use the GPU, and the replicas would drift apart unnoticed.
  {
    const int mine[2] = {int(dev.device), int(dev.precision)};
    int lo[2], hi[2];
    MPI_CHECK(MPI_Allreduce(mine, lo, 2, MPI_INT, MPI_MIN, comm.world()));
    MPI_CHECK(MPI_Allreduce(mine, hi, 2, MPI_INT, MPI_MAX, comm.world()));
    CHECK(lo[0] == hi[0] && lo[1] == hi[1], "--device ", o.device,
          ": the ranks chose different devices or precisions (rank ", rank, ": ",
          dev.description, "); give every rank a GPU, or pass --device cpu");
  }
  const bool fp16 = dev.device == Device::CUDA && dev.precision == gpu::Precision::FP16;

  data::DatasetSpec spec;
  spec.kind = o.dataset;
  spec.path = o.data;
  spec.synthetic.seed = o.seed;
  spec.split = "train";
  SplitData train(comm, spec, o.distribute_data);
  std::optional<SplitData> test;
  if (o.eval_every > 0) {
    spec.split = "test";
    spec.kind = train.info().kind;
    try {
      test.emplace(comm, spec, /*distribute=*/true);
    } catch (const dist::SharedError& e) {
      throw dist::SharedError(e.message() + " (--eval-every 0 trains without a test split)");
    }
  }
  const SplitInfo& info = train.info();
  InputPlan input;
  comm.on_root([&] { input = plan_input(o, info); });
  input = plan_input(o, info);  // the same on every rank now that rank 0 found no error
  if (test && test->info().class_names.size() != info.class_names.size())  // known to every rank
    throw dist::SharedError(detail::concat("test split of ", o.data, " has ", test->info().class_names.size(),
                                           " classes, the train split ", info.class_names.size()));
  const data::Transform train_tf(input.train), eval_tf(input.eval);

  ModelOptions mopt;
  mopt.num_classes = int(info.class_names.size());
  mopt.in_channels = input.channels;
  result.model = build_model(o.model, mopt, o.seed);
  Model& model = *result.model;
  const int64_t b = o.batch_size;
  model.to(dev.device);
  model.plan(Shape{b, input.channels, input.height, input.width});
  model.set_training(true);
  SoftmaxCrossEntropy xent;
  xent.plan(b, mopt.num_classes, dev.device);
  InputStage stage(dev.device, b, Shape{input.channels, input.height, input.width});
  std::vector<Dropout*> dropouts;
  model.root().for_each_layer([&](Layer& l, const std::string&) {
    if (auto* d = dynamic_cast<Dropout*>(&l)) dropouts.push_back(d);
  });

  const dist::EpochPlan plan = train.plan(b);
  const int64_t global_batch = b * K;
  const double base_lr = o.scale_lr ? scale_lr(o.learning_rate, global_batch) : o.learning_rate;
  const LrSchedule schedule = parse_lr_schedule(o.schedule_spec(), base_lr, o.epochs);
  std::unique_ptr<Optimizer> opt = make_optimizer(o, model.params(), base_lr);

  // ---- resume or fresh start: rank 0's weights and state everywhere ----------------------------
  TrainerState state;
  state.seed = o.seed;
  state.ranks = K;
  state.config = to_config(o);
  if (!o.data.empty()) state.data_path = fs::absolute(o.data).lexically_normal().string();
  state.input = {data::geometry_name(input.eval.geometry), input.channels, input.height, input.width,
                 input.eval.resize, input.eval.mean, input.eval.stddev, info.class_names};
  state.run_started = utc_now("%Y-%m-%dT%H:%M:%SZ");
  std::string run_dir = o.save_dir, resumed_from;
  comm.on_root([&] {
    if (!o.resume.empty()) {
      const CheckpointPaths ck = resolve_checkpoint(o.resume);
      const TrainerState saved = load_checkpoint(ck.dir, model, *opt);
      resumed_from = ck.dir;
      state.epoch = saved.epoch;
      state.step_in_epoch = saved.step_in_epoch;
      state.global_step = saved.global_step;
      state.samples_seen = saved.samples_seen;
      state.rng_counters = saved.rng_counters;
      state.run_started = saved.run_started;
      state.loss_scale = saved.loss_scale;
      state.scale_clean_steps = saved.scale_clean_steps;
      state.scale_skipped_steps = saved.scale_skipped_steps;
      CHECK(saved.seed == o.seed, "--seed: ", o.seed, " differs from the checkpoint's ", saved.seed,
            " (", ck.trainer, ")");
      CHECK(state.epoch < o.epochs || (state.epoch == o.epochs && state.step_in_epoch == 0),
            "--resume: ", ck.dir, " is past --epochs ", o.epochs);
      if (run_dir.empty()) {
        CHECK(!ck.run_dir.empty(), "--resume: ", ck.dir,
              " is not inside a run directory; name one with --save-dir");
        run_dir = ck.run_dir;
      }
    } else {
      if (run_dir.empty()) run_dir = "runs/" + o.model + "-" + utc_now("%Y%m%d-%H%M%S");
      CHECK(!fs::exists(fs::path(run_dir) / "summary.json") && !fs::exists(fs::path(run_dir) / "checkpoints"),
            "--save-dir: ", run_dir, " already holds a run; continue it with --resume ", run_dir,
            " or choose another directory");
    }
    CHECK(state.step_in_epoch < plan.steps, "--resume: the checkpoint stopped at step ",
          state.step_in_epoch, " of an epoch that now has ", plan.steps,
          " steps (batch size or rank count changed)");
  });
  int64_t pos[4] = {state.epoch, state.step_in_epoch, state.global_step, state.samples_seen};
  MPI_CHECK(MPI_Bcast(pos, 4, MPI_INT64_T, 0, comm.world()));
  state.epoch = pos[0];
  state.step_in_epoch = pos[1];
  state.global_step = pos[2];
  state.samples_seen = pos[3];
  replicate_from_root(comm, model, *opt);

  dist::GradSyncOptions sopt;
  sopt.bucket_bytes = std::max<int64_t>(4, int64_t(o.bucket_mb * (1 << 20)));
  sopt.average = false;  // 1/K is folded into the loss gradient's scale below
  dist::GradSync sync(comm, model.params(), sopt);
  sync.attach(model);

  // ---- run directory, tracking, progress (rank 0) -------------------------------------------------
  const std::vector<std::string> hosts = gather_hosts(comm);
  std::optional<RunTracker> tracker;
  ProgressMode mode = ProgressMode::None;
  comm.on_root([&] {
    RunInfo ri;
    ri.run_name = fs::path(run_dir).filename().string();
    ri.model = o.model;
    ri.dataset = info.description;
    ri.ranks = K;
    ri.nodes = comm.nodes();
    ri.threads_per_rank = threads;
    ri.hosts = hosts;
    ri.batch_per_rank = int(b);
    ri.global_batch = int(global_batch);
    ri.epochs = int(o.epochs);
    ri.params = state.config;
    ri.resume = !resumed_from.empty() && fs::exists(fs::path(run_dir) / "summary.json");
    tracker.emplace(run_dir, ri);
    mode = resolve_progress_mode(parse_progress_mode(o.progress), stdout_is_terminal());
    out << "mpicnn train: " << o.model << " (" << model.params().num_params() << " parameters) on "
        << info.description << "\n  " << K << " rank" << (K > 1 ? "s" : "") << " on " << comm.nodes()
        << " node" << (comm.nodes() > 1 ? "s" : "") << ", " << threads << " thread"
        << (threads > 1 ? "s" : "") << " per rank; batch " << b << " per rank, " << global_batch
        << " global; " << plan.steps << " steps per epoch"
        << (plan.padded > 0 ? " (" + std::to_string(plan.padded) + " samples repeated to even out the ranks)" : "")
        << "\n  device " << dev.description
        << "\n  " << opt->name() << ", " << schedule.describe() << "\n  run directory " << run_dir
        << (resumed_from.empty() ? "" : ", resumed from " + resumed_from + " (epoch " +
                                             std::to_string(state.epoch) + ", step " +
                                             std::to_string(state.step_in_epoch) + ")")
        << "\n";
    out.flush();
  });
  Progress progress(out, mode);
  if (root) result.run_dir = run_dir;

  data::LoaderOptions lopt;
  lopt.batch_size = int(b);
  lopt.workers = o.workers;
  lopt.skip_bad = o.skip_bad;
  lopt.channels = input.channels;
  const float loss_scale = 1.0f / float(K);  // d(mean over the global batch) / d(rank's mean)
  Tensor dlogits = Tensor::zeros(Shape{b, mopt.num_classes}, dev.device);
  // fp16: dynamic loss scaling. The loss gradient is multiplied by loss_scaler; a step whose
  // summed gradients hold an inf or NaN (the same on every rank after the allreduce) is
  // skipped and halves it; kGrowth clean steps in a row double it.
  // A resume continues the checkpoint's scaler (rank 0 read it; broadcast like the counters).
  constexpr int64_t kGrowth = 2000;
  double scaler_state[3] = {state.loss_scale, double(state.scale_clean_steps),
                            double(state.scale_skipped_steps)};
  MPI_CHECK(MPI_Bcast(scaler_state, 3, MPI_DOUBLE, 0, comm.world()));
  const bool resume_scaler = fp16 && scaler_state[0] >= 1;
  float loss_scaler = resume_scaler ? float(scaler_state[0]) : fp16 ? 65536.f : 1.f;
  int64_t clean_steps = resume_scaler ? int64_t(scaler_state[1]) : 0;
  int64_t skipped_steps = resume_scaler ? int64_t(scaler_state[2]) : 0;

  // Rank 0 writes the checkpoint with rank 0's BatchNorm running statistics, which are then
  // also every rank's (see the header); a failed save stops every rank.
  auto save = [&](const std::string& why) {
    if (model.params().buffers().numel() > 0) comm.broadcast(model.params().buffers());
    if (fp16) {
      state.loss_scale = loss_scaler;
      state.scale_clean_steps = clean_steps;
      state.scale_skipped_steps = skipped_steps;
    }
    comm.on_root([&] {
      const CheckpointPaths p = save_checkpoint(run_dir, model, *opt, state, o.keep_checkpoints);
      if (!why.empty()) out << why << ": " << p.dir << "\n";
    });
  };

  // ---- epochs ----------------------------------------------------------------------------------
  double train_seconds = 0, comm_wait = 0, step_time = 0;
  int64_t images_this_process = 0;
  bool saved_last = false;
  while (state.epoch < o.epochs) {
    const int64_t epoch = state.epoch;
    saved_last = false;
    auto [ds, order] = train.epoch(o.seed, uint64_t(epoch), /*shuffle=*/true);
    const int64_t first_step = state.step_in_epoch;
    order.erase(order.begin(), order.begin() + std::min<int64_t>(int64_t(order.size()), first_step * b));
    const std::unique_ptr<data::Loader> loader = make_loader(*ds, train_tf, lopt, dev.device);
    loader->start_epoch(uint64_t(epoch), std::move(order));
    sync.reset_stats();
    progress.begin_epoch(epoch + 1, o.epochs, plan.steps);
    Timer epoch_clock;
    double loss_sum = 0, loss_n = 0;
    data::Batch batch;
    bool stop = false;
    for (int64_t step = first_step; step < plan.steps; ++step) {
      Timer step_clock;
      opt->set_lr(schedule.lr(epoch, step, plan.steps));
      CHECK(loader->next(batch), "rank ", rank, ": data ran out at step ", step, " of epoch ", epoch + 1);
      for (Dropout* d : dropouts) d->set_draw(o.seed, uint64_t(state.global_step), uint64_t(rank) * uint64_t(b));
      const Tensor& logits = model.forward(model_input(stage, train_tf, batch));
      xent.forward(logits, batch.labels.data());
      Tensor dl = dlogits.slice0(0, batch.size);
      model.params().zero_grad();
      sync.begin_step();
      xent.backward(dl, batch.labels.data(), loss_scale * loss_scaler);
      model.backward(dl);
      const double loss = xent.loss();  // on a GPU, read while backward runs
      sync.finish();
      if (fp16 && !gpu::backend().all_finite(model.params().grads().data(), model.params().grads().numel())) {
        loss_scaler = std::max(loss_scaler / 2, 1.f);  // overflow: skip the update
        clean_steps = 0;
        ++skipped_steps;
      } else {
        if (fp16) {
          opt->set_grad_scale(1.f / loss_scaler);
          if (++clean_steps % kGrowth == 0) loss_scaler = std::min(loss_scaler * 2, 16777216.f);
        }
        opt->step();
      }
      ++state.global_step;
      state.step_in_epoch = step + 1;
      state.samples_seen += int64_t(batch.size) * K;  // every rank's batch has this size
      if (hooks.after_step) hooks.after_step(state);

      // One small allreduce: the global loss sum, sample count and stop votes.
      double r3[3] = {loss * batch.size, double(batch.size), stop_requested() ? 1.0 : 0.0};
      comm.allreduce_sum(std::span<double>(r3, 3));
      CHECK(std::isfinite(r3[0]), "epoch ", epoch + 1, " step ", step + 1,
            ": the loss is not finite (lower -lr/--learning-rate, now ", base_lr, ")");
      loss_sum += r3[0];
      loss_n += r3[1];
      images_this_process += int64_t(r3[1]);
      const double secs = step_clock.seconds();
      if (root) {
        const double ips = r3[1] / std::max(secs, 1e-9);
        progress.step(step + 1, r3[0] / r3[1], ips);
        tracker->log_step({state.global_step, epoch + 1, r3[0] / r3[1], opt->lr(), ips, run_clock.seconds()});
      }
      if (o.check_sync > 0 && state.global_step % o.check_sync == 0) {
        const std::vector<int> bad = comm.ranks_out_of_sync(model.params().values());
        if (!bad.empty()) {
          std::string list;
          for (int x : bad) list += (list.empty() ? "" : ", ") + std::to_string(x);
          throw dist::SharedError("--check-sync: after step " + std::to_string(state.global_step) +
                                  " the weights of rank(s) " + list + " differ from rank 0's");
        }
      }
      if (r3[2] > 0) {
        stop = true;
        break;
      }
    }
    const double epoch_seconds = epoch_clock.seconds();
    train_seconds += epoch_seconds;
    comm_wait += sync.stats().wait_seconds;
    step_time += sync.stats().step_seconds;
    result.train_loss = loss_n > 0 ? loss_sum / loss_n : NAN;

    // A stop (the same decision on every rank) in the middle of an epoch checkpoints right
    // here; one after the epoch's last step first finishes the epoch (evaluation, logs).
    const bool epoch_done = state.step_in_epoch == plan.steps;
    if (epoch_done) {
      state.epoch = epoch + 1;
      state.step_in_epoch = 0;
      const bool last = state.epoch == o.epochs;
      EvalResult ev;
      if (test && (state.epoch % o.eval_every == 0 || last)) {
        if (model.params().buffers().numel() > 0) comm.broadcast(model.params().buffers());
        ev = evaluate(comm, model, *test, eval_tf, lopt, xent, stage);
        result.test_loss = ev.loss;
        result.top1 = ev.top1;
        result.top5 = ev.top5;
      }
      if (root) {
        progress.end_epoch({result.train_loss, ev.loss, ev.top1, epoch_seconds,
                            loss_n / std::max(epoch_seconds, 1e-9)});
        tracker->log_epoch({state.epoch, result.train_loss, ev.loss, ev.top1, ev.top5, epoch_seconds,
                            sync.stats().wait_share(), loader->wait_seconds(), int64_t(loss_n)});
      }
      saved_last = o.checkpoint_every > 0 && (state.epoch % o.checkpoint_every == 0 || last);
      if (saved_last) save("");
    }
    if (stop) {
      int sig = stop_signal();
      MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &sig, 1, MPI_INT, MPI_MAX, comm.world()));
      result.stopped = true;
      result.stop_signal = sig;
      const std::string why = "stop requested (signal " + std::to_string(sig) + ")";
      if (!saved_last) save(why + ", checkpoint written");
      comm.on_root([&] {
        if (saved_last) out << why << "\n";
        tracker->set_summary("stopped_by_signal", sig);
        tracker->finish(RunStatus::Killed);
        out << "resume with: --resume " << run_dir << "\n";
      });
      break;
    }
  }

  if (!result.stopped) {
    if (!saved_last) save("");
    comm.on_root([&] {
      tracker->set_summary("comm_share", step_time > 0 ? comm_wait / step_time : 0.0);
      tracker->set_summary("device", dev.description);
      if (fp16) tracker->set_summary("fp16_skipped_steps", skipped_steps);
      tracker->set_summary("resumed_from", resumed_from);
      tracker->finish(RunStatus::Finished);
      out << "done: " << run_dir << " (" << Progress::format_eta(train_seconds) << " training, "
          << int64_t(train_seconds > 0 ? double(images_this_process) / train_seconds : 0)
          << " images/s, " << int(std::lround(100 * (step_time > 0 ? comm_wait / step_time : 0)))
          << "% of step time waiting on gradient communication)\n";
    });
  }
  result.state = state;
  result.train_seconds = train_seconds;
  result.images_per_s = train_seconds > 0 ? double(images_this_process) / train_seconds : 0;
  result.comm_share = step_time > 0 ? comm_wait / step_time : 0;
  return result;
}

}  // namespace mpicnn::train
