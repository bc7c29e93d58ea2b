// AdaptiveAvgPool2d of the CUDA backend (src/layers/adaptive_avgpool2d.cpp): PyTorch's bins
// [floor(i*H/OH), ceil((i+1)*H/OH)). Own kernels, not cuDNN; backward gathers per input cell
// in the CPU's summation order, so it is deterministic without atomics.
#include "pool_common.cuh"

namespace mpicnn::gpu {

namespace {

// Bin i of `out` over `in` cells: [floor(i * in / out), ceil((i + 1) * in / out)).
__device__ __forceinline__ int64_t bin_begin(int64_t i, int64_t out, int64_t in) {
  return i * in / out;
}
__device__ __forceinline__ int64_t bin_end(int64_t i, int64_t out, int64_t in) {
  return ((i + 1) * in + out - 1) / out;
}

// One thread per output cell: y (N, C, OH, OW) = bin sum / bin height / bin width.
__global__ void adaptive_avgpool_forward_kernel(float* y, const float* x, int64_t total,
                                                PoolDesc d) {
  const int64_t H = d.h, W = d.w, OH = d.oh, OW = d.ow;
  for (int64_t e = global_index(); e < total; e += grid_stride()) {
    const int64_t ow = e % OW, oh = (e / OW) % OH, plane = e / (OH * OW);
    const float* xp = x + plane * H * W;
    const int64_t h0 = bin_begin(oh, OH, H), h1 = bin_end(oh, OH, H);
    const int64_t w0 = bin_begin(ow, OW, W), w1 = bin_end(ow, OW, W);
    float sum = 0.f;
    for (int64_t h = h0; h < h1; ++h)
      for (int64_t w = w0; w < w1; ++w) sum = __fadd_rn(sum, xp[h * W + w]);
    y[e] = __fdiv_rn(__fdiv_rn(sum, float(h1 - h0)), float(w1 - w0));
  }
}

// One thread per input cell: dx '=' sum of dy / bin height / bin width over the bins holding
// the cell, in increasing output index, from 0. Bins holding h: begin(o) <= h iff
// o <= ceil((h + 1) * OH / H) - 1, and end(o) > h iff o >= floor(h * OH / H).
__global__ void adaptive_avgpool_backward_kernel(float* dx, const float* dy, int64_t total,
                                                 PoolDesc d) {
  const int64_t H = d.h, W = d.w, OH = d.oh, OW = d.ow;
  for (int64_t e = global_index(); e < total; e += grid_stride()) {
    const int64_t w = e % W, h = (e / W) % H, plane = e / (H * W);
    const float* dyp = dy + plane * OH * OW;
    const int64_t oh0 = h * OH / H, oh1 = min(((h + 1) * OH + H - 1) / H - 1, OH - 1);
    const int64_t ow0 = w * OW / W, ow1 = min(((w + 1) * OW + W - 1) / W - 1, OW - 1);
    float g = 0.f;
    for (int64_t oh = oh0; oh <= oh1; ++oh) {
      const int64_t h0 = bin_begin(oh, OH, H), h1 = bin_end(oh, OH, H);
      if (h < h0 || h >= h1) continue;  // defensive: the range above is exact
      for (int64_t ow = ow0; ow <= ow1; ++ow) {
        const int64_t w0 = bin_begin(ow, OW, W), w1 = bin_end(ow, OW, W);
        if (w < w0 || w >= w1) continue;
        g = __fadd_rn(g, __fdiv_rn(__fdiv_rn(dyp[oh * OW + ow], float(h1 - h0)),
                                   float(w1 - w0)));
      }
    }
    dx[e] = g;
  }
}

}  // namespace

void CudaBackend::adaptive_avgpool_forward(Format f, void* y, const void* x, int64_t N,
                                           const PoolDesc& d) {
  if (channels_last(f, "adaptive_avgpool_forward"))
    return adaptive_avgpool_forward_nhwc(f.elem, y, x, N, d);
  // y: (N, C, OH, OW); x: (N, C, H, W)
  const int64_t total = out_count(N, d);
  if (total <= 0) return;
  CHECK(d.h >= 1 && d.w >= 1, "adaptive_avgpool_forward: empty input plane");
  adaptive_avgpool_forward_kernel<<<blocks_for(total), kThreads, 0, ctx().stream>>>(
      static_cast<float*>(y), static_cast<const float*>(x), total, d);
  KERNEL_CHECK();
}

void CudaBackend::adaptive_avgpool_backward(Format f, void* dx, const void* dy, int64_t N,
                                            const PoolDesc& d) {
  if (channels_last(f, "adaptive_avgpool_backward"))
    return adaptive_avgpool_backward_nhwc(f.elem, dx, dy, N, d);
  // dx: (N, C, H, W); dy: (N, C, OH, OW)
  const int64_t total = in_count(N, d);
  if (total <= 0) return;
  CHECK(d.oh >= 1 && d.ow >= 1, "adaptive_avgpool_backward: empty output plane");
  adaptive_avgpool_backward_kernel<<<blocks_for(total), kThreads, 0, ctx().stream>>>(
      static_cast<float*>(dx), static_cast<const float*>(dy), total, d);
  KERNEL_CHECK();
}

}  // namespace mpicnn::gpu
