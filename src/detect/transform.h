// GeneralizedRCNNTransform of torchvision 0.14: per image, normalise with mean/std, resize
// (bilinear, align_corners=False, no antialias) so the shorter side becomes min_size unless
// the longer would pass max_size, then batch with zero padding to a multiple of 32; boxes
// scale with their image, and predictions scale back. Not data loading or augmentation
// (data/detection.h), nor anchors (anchors.h).
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "models/detectors.h"

namespace mpicnn::detect {

struct ResizeOptions {
  int min_size = DetectorDefaults::min_size;  // the test and demo use smaller
  int max_size = DetectorDefaults::max_size;
  int size_divisible = 32;
  float mean[3] = {0.485f, 0.456f, 0.406f};
  float std[3] = {0.229f, 0.224f, 0.225f};
};

struct Size2 {
  int64_t h = 0, w = 0;
};

// The size an (h, w) image is resized to: scale = min(min_size / short, max_size / long) in
// float32 (as torchvision computes it), then floor(side * scale) in double (F.interpolate with
// recompute_scale_factor).
Size2 resized_size(int64_t h, int64_t w, const ResizeOptions& o);

// out (3, OH, OW) '=' F.interpolate(in (3, H, W), size=(OH, OW), mode="bilinear",
// align_corners=False), PyTorch's source coordinates and weights.
void resize_bilinear(float* out, const float* in, int64_t channels, int64_t H, int64_t W,
                     int64_t OH, int64_t OW);

// The padded batch size of images of these sizes: each side's maximum rounded up to a multiple
// of size_divisible.
Size2 batch_size(const std::vector<Size2>& sizes, int size_divisible);

// One image (3, H, W) in [0, 1] normalised and resized into slot `index` of `batch`
// (N, 3, PH, PW), whose padding this writes as zeros. Returns the resized size.
Size2 transform_into(Tensor& batch, int64_t index, const float* image, int64_t H, int64_t W,
                     const ResizeOptions& o);

// boxes (n, 4) x1 y1 x2 y2 scaled in place from an image of size `from` to size `to`, with
// float32 ratios to / from as torchvision's resize_boxes.
void resize_boxes(float* boxes, int64_t n, Size2 from, Size2 to);

}  // namespace mpicnn::detect
