// AvgPool2d of the CUDA backend (src/layers/avgpool2d.cpp): PyTorch's windows and divisors
// (count_include_pad, divisor_override). Own kernels, not cuDNN; backward gathers per input
// cell in the CPU's summation order, so it is deterministic without atomics.
#include "pool_common.cuh"

namespace mpicnn::gpu {

namespace {

// As avgpool2d.cpp: one axis of a window, real cells [begin, end) and the extent counted with
// padding, clipped to the padded input (PyTorch: end = min(start + k, size + pad)).
struct Span {
  int64_t begin, end, padded;
};

__device__ __forceinline__ Span span(int64_t o, int kernel, int stride, int pad, int64_t size) {
  const int64_t start = o * stride - pad;
  const int64_t stop = min(start + kernel, size + pad);
  return {max(start, int64_t(0)), min(stop, size), stop - start};
}

__device__ __forceinline__ float divisor(const Span& h, const Span& w, const PoolDesc& d) {
  if (d.divisor_override) return float(d.divisor_override);
  if (d.count_include_pad) return float(h.padded * w.padded);
  return float((h.end - h.begin) * (w.end - w.begin));
}

// One thread per output cell: y (N, C, OH, OW) = window sum (float, row-major order) / divisor.
__global__ void avgpool_forward_kernel(float* y, const float* x, int64_t total, PoolDesc d) {
  const int64_t H = d.h, W = d.w, OH = d.oh, OW = d.ow;
  for (int64_t e = global_index(); e < total; e += grid_stride()) {
    const int64_t ow = e % OW, oh = (e / OW) % OH, plane = e / (OH * OW);
    const float* xp = x + plane * H * W;
    const Span sh = span(oh, d.kh, d.stride_h, d.pad_h, H);
    const Span sw = span(ow, d.kw, d.stride_w, d.pad_w, W);
    float sum = 0.f;
    for (int64_t h = sh.begin; h < sh.end; ++h)
      for (int64_t w = sw.begin; w < sw.end; ++w) sum = __fadd_rn(sum, xp[h * W + w]);
    // A window of padding only cannot arise from the output-size rule; PyTorch writes 0.
    const bool empty = sh.begin >= sh.end || sw.begin >= sw.end;
    y[e] = empty ? 0.f : __fdiv_rn(sum, divisor(sh, sw, d));
  }
}

// One thread per input cell: dx '=' sum of dy / divisor over the windows holding the cell, in
// increasing output index (the CPU's order), from 0.
__global__ void avgpool_backward_kernel(float* dx, const float* dy, int64_t total, PoolDesc d) {
  const int64_t H = d.h, W = d.w, OH = d.oh, OW = d.ow;
  for (int64_t e = global_index(); e < total; e += grid_stride()) {
    const int64_t w = e % W, h = (e / W) % H, plane = e / (H * W);
    const float* dyp = dy + plane * OH * OW;
    // Windows with start <= h < start + k (h < H <= the padded clip, so that is all).
    const int64_t oh0 = first_at_or_after(h + d.pad_h - d.kh + 1, d.stride_h);
    const int64_t oh1 = min((h + d.pad_h) / d.stride_h, OH - 1);
    const int64_t ow0 = first_at_or_after(w + d.pad_w - d.kw + 1, d.stride_w);
    const int64_t ow1 = min((w + d.pad_w) / d.stride_w, OW - 1);
    float g = 0.f;
    for (int64_t oh = oh0; oh <= oh1; ++oh) {
      const Span sh = span(oh, d.kh, d.stride_h, d.pad_h, H);
      if (h < sh.begin || h >= sh.end) continue;  // defensive: the range above is exact
      for (int64_t ow = ow0; ow <= ow1; ++ow) {
        const Span sw = span(ow, d.kw, d.stride_w, d.pad_w, W);
        if (w < sw.begin || w >= sw.end) continue;
        g = __fadd_rn(g, __fdiv_rn(dyp[oh * OW + ow], divisor(sh, sw, d)));
      }
    }
    dx[e] = g;
  }
}

}  // namespace

void CudaBackend::avgpool_forward(float* y, const float* x, int64_t N, const PoolDesc& d) {
  // y: (N, C, OH, OW); x: (N, C, H, W)
  const int64_t total = out_count(N, d);
  if (total <= 0) return;
  CHECK(d.stride_h > 0 && d.stride_w > 0, "avgpool_forward: stride must be positive");
  avgpool_forward_kernel<<<blocks_for(total), kThreads, 0, ctx().stream>>>(y, x, total, d);
  KERNEL_CHECK();
}

void CudaBackend::avgpool_backward(float* dx, const float* dy, int64_t N, const PoolDesc& d) {
  // dx: (N, C, H, W); dy: (N, C, OH, OW)
  const int64_t total = in_count(N, d);
  if (total <= 0) return;
  CHECK(d.stride_h > 0 && d.stride_w > 0, "avgpool_backward: stride must be positive");
  avgpool_backward_kernel<<<blocks_for(total), kThreads, 0, ctx().stream>>>(dx, dy, total, d);
  KERNEL_CHECK();
}

}  // namespace mpicnn::gpu
