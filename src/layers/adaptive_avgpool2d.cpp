// AdaptiveAvgPool2d forward/backward on CPU: OpenMP over (N*C) planes, summing in float in
// PyTorch's order and dividing by the bin height then width as it does. Not the 1x1 "mean"
// shortcut PyTorch takes (its pairwise sum differs only in the last bits).
#include "layers/adaptive_avgpool2d.h"

#include "core/gpu.h"

namespace mpicnn {

namespace {

inline int64_t bin_begin(int64_t i, int64_t out, int64_t in) { return i * in / out; }
inline int64_t bin_end(int64_t i, int64_t out, int64_t in) {
  return ((i + 1) * in + out - 1) / out;
}

// y (OH, OW) from x (H, W).
void adaptive_plane(real* y, const real* x, int64_t H, int64_t W, int64_t OH, int64_t OW) {
  for (int64_t oh = 0; oh < OH; ++oh) {
    const int64_t h0 = bin_begin(oh, OH, H), h1 = bin_end(oh, OH, H);
    for (int64_t ow = 0; ow < OW; ++ow) {
      const int64_t w0 = bin_begin(ow, OW, W), w1 = bin_end(ow, OW, W);
      real sum = 0.f;
      for (int64_t h = h0; h < h1; ++h)
        for (int64_t w = w0; w < w1; ++w) sum += x[h * W + w];
      y[oh * OW + ow] = sum / real(h1 - h0) / real(w1 - w0);
    }
  }
}

// dx (H, W) '=' from dy (OH, OW).
void adaptive_plane_backward(real* dx, const real* dy, int64_t H, int64_t W, int64_t OH,
                             int64_t OW) {
  for (int64_t i = 0; i < H * W; ++i) dx[i] = 0.f;
  for (int64_t oh = 0; oh < OH; ++oh) {
    const int64_t h0 = bin_begin(oh, OH, H), h1 = bin_end(oh, OH, H);
    for (int64_t ow = 0; ow < OW; ++ow) {
      const int64_t w0 = bin_begin(ow, OW, W), w1 = bin_end(ow, OW, W);
      const real g = dy[oh * OW + ow] / real(h1 - h0) / real(w1 - w0);
      for (int64_t h = h0; h < h1; ++h)
        for (int64_t w = w0; w < w1; ++w) dx[h * W + w] += g;
    }
  }
}

}  // namespace

AdaptiveAvgPool2d::AdaptiveAvgPool2d(int out_h, int out_w) : out_h_(out_h), out_w_(out_w) {
  CHECK(out_h >= 1 && out_w >= 1, "AdaptiveAvgPool2d: output size ", out_h, "x", out_w,
        " must be at least 1x1");
}

Shape AdaptiveAvgPool2d::output_shape(const Shape& in) const {
  CHECK(in.ndim == 4, "AdaptiveAvgPool2d: input must be 4-D (N, C, H, W), got ", in.str());
  CHECK(in.d[2] >= 1 && in.d[3] >= 1, "AdaptiveAvgPool2d: input ", in.str(),
        " has an empty plane");
  return {in.d[0], in.d[1], out_h_, out_w_};
}

gpu::PoolDesc AdaptiveAvgPool2d::desc(const Shape& in) const {
  gpu::PoolDesc d;
  d.c = int(in[1]), d.h = int(in[2]), d.w = int(in[3]), d.oh = out_h_, d.ow = out_w_;
  return d;
}

void AdaptiveAvgPool2d::forward(Tensor& out, const Tensor& in) {
  const Shape os = output_shape(in.shape());
  CHECK(out.shape() == os, "AdaptiveAvgPool2d: out has shape ", out.shape().str(),
        ", expected ", os.str(), " for input ", in.shape().str());
  CHECK(!overlaps(out, in), "AdaptiveAvgPool2d: out must not alias in");
  if (on_gpu_as("AdaptiveAvgPool2d", in.format(), {&out, &in}))
    return gpu::backend().adaptive_avgpool_forward(in.format(), out.raw(), in.raw(), in.size(0),
                                                   desc(in.shape()));
  const int64_t H = in.size(2), W = in.size(3), OH = out_h_, OW = out_w_;
  const int64_t planes = os.d[0] * os.d[1];
  const real* x = in.data();
  real* y = out.data();
  // Bins cover the input about once (more when they overlap): work ~ input + output.
#pragma omp parallel for schedule(static) if (in.numel() + out.numel() > 32768)
  for (int64_t p = 0; p < planes; ++p) adaptive_plane(y + p * OH * OW, x + p * H * W, H, W, OH, OW);
}

void AdaptiveAvgPool2d::backward(Tensor& din, const Tensor& dout, const Tensor& in,
                                 const Tensor& /*out*/) {
  if (!din.defined()) return;
  const Shape os = output_shape(in.shape());
  CHECK(din.shape() == in.shape() && dout.shape() == os, "AdaptiveAvgPool2d backward: din ",
        din.shape().str(), ", dout ", dout.shape().str(), " for input ", in.shape().str(),
        " (expected output ", os.str(), ")");
  CHECK(!overlaps(din, dout), "AdaptiveAvgPool2d backward: din must not alias dout");
  if (on_gpu_as("AdaptiveAvgPool2d backward", din.format(), {&din, &dout}))
    return gpu::backend().adaptive_avgpool_backward(din.format(), din.raw(), dout.raw(),
                                                    in.size(0), desc(in.shape()));
  const int64_t H = in.size(2), W = in.size(3), OH = out_h_, OW = out_w_;
  const int64_t planes = os.d[0] * os.d[1];
  const real* dy = dout.data();
  real* dx = din.data();
#pragma omp parallel for schedule(static) if (din.numel() + dout.numel() > 32768)
  for (int64_t p = 0; p < planes; ++p)
    adaptive_plane_backward(dx + p * H * W, dy + p * OH * OW, H, W, OH, OW);
}

}  // namespace mpicnn
