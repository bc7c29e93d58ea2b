// Box arithmetic for Faster R-CNN with torchvision 0.14 semantics: the box coder (encode/decode
// of regression deltas), IoU, clipping, small-box removal, NMS and per-class NMS.
// Not the matcher, sampler or losses: those build on these. Boxes are float32 (x1, y1, x2, y2).
#pragma once
#include <cstdint>
#include <vector>

namespace mpicnn::detect {

// torchvision's default bbox_xform_clip, log(1000 / 16) rounded to float (torch.clamp rounds its
// bound to the tensor's dtype): a decoded box grows at most 62.5x per side.
constexpr float kBboxXformClip = 4.135166556742356f;

// torchvision.models.detection._utils.BoxCoder. Every expression keeps torchvision's float32
// operation order (one rounding per PyTorch op, no fused multiply-add), so results differ from
// torch only by the ulp or two between our expf/logf and PyTorch's vectorised ones.
struct BoxCoder {
  float wx = 1, wy = 1, ww = 1, wh = 1;  // RPN: (1, 1, 1, 1); box head: (10, 10, 5, 5)
  float clip = kBboxXformClip;           // upper clamp on dw, dh before exp

  // deltas (n, 4) = targets that turn each proposal into its gt box (encode_single).
  // Degenerate proposals (zero width or height) give inf/NaN, as in torchvision.
  void encode(float* deltas, const float* gt, const float* proposals, int64_t n) const;  // gt, proposals: (n, 4)
  // boxes (n, k*4) = the k boxes (one per class for the box head) that deltas (n, k*4) make of
  // each reference box ref (n, 4) (decode_single).
  void decode(float* boxes, const float* deltas, const float* ref, int64_t n, int64_t k) const;
};

// area (n) = (x2 - x1) * (y2 - y1) of boxes (n, 4) (torchvision.ops.box_area).
void box_area(float* area, const float* boxes, int64_t n);

// iou (na, nb) = IoU of every box of a (na, 4) with every box of b (nb, 4) (torchvision.ops.box_iou).
// A pair whose union is 0 gives NaN, as in torchvision.
void box_iou(float* iou, const float* a, int64_t na, const float* b, int64_t nb);

// Clamps x to [0, width] and y to [0, height] in place; boxes (n, 4)
// (torchvision.ops.clip_boxes_to_image).
void clip_boxes_to_image(float* boxes, int64_t n, int64_t height, int64_t width);

// keep = indices (increasing) of boxes (n, 4) with width >= min_size and height >= min_size,
// compared in float32 as torch does (torchvision.ops.remove_small_boxes).
void remove_small_boxes(std::vector<int64_t>& keep, const float* boxes, int64_t n, float min_size);

// keep = torchvision.ops.nms: boxes (n, 4) visited by decreasing score, a box is dropped when its
// IoU with an already kept box is > iou_threshold (float IoU compared in double, as torchvision's
// kernel does). Equal scores keep input order (torchvision sorts with a stable descending sort);
// NaN scores sort first, as torch's descending sort puts them. keep lists indices by decreasing score.
void nms(std::vector<int64_t>& keep, const float* boxes, const float* scores, int64_t n,
         double iou_threshold);

// keep = per-class NMS: boxes of different classes (n) never suppress each other; result sorted
// by decreasing score (equal scores: input order). This is torchvision's batched_nms as it runs
// for more than 1000 CPU boxes (_batched_nms_vanilla); below that torchvision offsets boxes by
// class instead, whose shifted float coordinates can round an IoU at the threshold differently.
void batched_nms(std::vector<int64_t>& keep, const float* boxes, const float* scores,
                 const int64_t* classes, int64_t n, double iou_threshold);

}  // namespace mpicnn::detect
