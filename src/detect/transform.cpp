// The detection input transform. Bilinear weights follow ATen's upsample_bilinear2d on the CPU
// (area_pixel_compute_source_index with align_corners=False: src = max(scale * (dst + 0.5) -
// 0.5, 0), scale = in / out in float), summed as its kernel does: each row's two taps, then the
// two rows.
#include "detect/transform.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace mpicnn::detect {

Size2 resized_size(int64_t h, int64_t w, const ResizeOptions& o) {
  CHECK(h > 0 && w > 0, "detection transform: empty image (", h, "x", w, ")");
  const float shorter = float(std::min(h, w)), longer = float(std::max(h, w));
  // Python's `number / tensor` is Tensor.__rtruediv__: reciprocal(tensor) * number, in float32.
  const float scale = std::min((1.f / shorter) * float(o.min_size), (1.f / longer) * float(o.max_size));
  const double s = double(scale);
  return {int64_t(std::floor(double(h) * s)), int64_t(std::floor(double(w) * s))};
}

namespace {

struct Tap {
  int64_t i0, i1;
  float l0, l1;
};

std::vector<Tap> taps(int64_t in, int64_t out) {
  const float scale = float(in) / float(out);
  std::vector<Tap> t(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) {
    // ATen: scale * (dst_index + 0.5) - 0.5 with an integer index, so in double, then float.
    const float src = std::max(float(double(scale) * (double(o) + 0.5) - 0.5), 0.f);
    const int64_t i0 = int64_t(src);
    const float l1 = src - float(i0);
    t[size_t(o)] = {i0, i0 + (i0 < in - 1 ? 1 : 0), 1.f - l1, l1};
  }
  return t;
}

}  // namespace

void resize_bilinear(float* out, const float* in, int64_t channels, int64_t H, int64_t W,
                     int64_t OH, int64_t OW) {
  const std::vector<Tap> ty = taps(H, OH), tx = taps(W, OW);
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t oh = 0; oh < OH; ++oh) {
      const Tap& y = ty[size_t(oh)];
      const float* r0 = in + (c * H + y.i0) * W;
      const float* r1 = in + (c * H + y.i1) * W;
      float* dst = out + (c * OH + oh) * OW;
      for (int64_t ow = 0; ow < OW; ++ow) {
        const Tap& x = tx[size_t(ow)];
        float top = r0[x.i0] * x.l0;
        top += r0[x.i1] * x.l1;
        float bottom = r1[x.i0] * x.l0;
        bottom += r1[x.i1] * x.l1;
        float v = top * y.l0;
        v += bottom * y.l1;
        dst[ow] = v;
      }
    }
}

Size2 batch_size(const std::vector<Size2>& sizes, int size_divisible) {
  CHECK(!sizes.empty() && size_divisible >= 1, "detection transform: no images to batch");
  Size2 m;
  for (const Size2& s : sizes) m.h = std::max(m.h, s.h), m.w = std::max(m.w, s.w);
  const double d = double(size_divisible);
  return {int64_t(std::ceil(double(m.h) / d) * d), int64_t(std::ceil(double(m.w) / d) * d)};
}

Size2 transform_into(Tensor& batch, int64_t index, const float* image, int64_t H, int64_t W,
                     const ResizeOptions& o) {
  const Size2 r = resized_size(H, W, o);
  const int64_t PH = batch.size(2), PW = batch.size(3);
  CHECK(batch.dim() == 4 && batch.size(1) == 3 && index < batch.size(0) && r.h <= PH && r.w <= PW,
        "detection transform: image ", H, "x", W, " resized to ", r.h, "x", r.w,
        " does not fit batch ", batch.shape().str());
  std::vector<float> norm(static_cast<size_t>(3 * H * W));
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t i = 0; i < H * W; ++i)
      norm[size_t(c * H * W + i)] = (image[c * H * W + i] - o.mean[c]) / o.std[c];
  std::vector<float> resized(static_cast<size_t>(3 * r.h * r.w));
  resize_bilinear(resized.data(), norm.data(), 3, H, W, r.h, r.w);
  float* dst = batch.data() + index * 3 * PH * PW;
  std::fill(dst, dst + 3 * PH * PW, 0.f);
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t y = 0; y < r.h; ++y)
      std::copy_n(resized.data() + (c * r.h + y) * r.w, r.w, dst + (c * PH + y) * PW);
  return r;
}

void resize_boxes(float* boxes, int64_t n, Size2 from, Size2 to) {
  const float rh = float(to.h) / float(from.h), rw = float(to.w) / float(from.w);
  for (int64_t i = 0; i < n; ++i) {
    float* b = boxes + 4 * i;
    b[0] *= rw, b[1] *= rh, b[2] *= rw, b[3] *= rh;
  }
}

}  // namespace mpicnn::detect
