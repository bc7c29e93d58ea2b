// Detection batches from a dataset (src/detect/batch.*: decode, flip, transform, boxes); the
// detector learning: on a small synthetic set, SGD steps lower its losses, and the same seed
// gives the same bits (the samplers draw from the counter RNG per step and image); predictions
// over a set and their mAP (src/detect/evaluate.*).
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "detect/batch.h"
#include "detect/evaluate.h"
#include "optim/sgd.h"
#include "testing.h"

using namespace mpicnn;
using namespace mpicnn::testing;

namespace {

data::DetectionSet synthetic_set(const TempDir& dir, size_t count) {
  data::SyntheticDetectionOptions s;
  s.out_dir = (dir.path / "shapes").string();
  s.count = count;
  s.seed = 11;
  s.min_size = 96;
  s.max_size = 128;
  s.max_objects = 3;
  s.min_object = 24;
  s.format = "png";
  data::make_synthetic_detection_set(s);
  return data::read_voc_folder(s.out_dir);
}

// `steps` SGD steps over the set's images two at a time; the four losses of each step.
std::vector<std::array<double, 4>> train(const data::DetectionSet& set, int steps, uint64_t seed) {
  detect::FasterRcnnOptions o;
  o.num_classes = int(set.classes.size()) + 1;
  o.transform.min_size = 128;
  o.transform.max_size = 160;
  o.trainable_layers = 5;
  o.rpn.batch_size_per_image = 64;
  o.roi.batch_size_per_image = 64;
  auto model = detect::make_faster_rcnn("fasterrcnn_resnet18_fpn", o, seed);
  detect::FasterRcnnNet& net = detect::faster_rcnn_net(*model);
  SGD sgd(model->params(), SgdOptions{.lr = 0.01, .momentum = 0.9, .weight_decay = 1e-4});
  Tensor ones = Tensor::empty({detect::FasterRcnnNet::kLosses});
  ones.fill(1.f);
  detect::DetectionBatch batch;
  Shape planned;
  std::vector<std::array<double, 4>> losses;
  const int64_t n = int64_t(set.samples.size());
  for (int step = 0; step < steps; ++step) {
    const std::vector<int64_t> idx = {(2 * step) % n, (2 * step + 1) % n};
    detect::make_detection_batch(batch, set, idx, {step % 2 == 1, false}, o.transform);
    if (batch.images.shape() != planned) {
      model->plan(batch.images.shape(), exec());
      planned = batch.images.shape();
    }
    model->set_training(true);
    net.set_batch(batch.resized, batch.targets, seed, uint64_t(step) * 2);
    const Tensor& l = model->forward(batch.images);
    losses.push_back({l.data()[0], l.data()[1], l.data()[2], l.data()[3]});
    model->params().zero_grad();
    model->backward(ones);
    sgd.step();
  }
  return losses;
}

}  // namespace

TEST_CASE("detection batch: padded to 32, boxes scaled with their image, flips mirror the boxes") {
  TempDir dir;
  const data::DetectionSet set = synthetic_set(dir, 3);
  detect::ResizeOptions o;
  o.min_size = 80;
  o.max_size = 100;
  detect::DetectionBatch b;
  detect::make_detection_batch(b, set, {2, 0}, {true, false}, o);
  REQUIRE(b.images.dim() == 4);
  CHECK(b.images.size(0) == 2);
  CHECK(b.images.size(2) % 32 == 0);
  CHECK(b.images.size(3) % 32 == 0);
  for (int i = 0; i < 2; ++i) {
    const data::DetectionSample& s = set.samples[size_t(i == 0 ? 2 : 0)];
    CHECK(b.original[size_t(i)].h == s.height);
    CHECK(b.original[size_t(i)].w == s.width);
    const detect::Size2 r = detect::resized_size(s.height, s.width, o);
    CHECK(b.resized[size_t(i)].h == r.h);
    CHECK(b.resized[size_t(i)].w == r.w);
    REQUIRE(b.targets[size_t(i)].boxes.size() == 4 * s.boxes.size());
    const float sx = float(r.w) / float(s.width), sy = float(r.h) / float(s.height);
    for (size_t k = 0; k < s.boxes.size(); ++k) {
      const auto& box = s.boxes[k];
      const float x1 = i == 0 ? float(s.width) - box[2] : box[0];  // image 0 is flipped
      const float x2 = i == 0 ? float(s.width) - box[0] : box[2];
      const float* got = b.targets[size_t(i)].boxes.data() + 4 * k;
      CHECK(got[0] == doctest::Approx(x1 * sx));
      CHECK(got[1] == doctest::Approx(box[1] * sy));
      CHECK(got[2] == doctest::Approx(x2 * sx));
      CHECK(got[3] == doctest::Approx(box[3] * sy));
      CHECK(b.targets[size_t(i)].labels[k] == s.labels[k]);
    }
  }
  expect_error([&] { detect::make_detection_batch(b, set, {3}, {}, o); }, "outside the set");
}

TEST_CASE("detector training: SGD lowers the losses on a synthetic set, the same seed the same bits") {
  TempDir dir;
  const data::DetectionSet set = synthetic_set(dir, 4);
  const int steps = 40;
  const std::vector<std::array<double, 4>> a = train(set, steps, 5);
  // Means of the first and last 4 steps of the classifier's and the RPN's objectness loss (the
  // box losses grow while more proposals become foreground: not a measure of progress here).
  auto mean = [&](int loss, int from) {
    double m = 0;
    for (int i = from; i < from + 4; ++i) m += a[size_t(i)][size_t(loss)];
    return m / 4;
  };
  MESSAGE("loss_classifier ", mean(0, 0), " -> ", mean(0, steps - 4), ", loss_objectness ",
          mean(2, 0), " -> ", mean(2, steps - 4));
  CHECK(mean(0, steps - 4) < 0.7 * mean(0, 0));
  CHECK(mean(2, steps - 4) < 0.5 * mean(2, 0));
  for (const auto& l : a)
    for (double v : l) CHECK(std::isfinite(v));
  const std::vector<std::array<double, 4>> b = train(set, 3, 5);
  for (size_t i = 0; i < b.size(); ++i) CHECK(b[i] == a[i]);
}

TEST_CASE("detection evaluation: perfect, shifted and mislabelled predictions; predict's boxes") {
  TempDir dir;
  const data::DetectionSet set = synthetic_set(dir, 3);
  const std::vector<int64_t> idx = {0, 1, 2};
  std::vector<detect::Detections> perfect, shifted, mislabelled;
  for (int64_t i : idx) {
    const data::DetectionSample& s = set.samples[size_t(i)];
    detect::Detections p, q, r;
    for (size_t k = 0; k < s.boxes.size(); ++k) {
      const auto& b = s.boxes[k];
      const float w = b[2] - b[0];
      p.boxes.insert(p.boxes.end(), b.begin(), b.end());
      q.boxes.insert(q.boxes.end(), {b[0] + w / 2, b[1], b[2] + w / 2, b[3]});  // IoU 1/3
      p.scores.push_back(1.f - 0.01f * float(k));
      p.labels.push_back(s.labels[k]);
    }
    q.scores = p.scores, q.labels = p.labels;
    r.boxes = p.boxes, r.scores = p.scores;
    for (int64_t l : p.labels) r.labels.push_back(l % int64_t(set.classes.size()) + 1);
    perfect.push_back(p), shifted.push_back(q), mislabelled.push_back(r);
  }
  const detect::MapResult a = detect::evaluate_predictions(set, idx, perfect);
  CHECK(a.map50_voc == 1.0);
  CHECK(a.map_coco == 1.0);
  CHECK(detect::evaluate_predictions(set, idx, shifted).map50_voc == 0.0);
  CHECK(detect::evaluate_predictions(set, idx, mislabelled).map50_voc == 0.0);

  // An untrained detector's detections: one list per image, inside the original image, labels
  // of the set's classes, by decreasing score.
  detect::FasterRcnnOptions o;
  o.num_classes = int(set.classes.size()) + 1;
  o.transform.min_size = 96;
  o.transform.max_size = 128;
  auto model = detect::make_faster_rcnn("fasterrcnn_resnet18_fpn", o, 3);
  const std::vector<detect::Detections> pred = detect::predict(*model, set, idx, 2, o.transform);
  REQUIRE(pred.size() == idx.size());
  size_t total = 0;
  for (size_t i = 0; i < pred.size(); ++i) {
    const data::DetectionSample& s = set.samples[size_t(idx[i])];
    const detect::Detections& d = pred[i];
    total += d.scores.size();
    REQUIRE(d.boxes.size() == 4 * d.scores.size());
    for (size_t k = 0; k < d.scores.size(); ++k) {
      const float* b = d.boxes.data() + 4 * k;
      CHECK(b[0] >= 0.f);
      CHECK(b[1] >= 0.f);
      CHECK(b[2] <= float(s.width) + 1e-3f);
      CHECK(b[3] <= float(s.height) + 1e-3f);
      CHECK(d.labels[k] >= 1);
      CHECK(d.labels[k] <= int64_t(set.classes.size()));
      if (k > 0) CHECK(d.scores[k] <= d.scores[k - 1]);
    }
  }
  CHECK(total > 0);
}
