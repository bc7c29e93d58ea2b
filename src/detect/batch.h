// A detection training or evaluation batch from a dataset: each image decoded (flipped when
// asked, with its boxes), normalised, resized and padded into one tensor as
// GeneralizedRCNNTransform does, and its boxes scaled into the resized image. Not sharding or
// the choice of flips (the caller's, from its seeds), nor the model (faster_rcnn.h).
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "data/detection.h"
#include "detect/faster_rcnn.h"
#include "detect/transform.h"

namespace mpicnn::detect {

struct DetectionBatch {
  Tensor images;                         // (N, 3, PH, PW)
  std::vector<Size2> original, resized;  // each image's size before and after the resize
  std::vector<DetectionTarget> targets;  // boxes in the resized image, labels as in the set
};

// samples[indices[i]] into image i; flips[i] mirrors it (empty: no flips). out.images is
// reallocated only when its shape changes.
void make_detection_batch(DetectionBatch& out, const data::DetectionSet& set,
                          const std::vector<int64_t>& indices, const std::vector<bool>& flips,
                          const ResizeOptions& o);

}  // namespace mpicnn::detect
