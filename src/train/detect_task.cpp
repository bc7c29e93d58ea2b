// The detection task (task.h): Faster R-CNN (detect/faster_rcnn.h) on a Pascal VOC folder or a
// COCO JSON, every rank holding the whole set and loading its shard of each epoch itself
// (images flipped by a draw keyed on (seed, epoch, sample)); the four losses of torchvision's
// loss dict; VOC mAP@0.5 and COCO mAP@[.5:.95] over the test set, with a per-class table after
// the last epoch. The RPN and RoI samplers draw from streams keyed on (step, rank, image).
// Gradient buckets start after backward: the FPN's lateral convolutions, registered after the
// body, finish their gradients in between the body's stages.
#include <cmath>
#include <filesystem>
#include <sstream>

#include "core/check.h"
#include "core/rng.h"
#include "core/text.h"
#include "detect/batch.h"
#include "detect/evaluate.h"
#include "detect/faster_rcnn.h"
#include "dist/shard.h"
#include "io/safetensors.h"
#include "train/finetune.h"
#include "train/task.h"

namespace mpicnn::train {
namespace fs = std::filesystem;
using detect::Detections;
using detect::FasterRcnnNet;
using detect::MapResult;

namespace {

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

class DetectionTask final : public TrainTask {
 public:
  DetectionTask(const TrainOptions& o, const dist::Comm& comm)
      : o_(o), comm_(comm), flip_rng_(o.seed, "detection-flip") {}

  bool cpu_only() const override { return true; }
  void open_data(TrainerState& state) override;
  uint64_t train_size() const override { return train_.samples.size(); }
  std::unique_ptr<Model> build_model(const ExecConfig& exec) override;
  std::string load_init_weights() override;
  void record(TrainerState& state) const override {
    // The detector as built (its transform resizes the images: no input size here) and the
    // class names ./pipeline_eval labels boxes with.
    const detect::ResizeOptions& t = options_.transform;
    state.input = {"detection", 3, 0, 0, 0, {t.mean, t.mean + 3}, {t.std, t.std + 3}, train_.classes};
    state.model_options = detect::options_record(options_);
  }
  bool sync_during_backward() const override { return false; }

  std::string data_description() const override { return train_text_; }
  std::string header_lines() const override {
    return "\n  " + std::to_string(train_.classes.size()) + " classes (" + join(train_.classes, ", ") +
           "), images resized to " + std::to_string(o_.min_size) + "..." + std::to_string(o_.max_size) +
           (test_.samples.empty() ? std::string() : "\n  test data: " + test_text_);
  }
  nlohmann::json facts() const override {
    return {{"task", task_name(Task::Detection)},
            {"dataset_kind", kind_},
            {"num_classes", train_.classes.size()},
            {"test_samples", test_.samples.size()},
            {"min_size", o_.min_size},
            {"max_size", o_.max_size}};
  }
  std::vector<LossPart> loss_parts() const override {
    // FasterRcnnNet's losses in its order, as torchvision's loss dict names them.
    return {{"loss_classifier", "classifier"}, {"loss_box_reg", "box"},
            {"loss_objectness", "objectness"}, {"loss_rpn_box_reg", "rpn box"}};
  }

  void begin_epoch(int64_t epoch, int64_t skip) override {
    epoch_ = epoch;
    shard_ = dist::local_epoch_order(train_.samples.size(), comm_.size(), comm_.rank(), o_.seed,
                                     uint64_t(epoch), o_.distribute_data);
    next_ = size_t(std::min<int64_t>(int64_t(shard_.size()), skip));
  }
  int forward(int64_t global_step, int micro) override;
  void backward(float scale) override {
    ones_.fill(scale);
    model_->backward(ones_);
  }
  StepLoss loss() override {
    StepLoss l;
    for (int i = 0; i < FasterRcnnNet::kLosses; ++i) l.parts.push_back(double(losses_.data()[i]));
    for (double p : l.parts) l.loss += p;
    return l;
  }
  bool can_evaluate() const override { return !test_.samples.empty(); }
  Evaluation evaluate(bool last) override;

 private:
  const TrainOptions& o_;
  const dist::Comm& comm_;
  data::DetectionSet train_, test_;
  std::string train_text_, test_text_;  // "COCO JSON ... (N images, C classes)", for the logs
  std::string kind_;                    // "voc" or "coco" (the training set's)
  detect::FasterRcnnOptions options_;
  Model* model_ = nullptr;
  FasterRcnnNet* net_ = nullptr;
  const Rng flip_rng_;
  Tensor ones_, losses_;
  detect::DetectionBatch batch_;
  Shape planned_;
  ExecConfig exec_;  // how the model plans (the CPU's: the task is CPU only)
  int64_t epoch_ = 0;
  std::vector<uint64_t> shard_;  // this rank's samples of the epoch
  size_t next_ = 0;              // the next one to load
};

// -d DIR holding train/ (+ test/), or -d the training set itself; --test-data instead of test/.
// Every rank reads the annotations (small); errors are every rank's.
void DetectionTask::open_data(TrainerState&) {
  comm_.on_all([&] {
    const fs::path dir(o_.data);
    std::string test_kind;
    const bool split = fs::is_directory(dir / "train");
    train_ = open_set(split ? dir / "train" : dir, {}, o_.skip_bad, "-d/--data", &train_text_, &kind_);
    CHECK(o_.dataset == "auto" || o_.dataset == kind_, "--dataset ", o_.dataset, ": ", o_.data,
          " is read as ", kind_ == "voc" ? "a Pascal VOC folder (voc)" : "COCO JSON (coco)");
    if (o_.eval_every == 0) return;
    if (!o_.test_data.empty())
      test_ = open_set(o_.test_data, train_.classes, o_.skip_bad, "--test-data", &test_text_, &test_kind);
    else if (split && fs::exists(dir / "test"))
      test_ = open_set(dir / "test", train_.classes, o_.skip_bad, "-d/--data", &test_text_, &test_kind);
  });
}

std::unique_ptr<Model> DetectionTask::build_model(const ExecConfig& exec) {
  exec_ = exec;
  options_.num_classes = int(train_.classes.size()) + 1;
  options_.trainable_layers = o_.trainable_layers;
  // torchvision's rule: FrozenBatchNorm2d over pretrained weights, BatchNorm2d from random ones
  // (a resume keeps the run's --init-weights, so it rebuilds the same model).
  options_.frozen_batchnorm = !o_.init_weights.empty();
  options_.roi.batch_size_per_image = o_.box_batch_size_per_image;
  options_.rpn.post_nms_top_n_test = o_.rpn_post_nms_top_n_test;
  options_.transform.min_size = o_.min_size;
  options_.transform.max_size = o_.max_size;
  std::unique_ptr<Model> model = detect::make_faster_rcnn(o_.model, options_, o_.seed);
  model_ = model.get();
  net_ = &detect::faster_rcnn_net(*model_);
  model_->set_training(true);
  ones_ = Tensor::empty({FasterRcnnNet::kLosses});
  return model;
}

// A torchvision classifier's state dict (conv1.weight, ...) starts the backbone body; anything
// else must be a detector's (a new class count renews the box predictor).
std::string DetectionTask::load_init_weights() {
  const SafetensorsReader r(init_weights_file(o_.init_weights));
  if (r.contains("conv1.weight") && !r.contains("backbone.body.conv1.weight"))
    return "init weights: backbone body from " + r.path() + " (" +
           std::to_string(detect::load_classifier_backbone(*model_, r.path())) + " tensors)";
  return describe(train::load_init_weights(*model_, o_.init_weights, {}), options_.num_classes);
}

// The next images of this rank's shard, flipped by their draws, as one padded batch; the
// model re-planned when its padded size changes.
int DetectionTask::forward(int64_t global_step, int micro) {
  const int64_t N = int64_t(train_.samples.size()), B = o_.batch_size;
  std::vector<int64_t> idx;
  std::vector<bool> flips;
  for (; next_ < shard_.size() && int64_t(idx.size()) < B; ++next_) {
    const uint64_t sample = shard_[next_];
    idx.push_back(int64_t(sample));
    flips.push_back(o_.augment == "flip" && (flip_rng_.bits(uint64_t(epoch_) * uint64_t(N) + sample) & 1));
  }
  CHECK(!idx.empty(), "rank ", comm_.rank(), ": data ran out at step ", global_step + 1);
  detect::make_detection_batch(batch_, train_, idx, flips, options_.transform);
  if (batch_.images.shape() != planned_) {
    model_->plan(batch_.images.shape(), exec_);
    planned_ = batch_.images.shape();
  }
  const uint64_t stream = ((uint64_t(global_step) * uint64_t(comm_.size()) + uint64_t(comm_.rank())) *
                               uint64_t(o_.accumulate) +
                           uint64_t(micro)) *
                          2 * uint64_t(B);
  net_->set_batch(batch_.resized, batch_.targets, o_.seed, stream);
  losses_ = model_->forward(batch_.images);
  return int(idx.size());
}

// mAP over the whole test set: each rank predicts the images r, r + K, ...; every rank gets
// every detection.
Evaluation DetectionTask::evaluate(bool last) {
  std::vector<int64_t> mine;
  for (int64_t i = comm_.rank(); i < int64_t(test_.samples.size()); i += comm_.size()) mine.push_back(i);
  const std::vector<Detections> dets = detect::predict(*model_, test_, mine, int(o_.batch_size), options_.transform);
  model_->set_training(true);
  planned_ = model_->planned_input();
  std::vector<Detections> all(test_.samples.size());
  for (const std::string& part : comm_.allgather(encode(mine, dets))) {
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
  std::vector<int64_t> every(test_.samples.size());
  for (size_t i = 0; i < every.size(); ++i) every[i] = int64_t(i);
  const MapResult map = detect::evaluate_predictions(test_, every, all);

  Evaluation ev;
  ev.metrics = {{"map50", map.map50_voc}, {"map", map.map_coco}};
  char text[128];
  std::snprintf(text, sizeof text, "mAP@0.5 (VOC) %.4f, mAP@[.5:.95] (COCO) %.4f", map.map50_voc, map.map_coco);
  ev.result = std::string("test ") + text;
  ev.lines = std::string("  test: ") + text + "\n";
  if (last) {
    std::vector<std::string> names{"background"};
    names.insert(names.end(), train_.classes.begin(), train_.classes.end());
    ev.lines += detect::format_map_table(map, names);
  }
  return ev;
}

}  // namespace

std::unique_ptr<TrainTask> make_detection_task(const TrainOptions& o, const dist::Comm& comm) {
  return std::make_unique<DetectionTask>(o, comm);
}

}  // namespace mpicnn::train
