// The detection task of ./pipeline_eval (see detect_task.h and eval/task.h). Each stage does
// exactly what detect::make_detection_batch and detect::predict do for the same images, in the
// same float order, only split where the pipeline's ranks split the work.
#include "eval/detect_task.h"

#include <algorithm>
#include <filesystem>
#include <optional>

#include "core/check.h"
#include "data/detection.h"
#include "data/image.h"
#include "detect/evaluate.h"
#include "detect/faster_rcnn.h"
#include "detect/transform.h"
#include "eval/task.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"

namespace mpicnn::eval {

namespace fs = std::filesystem;

namespace {

// The detector of a checkpoint from before version 3, which recorded only the flags that built
// it: rebuilt by the rule ./train had then (FrozenBatchNorm2d over --init-weights; earlier still,
// frozen whenever fewer than 5 stages trained), torchvision's defaults for the rest.
detect::FasterRcnnOptions detector_from_flags(const TrainerState& st, const std::string& record,
                                              int num_classes);

int config_int(const TrainerState& st, const std::string& key, const std::string& record) {
  const auto it = st.config.find(key);
  CHECK(it != st.config.end() && !it->second.empty(), "--checkpoint: ", record, " does not record --", key,
        " (a detection run records it)");
  try {
    return std::stoi(it->second);
  } catch (const std::exception&) {
    FAIL("--checkpoint: ", record, ": --", key, " is '", it->second, "', not an integer");
  }
}

// The classifier's input flags have no meaning for the detector, whose transform is the run's.
void refuse_classifier_flags(const EvalOptions& o, const std::string& what) {
  const std::string why = ": " + what + " is a detection run: its images are resized as it was trained "
                          "(--min-size/--max-size from its trainer.json); leave ";
  CHECK(o.image_size == 0, "--image-size", why, "--image-size out");
  CHECK(o.resize < 0, "--resize", why, "--resize out");
  CHECK(o.mean.empty(), "--mean", why, "--mean out");
  CHECK(o.std.empty(), "--std", why, "--std out");
  CHECK(o.dataset == "auto", "--dataset ", o.dataset, ": ", what,
        " is a detection run; -d takes a Pascal VOC folder or a COCO .json file (leave --dataset out)");
  CHECK(o.split == "auto", "--split ", o.split, ": ", what,
        " is a detection run; -d names the evaluation folder itself (leave --split out)");
  CHECK(o.device != "cuda", "--device cuda: the detector runs on the CPU only (no GPU kernels for "
        "RoIAlign and NMS yet)");
}

// A set through data::open_detection_set, checked against the checkpoint's classes.
data::DetectionSet open_set(const std::string& path, const std::vector<std::string>& classes, bool skip_bad,
                            const std::string& flag, std::string& text) {
  data::OpenedDetectionSet o = data::open_detection_set(path, classes, skip_bad, flag, "the checkpoint's");
  text = o.description;
  return std::move(o.set);
}

// The run's data folder (or file) as its record gives it; "" when it records none.
std::string run_data_path(const TrainerState& st) {
  if (!st.data_path.empty()) return st.data_path;
  const auto it = st.config.find("data");
  return it == st.config.end() ? "" : it->second;
}

// The classes the detector was trained on: trainer.json's input record, or for a run from
// before detection runs recorded it, its training data read again as ./train read it (the
// names found, sorted; a COCO file's categories).
std::vector<std::string> run_classes(const TrainerState& st, const CheckpointPaths& ck) {
  if (!st.input.class_names.empty()) return st.input.class_names;
  const std::string data = run_data_path(st);
  std::error_code ec;
  CHECK(!data.empty() && fs::exists(data, ec), "--checkpoint: ", ck.trainer, " records no class names and the "
        "run's training data ", data.empty() ? std::string("(not recorded)") : data, " is not there to read them from");
  const bool split = fs::is_directory(fs::path(data) / "train", ec);
  std::string text;
  return open_set(split ? (fs::path(data) / "train").string() : data, {}, true,
                  "--checkpoint: the run's training data", text).classes;
}

detect::FasterRcnnOptions detector_from_flags(const TrainerState& st, const std::string& record,
                                              int num_classes) {
  detect::FasterRcnnOptions fo;
  fo.num_classes = num_classes;
  fo.transform.min_size = config_int(st, "min-size", record);
  fo.transform.max_size = config_int(st, "max-size", record);
  fo.trainable_layers = config_int(st, "trainable-layers", record);
  if (st.config.count("rpn-post-nms-top-n-test"))  // runs from before it was an option: the default
    fo.rpn.post_nms_top_n_test = config_int(st, "rpn-post-nms-top-n-test", record);
  const bool init_weights = st.config.count("init-weights") && !st.config.at("init-weights").empty();
  fo.frozen_batchnorm = init_weights || fo.trainable_layers < 5;
  return fo;
}

}  // namespace

bool is_detection_checkpoint(const EvalOptions& o) {
  if (o.checkpoint.empty()) return false;
  const TrainerState st = read_trainer_state(resolve_checkpoint(o.checkpoint).trainer);
  const auto task = st.config.find("task");
  if (task != st.config.end() && parse_task(task->second) == Task::Detection) return true;
  const auto& names = detection_model_names();
  return std::find(names.begin(), names.end(), st.model) != names.end();
}

std::string detection_run_data(const TrainerState& st, const std::string& record) {
  const std::string pass = "; pass -d/--data PATH (a Pascal VOC folder or a COCO .json file)";
  std::error_code ec;
  if (!st.test_data_path.empty() || (st.config.count("test-data") && !st.config.at("test-data").empty())) {
    // The run evaluated on --test-data: so does this.
    const std::string test = !st.test_data_path.empty() ? st.test_data_path : st.config.at("test-data");
    CHECK(fs::exists(test, ec), "--checkpoint: the run's --test-data ", test, " is not there", pass);
    return test;
  }
  const std::string path = run_data_path(st);
  CHECK(!path.empty(), "--checkpoint: ", record, " does not record the data its run trained on", pass);
  CHECK(fs::exists(path, ec), "--checkpoint: the run's data ", path, " is not there", pass);
  if (fs::is_directory(fs::path(path) / "train", ec) && fs::exists(fs::path(path) / "test", ec))
    return (fs::path(path) / "test").string();
  return path;
}

namespace {

// Rank 0: the setup for a detection checkpoint and the evaluation set `set` it opens: -d (a VOC
// folder, or a COCO instances .json, or a folder holding one, whose images lie in the JSON's
// folder: as ./train reads them), or the run's own data (detection_run_data). The classes are
// the checkpoint's record's, or else (detection runs record none) its training data's, read as
// ./train read them. Refuses the classifier's preprocessing and dataset flags with one line
// naming the flag, and a set whose classes are not the checkpoint's with one line naming the file.
EvalSetup make_detection_setup(const EvalOptions& o, data::DetectionSet& set) {
  const CheckpointPaths ck = resolve_checkpoint(o.checkpoint);
  const TrainerState st = read_trainer_state(ck.trainer);
  refuse_classifier_flags(o, ck.dir);
  EvalSetup p;
  p.task = Task::Detection;
  p.model = st.model;
  (void)detection_body(p.model);  // an Error listing the detectors for another name
  p.weights_file = ck.model;
  p.weights = ck.dir;
  p.batch_size = o.batch_size;

  std::string path = o.data, data_note;
  if (path.empty()) {
    path = detection_run_data(st, ck.trainer);
    data_note = (st.config.count("test-data") && !st.config.at("test-data").empty()) || !st.test_data_path.empty()
                    ? " (the run's --test-data)"
                : path.ends_with("/test") ? " (the test split of the data the run trained on)"
                                          : " (the data the run trained on)";
  }
  std::string text;
  p.class_names = run_classes(st, ck);
  p.num_classes = int(p.class_names.size()) + 1;  // with the background
  const detect::FasterRcnnOptions built =
      st.model_options.is_null() ? detector_from_flags(st, ck.trainer, p.num_classes)
                                 : detect::options_from_record(st.model_options, ck.trainer + ": model_options");
  CHECK(built.num_classes == p.num_classes, "--checkpoint: ", ck.trainer, " records a detector of ",
        built.num_classes, " classes for ", p.class_names.size(), " class names and the background");
  p.detector = detect::options_record(built);
  set = open_set(path, p.class_names, o.skip_bad, "-d/--data", text);
  p.dataset = text;
  const size_t n = set.samples.size();
  p.count = o.limit > 0 ? std::min<uint64_t>(o.limit, n) : n;
  CHECK(p.count > 0, "-d/--data: ", path, " holds no annotated images");
  p.dataset += " (" + std::to_string(n) + " images, " + std::to_string(set.num_objects()) + " objects";
  if (set.skipped() > 0) p.dataset += ", " + std::to_string(set.skipped()) + " bad annotations skipped";
  p.dataset += ")" + data_note;
  return p;
}

// The detector's transform for the setup (its min/max size; torchvision's mean and std).
detect::ResizeOptions resize_options(const EvalSetup& setup) {
  return detect::options_from_record(setup.detector, "setup").transform;
}

// The windows of a batch zero-padded into one (n, 3, PH, PW) block, PH and PW each side's
// maximum rounded up to a multiple of 32 (detect::batch_size); their sizes into the batch.
void pad_windows(InputBatch& b, int size_divisible = 32) {
  CHECK(!b.windows.empty(), "detection batch: no images");
  b.original.clear();
  b.resized.clear();
  for (const Window& w : b.windows) {
    b.original.push_back(w.original);
    b.resized.push_back(w.resized);
  }
  const detect::Size2 padded = detect::batch_size(b.resized, size_divisible);
  b.height = padded.h, b.width = padded.w;
  const int64_t PH = b.height, PW = b.width;
  b.pixels.assign(size_t(int64_t(b.windows.size()) * 3 * PH * PW), 0.f);
  for (size_t i = 0; i < b.windows.size(); ++i) {
    const Window& w = b.windows[i];
    CHECK(w.pixels.size() == size_t(3 * w.resized.h * w.resized.w), "detection batch: image ", w.index,
          " holds ", w.pixels.size(), " floats for 3x", w.resized.h, "x", w.resized.w);
    float* dst = b.pixels.data() + int64_t(i) * 3 * PH * PW;
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t y = 0; y < w.resized.h; ++y)
        std::copy_n(w.pixels.data() + (c * w.resized.h + y) * w.resized.w, w.resized.w, dst + (c * PH + y) * PW);
  }
  b.windows.clear();
}

// The detector (built as the run built it, loaded with the setup's weights, eval mode) on a
// batch; each image's boxes scaled back to its original size. The model is re-planned as
// detect::predict re-plans it (a batch of another padded size), so the same batches give the
// same bits.
class DetectionPredictor : public Predictor {
 public:
  explicit DetectionPredictor(const EvalSetup& setup) : batch_size_(setup.batch_size) {
    const detect::FasterRcnnOptions fo = detect::options_from_record(setup.detector, "setup");
    min_size_ = fo.transform.min_size;
    model_ = detect::make_faster_rcnn(setup.model, fo, 0, false);
    model_->load_state_dict(setup.weights_file);
    model_->set_training(false);
  }

  Results predict(const InputBatch& b) override {
    const int64_t n = int64_t(b.size());
    CHECK(n > 0 && n <= batch_size_, "predict: a batch of ", n, " images (batch size ", batch_size_, ")");
    CHECK(b.pixels.size() == size_t(n * 3 * b.height * b.width), "predict: batch holds ", b.pixels.size(),
          " floats for ", n, " images of 3x", b.height, "x", b.width);
    std::vector<detect::Detections> dets = detect::predict_batch(
        *model_, Tensor::view(const_cast<float*>(b.pixels.data()), Shape{n, 3, b.height, b.width}), b.resized,
        b.original, batch_size_);
    Results out;
    out.detections.resize(size_t(n));
    for (size_t i = 0; i < size_t(n); ++i) {
      ImageDetections& r = out.detections[i];
      r.index = b.indices[i];
      r.height = b.original[i].h;
      r.width = b.original[i].w;
      r.boxes = std::move(dets[i].boxes);
      r.labels = std::move(dets[i].labels);
      r.scores = std::move(dets[i].scores);
    }
    return out;
  }

  // A batch of zero images at min-size x min-size.
  void warm_up() override {
    InputBatch b;
    Window w;
    w.resized = w.original = {min_size_, min_size_};
    w.pixels.assign(size_t(3 * min_size_ * min_size_), 0.f);
    b.indices.assign(size_t(batch_size_), 0);
    b.labels.assign(size_t(batch_size_), 0);
    b.windows.assign(size_t(batch_size_), w);
    pad_windows(b);
    (void)predict(b);
  }

  const ExecConfig& exec() const override { return model_->exec(); }
  std::string explain_plan() const override { return model_->explain_plan(); }

 private:
  std::unique_ptr<Model> model_;
  int64_t batch_size_;
  int min_size_ = 0;  // the detector's transform's
};

class DetectTask : public EvalTask {
 public:
  // `set`: the evaluation set, opened (rank 0) or not (empty: the other ranks).
  DetectTask(EvalSetup setup, std::optional<data::DetectionSet> set)
      : EvalTask(std::move(setup)), set_(std::move(set)), resize_(resize_options(setup_)) {}

  uint64_t open_data(const EvalOptions& o) override {
    set_.emplace();
    return make_detection_setup(o, *set_).count;
  }
  bool has_data() const override { return set_.has_value(); }

  std::unique_ptr<Predictor> predictor(const EvalOptions& o, const dist::Comm&) const override {
    CHECK(o.precision == "auto" || o.precision == "fp32", "--precision ", o.precision,
          ": a detection checkpoint evaluates in fp32 on the CPU");
    return std::make_unique<DetectionPredictor>(setup_);
  }

  // Image i's file bytes, its path as source and its annotated size. The ground truth stays with
  // the set (rank 0).
  RawSample read(uint64_t i) const override {
    CHECK(i < set_->samples.size(), "read: image ", i, " of a set of ", set_->samples.size());
    const data::DetectionSample& s = set_->samples[size_t(i)];
    RawSample r;
    r.index = i;
    r.source = s.image;
    r.bytes = data::read_file_bytes(s.image);
    r.height = s.height;
    r.width = s.width;
    return r;
  }

  // The image normalised and resized (floats, not yet padded). Errors name the image
  // (undecodable, or not the size its annotation gives).
  Window decode(const RawSample& s) const override {
    const data::Image img = data::decode_image(s.bytes, 3, s.source);
    // As data::load_detection_image: boxes are only right for the annotated size.
    CHECK(img.width == s.width && img.height == s.height, s.source, ": image is ", img.width, "x", img.height,
          " but its annotation says ", s.width, "x", s.height);
    const int64_t H = img.height, W = img.width;
    std::vector<float> pixels(size_t(3 * H * W));
    for (int64_t y = 0; y < H; ++y) {
      const uint8_t* row = img.row(int(y));
      for (int64_t x = 0; x < W; ++x)
        // Division, as load_detection_image (torchvision's to_tensor): the same floats.
        for (int64_t c = 0; c < 3; ++c) pixels[size_t((c * H + y) * W + x)] = float(row[3 * x + c]) / 255.0f;
    }
    Window w;
    w.index = s.index;
    w.label = s.label;
    w.original = {H, W};
    w.resized = detect::resized_size(H, W, resize_);
    // transform_into into a slot exactly the resized size: normalise then resize, the batch's
    // own arithmetic; the batching rank only pads.
    Tensor one = Tensor::empty(Shape{1, 3, w.resized.h, w.resized.w});
    detect::transform_into(one, 0, pixels.data(), H, W, resize_);
    w.pixels.assign(one.data(), one.data() + one.numel());
    return w;
  }

  // Normalised and resized already (torchvision normalises before it resizes): the batch only
  // pads, once it is complete.
  void add(InputBatch& b, Window&& w) const override {
    b.indices.push_back(w.index);
    b.labels.push_back(w.label);
    b.windows.push_back(std::move(w));
  }
  void seal(InputBatch& b) const override { pad_windows(b); }

  void score(Report& rep, RunOutput& run, const RunOutput* baseline) const override {
    for (uint64_t i = 0; i < setup_.count; ++i) rep.sources.push_back(set_->samples[size_t(i)].image);
    rep.detections = std::move(run.results.detections);
    std::vector<int64_t> indices;
    std::vector<detect::Detections> predictions;
    for (const ImageDetections& d : rep.detections) {  // skipped images are left out
      indices.push_back(int64_t(d.index));
      predictions.push_back({d.boxes, d.scores, d.labels});
    }
    rep.map = detect::evaluate_predictions(*set_, indices, predictions);
    rep.resize = "min-size " + std::to_string(resize_.min_size) + ", max-size " + std::to_string(resize_.max_size) +
                 " (the run's), padded to a multiple of 32";
    if (baseline) {
      const auto same_labels = [](const ImageDetections& x, const ImageDetections& y) { return x.labels == y.labels; };
      rep.mismatches_vs_sequential = count_mismatches(rep.detections, baseline->results.detections, same_labels);
    }
  }

 private:
  std::optional<data::DetectionSet> set_;  // the evaluation set (the reading ranks)
  const detect::ResizeOptions resize_;
};

}  // namespace

std::unique_ptr<EvalTask> open_detect_task(const EvalOptions& o) {
  data::DetectionSet set;
  EvalSetup setup = make_detection_setup(o, set);
  return std::make_unique<DetectTask>(std::move(setup), std::move(set));
}

std::unique_ptr<EvalTask> make_detect_task(const EvalSetup& setup) {
  return std::make_unique<DetectTask>(setup, std::nullopt);
}

}  // namespace mpicnn::eval
