// Detections over a dataset and their mAP.
#include "detect/evaluate.h"

#include <algorithm>

#include "core/check.h"
#include "detect/batch.h"
#include "detect/faster_rcnn.h"

namespace mpicnn::detect {

std::vector<Detections> predict_batch(Model& model, const Tensor& images, const std::vector<Size2>& resized,
                                      const std::vector<Size2>& original, int64_t plan_batch) {
  const int64_t n = images.size(0);
  CHECK(int64_t(resized.size()) == n && int64_t(original.size()) == n, "predict: ", n, " images with ",
        resized.size(), " sizes");
  FasterRcnnNet& net = faster_rcnn_net(model);
  model.set_training(false);
  const Shape& planned = model.planned_input();
  if (planned.ndim != 4 || planned[0] < n || planned[2] != images.size(2) || planned[3] != images.size(3))
    model.plan({std::max(plan_batch, n), 3, images.size(2), images.size(3)}, model.exec());
  net.set_batch(resized);
  model.forward(images);
  std::vector<Detections> out;
  for (size_t i = 0; i < size_t(n); ++i) {
    Detections d = net.detections()[i];
    resize_boxes(d.boxes.data(), int64_t(d.scores.size()), resized[i], original[i]);
    out.push_back(std::move(d));
  }
  return out;
}

std::vector<Detections> predict(Model& model, const data::DetectionSet& set,
                                const std::vector<int64_t>& indices, int batch,
                                const ResizeOptions& o) {
  CHECK(batch >= 1, "predict: batch must be >= 1, got ", batch);
  std::vector<Detections> out;
  DetectionBatch b;
  model.set_training(false);
  for (size_t first = 0; first < indices.size(); first += size_t(batch)) {
    const size_t last = std::min(indices.size(), first + size_t(batch));
    const std::vector<int64_t> part(indices.begin() + int64_t(first), indices.begin() + int64_t(last));
    make_detection_batch(b, set, part, {}, o);
    for (Detections& d : predict_batch(model, b.images, b.resized, b.original, batch)) out.push_back(std::move(d));
  }
  return out;
}

MapResult evaluate_predictions(const data::DetectionSet& set, const std::vector<int64_t>& indices,
                               const std::vector<Detections>& predictions) {
  CHECK(indices.size() == predictions.size(), "evaluate_predictions: ", predictions.size(),
        " predictions for ", indices.size(), " images");
  std::vector<GroundTruth> gts;
  std::vector<Detection> dets;
  for (size_t i = 0; i < indices.size(); ++i) {
    const data::DetectionSample& s = set.samples[size_t(indices[i])];
    for (size_t k = 0; k < s.boxes.size(); ++k) {
      GroundTruth g;
      g.image = int64_t(i);
      g.label = s.labels[k];
      std::copy(s.boxes[k].begin(), s.boxes[k].end(), g.box);
      g.difficult = !s.difficult.empty() && s.difficult[k] != 0;
      gts.push_back(g);
    }
    const Detections& p = predictions[i];
    for (size_t k = 0; k < p.scores.size(); ++k) {
      Detection d;
      d.image = int64_t(i);
      d.label = int32_t(p.labels[k]);
      std::copy(p.boxes.begin() + int64_t(4 * k), p.boxes.begin() + int64_t(4 * k + 4), d.box);
      d.score = p.scores[k];
      dets.push_back(d);
    }
  }
  return evaluate_detections(gts, dets, int32_t(set.classes.size()) + 1);
}

}  // namespace mpicnn::detect
