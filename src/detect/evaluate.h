// A detector over a dataset: its detections for a list of images (in each image's own
// coordinates), and their VOC / COCO mAP against the set's boxes. One process; the trainer's
// and pipeline_eval's sharding over ranks builds on these. Not the metrics (map_eval.h).
#pragma once
#include <cstdint>
#include <vector>

#include "data/detection.h"
#include "detect/map_eval.h"
#include "detect/roi_heads.h"
#include "detect/transform.h"
#include "models/model.h"

namespace mpicnn::detect {

// One padded batch of images (n, 3, PH, PW) through the detector `model` in eval mode, each
// image's boxes scaled back to its original size (torchvision's postprocess). The model is
// re-planned, for max(plan_batch, n) images, when the padded size differs from the planned one
// or n exceeds it: every caller (training's evaluation, ./pipeline_eval) predicts by this rule,
// so the same batches give the same bits.
std::vector<Detections> predict_batch(Model& model, const Tensor& images, const std::vector<Size2>& resized,
                                      const std::vector<Size2>& original, int64_t plan_batch);

// The detector `model` (make_faster_rcnn) in eval mode on set.samples[indices], `batch` images
// at a time, each batch padded as GeneralizedRCNNTransform does; boxes scaled back to the
// original images (torchvision's postprocess). The model is re-planned when a batch's padded
// size differs from the last one, and left in eval mode.
std::vector<Detections> predict(Model& model, const data::DetectionSet& set,
                                const std::vector<int64_t>& indices, int batch,
                                const ResizeOptions& o);

// mAP of predictions[i] (for set.samples[indices[i]]) against the set's boxes and difficult
// flags; classes are the set's (label 0, the background, has no boxes).
MapResult evaluate_predictions(const data::DetectionSet& set, const std::vector<int64_t>& indices,
                               const std::vector<Detections>& predictions);

}  // namespace mpicnn::detect
