// RoIAlign forward/backward on CPU with torchvision 0.14's semantics (its CPU kernel, bit for
// bit where the summation order allows), and MultiScaleRoIAlign: the FPN level assignment of
// Faster R-CNN's box head. Not RoIPool, not the rotated or position-sensitive variants.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace mpicnn::detect {

// One bilinear sampling point of a roi: four cells of a feature plane and their weights.
// Points outside the map (torchvision's "empty" rule) have every weight 0 and pos 0.
struct RoiSample {
  int32_t pos[4];
  float w[4];
};

// Interpolation tables of a batch of rois, reused between calls so that a training step
// allocates nothing once the tables have reached their largest size.
struct RoiAlignScratch {
  std::vector<RoiSample> samples;
  std::vector<int64_t> offset;  // first sample of each roi of the current chunk
  std::vector<float> count;     // torchvision's divisor of each roi of the current chunk
};

// out (K, C, PH, PW) = RoIAlign of feat (N, C, H, W) over rois (K, 5), each row
// [batch_index, x1, y1, x2, y2] in image coordinates; spatial_scale maps them onto feat.
// sampling_ratio > 0: that many points per bin side, else ceil(roi side / bins).
// aligned: shift by -0.5 pixel (Detectron2); otherwise rois are at least 1x1 (legacy).
// Throws mpicnn::Error on a batch index outside [0, N) or bad sizes.
void roi_align_forward(float* out, const float* feat, const float* rois, int64_t K, int64_t N,
                       int64_t C, int64_t H, int64_t W, int PH, int PW, double spatial_scale,
                       int sampling_ratio, bool aligned, RoiAlignScratch* scratch = nullptr);

// dfeat (N, C, H, W) += adjoint of roi_align_forward applied to dout (K, C, PH, PW).
// Deterministic for any thread count: each thread owns whole channels and walks the rois in
// order, which is also the order of torchvision's single-threaded kernel.
void roi_align_backward(float* dfeat, const float* dout, const float* rois, int64_t K, int64_t N,
                        int64_t C, int64_t H, int64_t W, int PH, int PW, double spatial_scale,
                        int sampling_ratio, bool aligned, RoiAlignScratch* scratch = nullptr);

// torchvision's _infer_scale for one side: 2 ** round(log2(feature / image)), the log in
// float32 and round half to even, as torch.tensor(approx_scale).log2().round() does.
double infer_scale(int64_t feature_size, int64_t image_size);

// torchvision's LevelMapper (FPN paper eq. 1), in float32 like torch:
// floor(canonical_level + log2(sqrt(box_area) / canonical_scale) + eps), clamped to
// [k_min, k_max], minus k_min.
struct LevelMapper {
  int k_min = 2, k_max = 5;
  int canonical_scale = 224, canonical_level = 4;
  float eps = 1e-6f;
  int level(const float* box) const;  // box: x1, y1, x2, y2
};

// One FPN level as MultiScaleRoIAlign reads it.
struct FeatureLevel {
  const float* data = nullptr;  // (N, C, H, W)
  Shape shape;                  // (N, C, H, W)
};

// torchvision.ops.MultiScaleRoIAlign(featmap_names, output_size, sampling_ratio) with
// aligned=False: every roi is pooled from one level chosen by LevelMapper. The scales are
// inferred once, on plan() or the first forward(), and kept, as torchvision caches them.
class MultiScaleRoIAlign {
 public:
  explicit MultiScaleRoIAlign(int output_size = 7, int sampling_ratio = 2,
                              int canonical_scale = 224, int canonical_level = 4);

  // level_shapes: (N, C, H, W) of each level, finest first. image_h/image_w: what torchvision
  // gets as image_shapes, the largest height and width among the batch's resized images
  // (only the height decides the scales, as in torchvision). max_rois sizes the buffers.
  void plan(const std::vector<Shape>& level_shapes, int64_t image_h, int64_t image_w,
            int64_t max_rois);

  // out (K, C, PH, PW) = each roi (K, 5) pooled from its level. Plans on the first call.
  void forward(float* out, const std::vector<FeatureLevel>& levels, const float* rois, int64_t K,
               int64_t image_h, int64_t image_w);
  // dfeats[l] (shape of forward's levels[l]) += adjoint of the last forward for dout
  // (K, C, PH, PW); rois and K must be those of that forward.
  void backward(const std::vector<float*>& dfeats, const float* dout, const float* rois,
                int64_t K);

  int output_size() const { return output_size_; }
  const std::vector<double>& scales() const { return scales_; }
  const LevelMapper& mapper() const { return mapper_; }
  const std::vector<int>& roi_levels() const { return roi_level_; }  // of the last forward

 private:
  int output_size_, sampling_ratio_;
  LevelMapper mapper_;
  std::vector<double> scales_;
  std::vector<Shape> shapes_;           // the last forward's level shapes
  std::vector<int> roi_level_;          // (K)
  std::vector<int64_t> rows_;           // roi indices grouped by level, ascending in each
  std::vector<int64_t> level_begin_;    // (levels + 1) offsets into rows_
  int64_t last_K_ = -1;
  RoiAlignScratch scratch_;
};

}  // namespace mpicnn::detect
