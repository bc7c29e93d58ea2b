// Faster R-CNN's region proposal logic after the head (torchvision 0.14 RegionProposalNetwork):
// anchors, the proposals (per level top-n by objectness, decode, clip, drop small boxes,
// per-level NMS, top-n overall) and, in training, the anchor targets and the two losses with
// their gradients for the head's outputs. The head's convolutions are rpn_head.h.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "core/rng.h"
#include "detect/anchors.h"
#include "detect/boxes.h"
#include "detect/matcher.h"
#include "detect/transform.h"
#include "models/detectors.h"

namespace mpicnn::detect {

struct RpnOptions {
  int64_t pre_nms_top_n_train = 2000, pre_nms_top_n_test = 1000;    // per level
  // per image
  int64_t post_nms_top_n_train = 2000, post_nms_top_n_test = DetectorDefaults::rpn_post_nms_top_n_test;
  float nms_thresh = 0.7f;
  float fg_iou_thresh = 0.7f, bg_iou_thresh = 0.3f;
  int64_t batch_size_per_image = 256;
  float positive_fraction = 0.5f;
  float score_thresh = 0.f;
  float min_size = 1e-3f;
};

// One level of the head's output for the whole batch: objectness (N, A, H, W) and box deltas
// (N, 4A, H, W), as RpnHead writes them.
struct RpnLevel {
  const float* objectness = nullptr;
  const float* deltas = nullptr;
  int64_t A = 0, H = 0, W = 0;
};

struct RpnLosses {
  double objectness = 0, box_reg = 0;  // torchvision's loss_objectness, loss_rpn_box_reg
};

class Rpn {
 public:
  Rpn(const RpnOptions& options, AnchorGenerator anchors);

  // The batch's anchors (image-independent: one padded size), (total, 4) in the order
  // (level, y, x, anchor); recomputed only when the level sizes or the padded size change.
  const std::vector<float>& anchors(const std::vector<RpnLevel>& levels, Size2 padded);

  // proposals[n] (k_n, 4) for each image of the batch, image_sizes[n] its resized size.
  // training picks the training top-n values.
  void propose(std::vector<std::vector<float>>& proposals, const std::vector<RpnLevel>& levels,
               int64_t N, const std::vector<Size2>& image_sizes, Size2 padded, bool training);

  // The losses for ground-truth boxes gt[n] (m_n, 4) of each image, and the gradient of
  // (w_objectness * objectness + w_box * box_reg) with respect to each level's objectness and
  // deltas, written (=) into dobjectness[l] and ddeltas[l] (the head's output shapes). Sampling:
  // `rule`, and for kRandom the stream of image n is Rng(seed, stream_base + n).
  RpnLosses loss(std::vector<float*>& dobjectness, std::vector<float*>& ddeltas,
                 const std::vector<RpnLevel>& levels, int64_t N,
                 const std::vector<std::vector<float>>& gt, Size2 padded, float w_objectness,
                 float w_box, SampleRule rule, uint64_t seed, uint64_t stream_base);

  const RpnOptions& options() const { return opt_; }

 private:
  // Flat anchor index i of image n -> the offset of its objectness value in level l's tensor
  // and the level; deltas of coordinate c sit at that offset + (3a + c) * H * W further on.
  struct Where {
    int level;
    int64_t obj;    // into levels[level].objectness
    int64_t delta;  // into levels[level].deltas, coordinate 0
    int64_t plane;  // H * W: the distance between coordinates
  };
  Where locate(const std::vector<RpnLevel>& levels, int64_t n, int64_t i) const;

  RpnOptions opt_;
  AnchorGenerator generator_;
  BoxCoder coder_;  // weights (1, 1, 1, 1)
  std::vector<float> anchors_;
  std::vector<std::array<int64_t, 2>> anchor_grids_;
  Size2 anchor_padded_;
  std::vector<int64_t> level_begin_;  // first flat anchor index of each level (+ total)
};

}  // namespace mpicnn::detect
