// The detection training loop. Per step each rank loads its images (flipped by a draw keyed on
// (seed, epoch, sample)), forms a padded batch, runs the detector's forward and backward and
// joins the gradient allreduce; the samplers draw from streams keyed on (step, rank, image).
// The gradient-ready hook is not attached: the FPN's lateral convolutions, registered after
// the body, finish their gradients in between the body's stages, so buckets start after
// backward (GradSync without attach).
#include "detect/trainer.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>
#include <sstream>
#include <thread>

#include "core/check.h"
#include "core/text.h"
#include "core/threads.h"
#include "core/timer.h"
#include "detect/batch.h"
#include "detect/evaluate.h"
#include "detect/faster_rcnn.h"
#include "dist/grad_sync.h"
#include "dist/shard.h"
#include "io/progress.h"
#include "io/tracking.h"
#include "optim/schedule.h"
#include "train/finetune.h"
#include "train/trainer.h"

namespace mpicnn::detect {
namespace fs = std::filesystem;

namespace {

struct Data {
  data::DetectionSet train, test;
  std::string train_text, test_text;  // "COCO JSON ... (N images, C classes)", for the logs
  std::string kind;                   // "voc" or "coco" (the training set's)
  bool has_test = false;
};

// One set through data::open_detection_set, with its counts in the description.
data::DetectionSet open_set(const fs::path& path, const std::vector<std::string>& classes, bool skip_bad,
                            const std::string& flag, std::string* text, std::string* kind) {
  data::OpenedDetectionSet o =
      data::open_detection_set(path.string(), classes, skip_bad, flag, "the training data's");
  CHECK(!o.set.samples.empty(), flag, ": ", path.string(), " holds no annotated images");
  *kind = o.kind;
  *text = o.description + " (" + std::to_string(o.set.samples.size()) + " images, " +
          std::to_string(o.set.num_objects()) + " objects, " + std::to_string(o.set.classes.size()) + " classes)";
  return std::move(o.set);
}

// -d DIR holding train/ (+ test/), or -d the training set itself; --test-data instead of test/.
Data open_data(const train::TrainOptions& o) {
  Data d;
  const fs::path dir(o.data);
  std::string test_kind;
  const bool split = fs::is_directory(dir / "train");
  d.train = open_set(split ? dir / "train" : dir, {}, o.skip_bad, "-d/--data", &d.train_text, &d.kind);
  if (!o.test_data.empty())
    d.test = open_set(o.test_data, d.train.classes, o.skip_bad, "--test-data", &d.test_text, &test_kind);
  else if (split && fs::exists(dir / "test"))
    d.test = open_set(dir / "test", d.train.classes, o.skip_bad, "-d/--data", &d.test_text, &test_kind);
  d.has_test = !d.test.samples.empty();
  return d;
}

// FasterRcnnNet's losses in its order, as torchvision's loss dict names them.
constexpr const char* kLossNames[FasterRcnnNet::kLosses] = {"loss_classifier", "loss_box_reg",
                                                            "loss_objectness", "loss_rpn_box_reg"};

// What the ranks add up after each step.
struct StepSums {
  using reduce_as = double;
  double loss[FasterRcnnNet::kLosses] = {0, 0, 0, 0};  // x images
  double images = 0;
  double stop_votes = 0;
};

// One rank's detections as text ("image label score x1 y1 x2 y2" lines), for allgather.
std::string encode(const std::vector<int64_t>& images, const std::vector<Detections>& dets) {
  std::ostringstream s;
  s.precision(9);
  for (size_t i = 0; i < dets.size(); ++i)
    for (size_t k = 0; k < dets[i].scores.size(); ++k) {
      const float* b = dets[i].boxes.data() + 4 * k;
      s << images[i] << ' ' << dets[i].labels[k] << ' ' << dets[i].scores[k] << ' ' << b[0] << ' '
        << b[1] << ' ' << b[2] << ' ' << b[3] << '\n';
    }
  return s.str();
}

// mAP over the whole test set: each rank predicts the images r, r + K, ...; rank 0's table.
MapResult evaluate(const dist::Comm& comm, Model& model, const data::DetectionSet& test,
                   int batch, const ResizeOptions& resize) {
  std::vector<int64_t> mine;
  for (int64_t i = comm.rank(); i < int64_t(test.samples.size()); i += comm.size()) mine.push_back(i);
  const std::vector<Detections> dets = predict(model, test, mine, batch, resize);
  model.set_training(true);
  std::vector<Detections> all(test.samples.size());
  for (const std::string& part : comm.allgather(encode(mine, dets))) {
    std::istringstream in(part);
    int64_t image, label;
    float score, b[4];
    while (in >> image >> label >> score >> b[0] >> b[1] >> b[2] >> b[3]) {
      Detections& d = all[size_t(image)];
      d.labels.push_back(label);
      d.scores.push_back(score);
      d.boxes.insert(d.boxes.end(), b, b + 4);
    }
  }
  std::vector<int64_t> every(test.samples.size());
  for (size_t i = 0; i < every.size(); ++i) every[i] = int64_t(i);
  return evaluate_predictions(test, every, all);
}

}  // namespace

DetectionTrainResult run_detection_training(const train::TrainOptions& o, const dist::Comm& comm,
                                            std::ostream& out) {
  CHECK(o.task == Task::Detection, "run_detection_training: --task is ", task_name(o.task));
  set_num_threads(comm.threads_per_rank(o.threads));
  Data data;
  comm.on_all([&] {
    data = open_data(o);
    CHECK(o.dataset == "auto" || o.dataset == data.kind, "--dataset ", o.dataset, ": ", o.data,
          " is read as ", data.kind == "voc" ? "a Pascal VOC folder (voc)" : "COCO JSON (coco)");
  });
  const int64_t N = int64_t(data.train.samples.size()), K = comm.size(), B = o.batch_size;

  FasterRcnnOptions fo;
  fo.num_classes = int(data.train.classes.size()) + 1;
  fo.trainable_layers = o.trainable_layers;
  // torchvision's rule: FrozenBatchNorm2d over pretrained weights, BatchNorm2d from random ones
  // (a resume keeps the run's --init-weights, so it rebuilds the same model).
  fo.frozen_batchnorm = !o.init_weights.empty();
  fo.roi.batch_size_per_image = o.box_batch_size_per_image;
  fo.rpn.post_nms_top_n_test = o.rpn_post_nms_top_n_test;
  fo.transform.min_size = o.min_size;
  fo.transform.max_size = o.max_size;
  DetectionTrainResult result;
  result.model = make_faster_rcnn(o.model, fo, o.seed);
  Model& model = *result.model;
  FasterRcnnNet& net = faster_rcnn_net(model);
  std::unique_ptr<Optimizer> opt = train::make_optimizer(o, model.params(), o.learning_rate);
  const LrSchedule schedule = parse_lr_schedule(o.schedule_spec(), o.learning_rate, o.epochs);
  const dist::EpochPlan plan = dist::epoch_plan(N, int(K), B);

  TrainerState& state = result.state;
  state.seed = o.seed;
  state.ranks = int(K);
  state.config = train::to_config(o);
  state.data_path = fs::absolute(o.data).lexically_normal().string();
  state.run_started = train::utc_now("%Y-%m-%dT%H:%M:%SZ");
  // The input record: the detector's transform (shorter side min-size, longer at most
  // max-size, torchvision's normalisation) and the class names ./pipeline_eval labels boxes with.
  state.input = {"detection", 3, int(o.min_size), int(o.max_size), 0,
                 {fo.transform.mean, fo.transform.mean + 3}, {fo.transform.std, fo.transform.std + 3},
                 data.train.classes};
  std::string& run_dir = result.run_dir;
  run_dir = o.save_dir;
  std::string init_line;
  comm.on_root([&] {
    if (!o.resume.empty()) {
      const TrainerState saved = load_checkpoint(o.resume, model, *opt);
      CHECK(saved.step_in_epoch < plan.steps, "--resume: the checkpoint stopped at step ",
            saved.step_in_epoch, " of an epoch that now has ", plan.steps, " steps");
      state.epoch = saved.epoch, state.step_in_epoch = saved.step_in_epoch;
      state.global_step = saved.global_step, state.samples_seen = saved.samples_seen;
      state.run_started = saved.run_started;
      if (run_dir.empty()) run_dir = resolve_checkpoint(o.resume).run_dir;
    } else {
      if (!o.init_weights.empty()) {
        // A torchvision classifier's state dict (conv1.weight, ...) starts the backbone body;
        // anything else must be a detector's (a new class count renews the box predictor).
        const SafetensorsReader r(train::init_weights_file(o.init_weights));
        init_line = r.contains("conv1.weight") && !r.contains("backbone.body.conv1.weight")
                        ? "init weights: backbone body from " + r.path() + " (" +
                              std::to_string(load_classifier_backbone(model, r.path())) + " tensors)"
                        : train::describe(train::load_init_weights(model, o.init_weights, {}),
                                          fo.num_classes);
      }
      if (run_dir.empty()) run_dir = "runs/" + o.model + "-" + train::utc_now("%Y%m%d-%H%M%S");
      CHECK(!fs::exists(fs::path(run_dir) / "checkpoints"), "--save-dir: ", run_dir,
            " already holds a run; continue it with --resume ", run_dir, " or choose another");
    }
  });
  train::replicate_from_root(comm, model, *opt);
  comm.broadcast(state.epoch), comm.broadcast(state.step_in_epoch);
  comm.broadcast(state.global_step), comm.broadcast(state.samples_seen);

  dist::GradSyncOptions sopt;
  sopt.bucket_bytes = o.bucket_mb > 0 ? std::max<int64_t>(4, int64_t(o.bucket_mb * (1 << 20)))
                                      : dist::auto_bucket_bytes(model.params());
  sopt.mode = dist::parse_overlap(o.overlap, "--overlap");
  sopt.algo = dist::parse_allreduce(o.allreduce, "--allreduce");
  sopt.compression = dist::parse_grad_compression(o.grad_compression, "--grad-compression");
  dist::GradSync sync(comm, model.params(), sopt);

  const std::vector<std::string> hosts = train::job_hosts(comm);
  std::optional<RunTracker> tracker;
  ProgressMode progress_mode = ProgressMode::None;
  if (comm.root()) {
    out << "task: detection, " << o.model << ", " << data.train.classes.size() << " classes ("
        << join(data.train.classes, ", ") << ")\n  train: " << data.train_text << "\n"
        << (data.has_test ? "  test: " + data.test_text + "\n" : std::string())
        << "  " << K << " rank" << (K > 1 ? "s" : "") << " x " << num_threads() << " threads, "
        << B << " images a rank a step, " << plan.steps << " steps an epoch, images resized to "
        << o.min_size << "..." << o.max_size << "\n";
    if (!init_line.empty()) out << init_line << "\n";
    out << "  run directory " << run_dir << "\n" << std::flush;
    RunInfo ri;
    ri.run_name = fs::path(run_dir).filename().string();
    ri.model = o.model;
    ri.dataset = data.train_text;
    ri.ranks = int(K);
    ri.nodes = comm.nodes();
    ri.threads_per_rank = num_threads();
    ri.hosts = hosts;
    ri.batch_per_rank = int(B);
    ri.global_batch = int(B * K);
    ri.epochs = int(o.epochs);
    ri.params = state.config;
    ri.resume = !o.resume.empty() && fs::exists(fs::path(run_dir) / "summary.json");
    ri.facts = {{"task", "detection"},
                {"cpus_per_node", int(std::thread::hardware_concurrency())},
                {"gpus_per_node", 0},
                {"dataset_kind", data.kind},
                {"num_classes", data.train.classes.size()},
                {"train_samples", N},
                {"test_samples", data.test.samples.size()},
                {"min_size", o.min_size},
                {"max_size", o.max_size},
                {"model_params", model.params().num_params()}};
    tracker.emplace(run_dir, ri);
    progress_mode = resolve_progress_mode(parse_progress_mode(o.progress), stdout_is_terminal());
  }
  Progress progress(out, progress_mode);
  Timer run_clock;

  Tensor ones = Tensor::empty({FasterRcnnNet::kLosses});
  ones.fill(1.f);
  DetectionBatch batch;
  Shape planned;
  const Rng flip_rng(o.seed, "detection-flip");
  double train_seconds = 0;
  int64_t trained_images = 0;
  model.set_training(true);
  for (int64_t epoch = state.epoch; epoch < o.epochs && !result.stopped; ++epoch) {
    const std::vector<uint64_t> order = dist::padded_epoch_order(size_t(N), int(K), o.seed, uint64_t(epoch));
    const std::vector<uint64_t> shard = dist::rank_shard(order, int(K), comm.rank());
    StepSums epoch_sums;
    Timer epoch_clock;
    progress.begin_epoch(epoch + 1, o.epochs, plan.steps);
    sync.reset_stats();
    for (int64_t step = state.step_in_epoch; step < plan.steps; ++step) {
      Timer step_clock;
      std::vector<int64_t> idx;
      std::vector<bool> flips;
      for (int64_t j = step * B; j < std::min<int64_t>((step + 1) * B, int64_t(shard.size())); ++j) {
        idx.push_back(int64_t(shard[size_t(j)]));
        flips.push_back(o.augment == "flip" && (flip_rng.bits(uint64_t(epoch) * uint64_t(N) + shard[size_t(j)]) & 1));
      }
      make_detection_batch(batch, data.train, idx, flips, fo.transform);
      if (batch.images.shape() != planned) {
        model.plan(batch.images.shape());
        planned = batch.images.shape();
      }
      opt->set_lr(schedule.lr(epoch, step, plan.steps));
      const uint64_t stream = (uint64_t(state.global_step) * uint64_t(K) + uint64_t(comm.rank())) * 2 * uint64_t(B);
      net.set_batch(batch.resized, batch.targets, o.seed, stream);
      const Tensor& losses = model.forward(batch.images);
      StepSums sums;
      for (int i = 0; i < FasterRcnnNet::kLosses; ++i) sums.loss[i] = double(losses.data()[i]) * double(idx.size());
      sums.images = double(idx.size());
      model.params().zero_grad();
      sync.begin_step();
      model.backward(ones);
      sync.finish();
      opt->step();
      sums.stop_votes = stop_requested() ? 1 : 0;
      sums = comm.allreduce_sum(sums);
      const double total = sums.loss[0] + sums.loss[1] + sums.loss[2] + sums.loss[3];
      CHECK(std::isfinite(total), "epoch ", epoch + 1, " step ", step + 1, ": the loss is not "
            "finite (lower -lr/--learning-rate, now ", o.learning_rate, ")");
      for (int i = 0; i < FasterRcnnNet::kLosses; ++i) epoch_sums.loss[i] += sums.loss[i];
      epoch_sums.images += sums.images;
      state.step_in_epoch = step + 1;
      state.global_step += 1;
      state.samples_seen += int64_t(sums.images);
      if (tracker) {
        const double ips = sums.images / std::max(step_clock.seconds(), 1e-9);
        progress.step(step + 1, total / std::max(sums.images, 1.0), ips);
        tracker->log_step({state.global_step, epoch + 1, total / std::max(sums.images, 1.0), opt->lr(), ips,
                           run_clock.seconds()});
      }
      if (sums.stop_votes > 0) {
        result.stopped = true;
        break;
      }
    }
    const double seconds = epoch_clock.seconds();
    train_seconds += seconds;
    trained_images += int64_t(epoch_sums.images);
    if (!result.stopped) state.epoch = epoch + 1, state.step_in_epoch = 0;
    const double n = std::max(epoch_sums.images, 1.0);
    result.train_loss = (epoch_sums.loss[0] + epoch_sums.loss[1] + epoch_sums.loss[2] + epoch_sums.loss[3]) / n;
    EpochRecord record{epoch + 1, result.train_loss, NAN, NAN, NAN, seconds,
                       sync.stats().wait_share(), 0.0, int64_t(epoch_sums.images), {}};
    for (int i = 0; i < FasterRcnnNet::kLosses; ++i) record.metrics.push_back({kLossNames[i], epoch_sums.loss[i] / n});
    if (comm.root()) {
      char detail[160];
      std::snprintf(detail, sizeof detail, "classifier %.4f, box %.4f, objectness %.4f, rpn box %.4f",
                    epoch_sums.loss[0] / n, epoch_sums.loss[1] / n, epoch_sums.loss[2] / n,
                    epoch_sums.loss[3] / n);
      EpochSummary s;
      s.train_loss = result.train_loss;
      s.detail = detail;
      s.seconds = seconds;
      s.images_per_s = epoch_sums.images / std::max(seconds, 1e-9);
      progress.end_epoch(s);
    }
    const bool last = state.epoch == o.epochs;
    if (data.has_test && !result.stopped && o.eval_every > 0 &&
        (state.epoch % o.eval_every == 0 || last)) {
      result.eval = evaluate(comm, model, data.test, int(B), fo.transform);
      planned = model.planned_input();
      record.metrics.push_back({"map50", result.eval.map50_voc});
      record.metrics.push_back({"map", result.eval.map_coco});
      if (tracker) {
        tracker->set_summary("test_map50", result.eval.map50_voc);
        tracker->set_summary("test_map", result.eval.map_coco);
      }
      if (comm.root()) {
        char line[160];
        std::snprintf(line, sizeof line, "  test: mAP@0.5 (VOC) %.4f, mAP@[.5:.95] (COCO) %.4f\n",
                      result.eval.map50_voc, result.eval.map_coco);
        out << line;
        if (last) out << format_map_table(result.eval, [&] {
                   std::vector<std::string> names{"background"};
                   names.insert(names.end(), data.train.classes.begin(), data.train.classes.end());
                   return names;
                 }());
        out << std::flush;
      }
    }
    if (tracker) tracker->log_epoch(record);
    if (result.stopped || last || (o.checkpoint_every > 0 && state.epoch % o.checkpoint_every == 0))
      comm.on_root([&] {
        const CheckpointPaths p = save_checkpoint(run_dir, model, *opt, state, o.keep_checkpoints);
        out << "  checkpoint " << p.dir << "\n" << std::flush;
      });
  }
  result.images_per_s = trained_images / std::max(train_seconds, 1e-9);
  if (tracker) tracker->finish(result.stopped ? RunStatus::Killed : RunStatus::Finished);
  if (comm.root() && !result.stopped) {  // the run's result, whatever --progress printed
    char line[128] = "no test evaluation";
    if (!std::isnan(result.eval.map50_voc))
      std::snprintf(line, sizeof line, "test mAP@0.5 (VOC) %.4f, mAP@[.5:.95] (COCO) %.4f",
                    result.eval.map50_voc, result.eval.map_coco);
    out << "done: " << run_dir << ": " << line << " (" << Progress::format_eta(train_seconds)
        << " training, " << int64_t(result.images_per_s) << " images/s)\n" << std::flush;
  }
  return result;
}

}  // namespace mpicnn::detect
