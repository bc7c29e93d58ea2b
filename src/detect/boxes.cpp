// Box coder, IoU, clipping and NMS on the CPU, written to round exactly like torchvision 0.14's
// float32 code. Not a GPU path (kernels/ would hold one) and not the detection heads.
#include "detect/boxes.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/check.h"

// PyTorch rounds after every op; a fused multiply-add (GCC contracts a*b+c across statements
// in C++ by default) would round once and drift from torch by an ulp, enough to flip an NMS
// decision at the threshold. Every function doing float arithmetic here carries this.
#if defined(__clang__)
#pragma clang fp contract(off)
#define MPICNN_NO_CONTRACT
#elif defined(__GNUC__)
#define MPICNN_NO_CONTRACT __attribute__((optimize("fp-contract=off")))
#else
#define MPICNN_NO_CONTRACT
#endif

namespace mpicnn::detect {

MPICNN_NO_CONTRACT void BoxCoder::encode(float* deltas, const float* gt, const float* proposals,
                                         int64_t n) const {
  CHECK(n >= 0, "BoxCoder::encode: negative box count ", n);
#pragma omp parallel for schedule(static) if (n >= 16384)
  for (int64_t i = 0; i < n; ++i) {
    const float* p = proposals + 4 * i;
    const float* g = gt + 4 * i;
    const float ex_w = p[2] - p[0], ex_h = p[3] - p[1];
    const float ex_cx = p[0] + 0.5f * ex_w, ex_cy = p[1] + 0.5f * ex_h;
    const float gt_w = g[2] - g[0], gt_h = g[3] - g[1];
    const float gt_cx = g[0] + 0.5f * gt_w, gt_cy = g[1] + 0.5f * gt_h;
    float* d = deltas + 4 * i;
    d[0] = wx * (gt_cx - ex_cx) / ex_w;  // (wx * diff) / w: torchvision's left-to-right order
    d[1] = wy * (gt_cy - ex_cy) / ex_h;
    d[2] = ww * std::log(gt_w / ex_w);
    d[3] = wh * std::log(gt_h / ex_h);
  }
}

MPICNN_NO_CONTRACT void BoxCoder::decode(float* boxes, const float* deltas, const float* ref,
                                         int64_t n, int64_t k) const {
  CHECK(n >= 0 && k >= 1, "BoxCoder::decode: bad sizes n=", n, " k=", k);
#pragma omp parallel for schedule(static) if (n * k >= 16384)
  for (int64_t i = 0; i < n; ++i) {
    const float* r = ref + 4 * i;
    const float w = r[2] - r[0], h = r[3] - r[1];
    const float cx = r[0] + 0.5f * w, cy = r[1] + 0.5f * h;
    for (int64_t c = 0; c < k; ++c) {
      const float* d = deltas + 4 * (i * k + c);
      const float dx = d[0] / wx, dy = d[1] / wy;
      float dw = d[2] / ww, dh = d[3] / wh;
      dw = dw > clip ? clip : dw;  // torch.clamp(max=): NaN stays NaN
      dh = dh > clip ? clip : dh;
      const float pcx = dx * w + cx, pcy = dy * h + cy;
      const float pw = std::exp(dw) * w, ph = std::exp(dh) * h;
      const float half_w = 0.5f * pw, half_h = 0.5f * ph;
      float* o = boxes + 4 * (i * k + c);
      o[0] = pcx - half_w;
      o[1] = pcy - half_h;
      o[2] = pcx + half_w;
      o[3] = pcy + half_h;
    }
  }
}

MPICNN_NO_CONTRACT void box_area(float* area, const float* boxes, int64_t n) {
  CHECK(n >= 0, "box_area: negative box count ", n);
  for (int64_t i = 0; i < n; ++i)
    area[i] = (boxes[4 * i + 2] - boxes[4 * i]) * (boxes[4 * i + 3] - boxes[4 * i + 1]);
}

MPICNN_NO_CONTRACT void box_iou(float* iou, const float* a, int64_t na, const float* b, int64_t nb) {
  CHECK(na >= 0 && nb >= 0, "box_iou: negative box count ", na, " x ", nb);
  std::vector<float> area_a(static_cast<size_t>(na)), area_b(static_cast<size_t>(nb));
  box_area(area_a.data(), a, na);
  box_area(area_b.data(), b, nb);
  // The matcher calls this with few gt boxes (na) against many anchors (nb): split nb.
  constexpr int64_t kBlock = 2048;
  const int64_t blocks = (nb + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (na * nb >= 65536)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t j0 = blk * kBlock, j1 = std::min(nb, j0 + kBlock);
    for (int64_t i = 0; i < na; ++i) {
      const float ax1 = a[4 * i], ay1 = a[4 * i + 1], ax2 = a[4 * i + 2], ay2 = a[4 * i + 3];
      const float aa = area_a[size_t(i)];
      float* row = iou + i * nb;
      for (int64_t j = j0; j < j1; ++j) {
        const float* q = b + 4 * j;
        const float lx = ax1 < q[0] ? q[0] : ax1, ly = ay1 < q[1] ? q[1] : ay1;
        const float rx = q[2] < ax2 ? q[2] : ax2, ry = q[3] < ay2 ? q[3] : ay2;
        float w = rx - lx, h = ry - ly;
        w = w < 0.f ? 0.f : w;
        h = h < 0.f ? 0.f : h;
        const float inter = w * h;
        row[j] = inter / (aa + area_b[size_t(j)] - inter);
      }
    }
  }
}

void clip_boxes_to_image(float* boxes, int64_t n, int64_t height, int64_t width) {
  CHECK(n >= 0 && height >= 0 && width >= 0, "clip_boxes_to_image: bad sizes n=", n,
        " image ", height, "x", width);
  const float hi[2] = {float(width), float(height)};  // x then y
  for (int64_t i = 0; i < 4 * n; ++i) {
    float v = boxes[i];
    v = v < 0.f ? 0.f : v;  // comparisons, not std::max: torch.clamp keeps NaN
    v = v > hi[i & 1] ? hi[i & 1] : v;
    boxes[i] = v;
  }
}

MPICNN_NO_CONTRACT void remove_small_boxes(std::vector<int64_t>& keep, const float* boxes,
                                           int64_t n, float min_size) {
  CHECK(n >= 0, "remove_small_boxes: negative box count ", n);
  keep.clear();
  for (int64_t i = 0; i < n; ++i) {
    const float* q = boxes + 4 * i;
    if (q[2] - q[0] >= min_size && q[3] - q[1] >= min_size) keep.push_back(i);
  }
}

namespace {

// torch's scores.sort(stable=true, descending=true): NaN first, equal scores in input order.
std::vector<int64_t> order_by_score(const float* scores, int64_t n) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t(0));
  std::stable_sort(order.begin(), order.end(), [scores](int64_t a, int64_t b) {
    const float sa = scores[a], sb = scores[b];
    return sa > sb || (std::isnan(sa) && !std::isnan(sb));
  });
  return order;
}

// The float t with (x > t) == (double(x) > threshold) for every float x, so the inner loop
// compares in float (and vectorises) yet decides like torchvision's float-vs-double compare.
float float_threshold(double threshold) {
  float t = float(threshold);
  if (double(t) > threshold) t = std::nextafter(t, -std::numeric_limits<float>::infinity());
  return t;
}

// Greedy NMS over the boxes idx[0..m) in visiting order. kept[r] = 1 for the survivors.
// Coordinates are gathered into columns so the inner loop is branch-free and vectorises; it
// also updates boxes already suppressed, which changes nothing and avoids a branch.
MPICNN_NO_CONTRACT void greedy_nms(std::vector<uint8_t>& kept, const float* boxes,
                                   const int64_t* idx, int64_t m, float thr) {
  std::vector<float> cols(5 * size_t(m));
  float* __restrict x1 = cols.data();
  float* __restrict y1 = x1 + m;
  float* __restrict x2 = y1 + m;
  float* __restrict y2 = x2 + m;
  float* __restrict area = y2 + m;
  for (int64_t r = 0; r < m; ++r) {
    const float* q = boxes + 4 * idx[r];
    x1[r] = q[0], y1[r] = q[1], x2[r] = q[2], y2[r] = q[3];
    area[r] = (q[2] - q[0]) * (q[3] - q[1]);
  }
  kept.assign(size_t(m), 0);
  std::vector<uint8_t> removed_v(size_t(m), 0);
  uint8_t* __restrict removed = removed_v.data();
  for (int64_t i = 0; i < m; ++i) {
    if (removed[i]) continue;
    kept[size_t(i)] = 1;
    const float ix1 = x1[i], iy1 = y1[i], ix2 = x2[i], iy2 = y2[i], ia = area[i];
    for (int64_t j = i + 1; j < m; ++j) {
      // Same expressions as torchvision's nms_kernel (std::max/std::min, then inter / union).
      const float xx1 = ix1 < x1[j] ? x1[j] : ix1, yy1 = iy1 < y1[j] ? y1[j] : iy1;
      const float xx2 = x2[j] < ix2 ? x2[j] : ix2, yy2 = y2[j] < iy2 ? y2[j] : iy2;
      const float w = 0.f < xx2 - xx1 ? xx2 - xx1 : 0.f;
      const float h = 0.f < yy2 - yy1 ? yy2 - yy1 : 0.f;
      const float inter = w * h;
      const float ovr = inter / (ia + area[j] - inter);
      removed[j] |= uint8_t(ovr > thr);
    }
  }
}

}  // namespace

void nms(std::vector<int64_t>& keep, const float* boxes, const float* scores, int64_t n,
         double iou_threshold) {
  CHECK(n >= 0, "nms: negative box count ", n);
  keep.clear();
  const std::vector<int64_t> order = order_by_score(scores, n);
  std::vector<uint8_t> kept;
  greedy_nms(kept, boxes, order.data(), n, float_threshold(iou_threshold));
  for (int64_t r = 0; r < n; ++r)
    if (kept[size_t(r)]) keep.push_back(order[size_t(r)]);
}

void batched_nms(std::vector<int64_t>& keep, const float* boxes, const float* scores,
                 const int64_t* classes, int64_t n, double iou_threshold) {
  CHECK(n >= 0, "batched_nms: negative box count ", n);
  keep.clear();
  const std::vector<int64_t> order = order_by_score(scores, n);
  // Group by class, each group still in score order; NMS per group; then read the survivors
  // back in the global score order.
  std::vector<int64_t> grouped = order;
  std::stable_sort(grouped.begin(), grouped.end(),
                   [classes](int64_t a, int64_t b) { return classes[a] < classes[b]; });
  std::vector<uint8_t> survives(size_t(n), 0), kept;
  const float thr = float_threshold(iou_threshold);
  for (int64_t g0 = 0; g0 < n;) {
    int64_t g1 = g0 + 1;
    while (g1 < n && classes[grouped[size_t(g1)]] == classes[grouped[size_t(g0)]]) ++g1;
    greedy_nms(kept, boxes, grouped.data() + g0, g1 - g0, thr);
    for (int64_t r = g0; r < g1; ++r) survives[size_t(grouped[size_t(r)])] = kept[size_t(r - g0)];
    g0 = g1;
  }
  for (int64_t i : order)
    if (survives[size_t(i)]) keep.push_back(i);
}

}  // namespace mpicnn::detect
