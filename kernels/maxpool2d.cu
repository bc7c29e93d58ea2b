// MaxPool2d of the CUDA backend (src/layers/maxpool2d.cpp): PyTorch's windows (padding,
// dilation; ceil_mode is in the output size), first-maximum ties and NaN rule, int32 argmax.
// Own kernels, not cuDNN; backward gathers per input cell in the CPU's summation order, so it
// is deterministic without atomics.
#include "pool_common.cuh"

namespace mpicnn::gpu {

namespace {

// As maxpool2d.cpp clip_window: first real cell of a dilated window starting at `start` (may
// be negative) and the end of its span clipped to the input.
__device__ __forceinline__ void clip_window(int64_t& begin, int64_t& end, int64_t start,
                                            int kernel, int dilation, int64_t size) {
  end = min(start + int64_t(kernel - 1) * dilation + 1, size);
  begin = start;
  if (begin < 0) begin += (-begin + dilation - 1) / dilation * dilation;
}

// One thread per output cell: y, argmax (N, C, OH, OW) from x (N, C, H, W).
__global__ void maxpool_forward_kernel(float* y, int32_t* argmax, const float* x, int64_t total,
                                       PoolDesc d) {
  const int64_t H = d.h, W = d.w, OH = d.oh, OW = d.ow;
  for (int64_t e = global_index(); e < total; e += grid_stride()) {
    const int64_t ow = e % OW, oh = (e / OW) % OH, plane = e / (OH * OW);
    const float* xp = x + plane * H * W;
    int64_t h0, h1, w0, w1;
    clip_window(h0, h1, oh * d.stride_h - d.pad_h, d.kh, d.dil_h, H);
    clip_window(w0, w1, ow * d.stride_w - d.pad_w, d.kw, d.dil_w, W);
    // PyTorch starts from the first cell, so an all -inf window points at it. `v > best` keeps
    // the first maximum; a NaN always replaces best (so the last NaN of the window wins).
    int64_t best_i = (h0 < h1 && w0 < w1) ? h0 * W + w0 : -1;
    float best = -INFINITY;
    for (int64_t h = h0; h < h1; h += d.dil_h)
      for (int64_t w = w0; w < w1; w += d.dil_w) {
        const float v = xp[h * W + w];
        if (v > best || isnan(v)) best = v, best_i = h * W + w;
      }
    y[e] = best;
    argmax[e] = int32_t(best_i);
  }
}

// One thread per input cell (n, c, h, w): dx '=' the sum of dy over the outputs whose argmax
// is this cell, visited in increasing output index like the CPU's scatter loop, from 0.
__global__ void maxpool_backward_kernel(float* dx, const float* dy, const int32_t* argmax,
                                        int64_t total, PoolDesc d) {
  const int64_t H = d.h, W = d.w, OH = d.oh, OW = d.ow;
  const int64_t span_h = int64_t(d.kh - 1) * d.dil_h, span_w = int64_t(d.kw - 1) * d.dil_w;
  for (int64_t e = global_index(); e < total; e += grid_stride()) {
    const int64_t w = e % W, h = (e / W) % H, plane = e / (H * W);
    const int32_t cell = int32_t(h * W + w);
    const float* dyp = dy + plane * OH * OW;
    const int32_t* ap = argmax + plane * OH * OW;
    // Outputs whose window span [o*stride - pad, o*stride - pad + span] holds h; the argmax
    // test rejects those whose dilation steps over it.
    const int64_t oh0 = first_at_or_after(h + d.pad_h - span_h, d.stride_h);
    const int64_t oh1 = min((h + d.pad_h) / d.stride_h, OH - 1);
    const int64_t ow0 = first_at_or_after(w + d.pad_w - span_w, d.stride_w);
    const int64_t ow1 = min((w + d.pad_w) / d.stride_w, OW - 1);
    float g = 0.f;
    for (int64_t oh = oh0; oh <= oh1; ++oh)
      for (int64_t ow = ow0; ow <= ow1; ++ow)
        if (ap[oh * OW + ow] == cell) g = __fadd_rn(g, dyp[oh * OW + ow]);
    dx[e] = g;
  }
}

}  // namespace

void CudaBackend::maxpool_forward(Format f, void* y, int32_t* argmax, const void* x, int64_t N,
                                  const PoolDesc& d) {
  if (channels_last(f, "maxpool_forward")) return maxpool_forward_nhwc(f.elem, y, argmax, x, N, d);
  // y, argmax: (N, C, OH, OW); x: (N, C, H, W)
  const int64_t total = out_count(N, d);
  if (total <= 0) return;
  CHECK(d.stride_h > 0 && d.stride_w > 0 && d.dil_h > 0 && d.dil_w > 0,
        "maxpool_forward: stride and dilation must be positive");
  maxpool_forward_kernel<<<blocks_for(total), kThreads, 0, ctx().stream>>>(
      static_cast<float*>(y), argmax, static_cast<const float*>(x), total, d);
  KERNEL_CHECK();
}

void CudaBackend::maxpool_backward(Format f, void* dx, const void* dy, const int32_t* argmax,
                                   int64_t N, const PoolDesc& d) {
  if (channels_last(f, "maxpool_backward"))
    return maxpool_backward_nhwc(f.elem, dx, dy, argmax, N, d);
  // dx: (N, C, H, W); dy, argmax: (N, C, OH, OW)
  const int64_t total = in_count(N, d);
  if (total <= 0) return;
  CHECK(d.stride_h > 0 && d.stride_w > 0 && d.dil_h > 0 && d.dil_w > 0,
        "maxpool_backward: stride and dilation must be positive");
  maxpool_backward_kernel<<<blocks_for(total), kThreads, 0, ctx().stream>>>(
      static_cast<float*>(dx), static_cast<const float*>(dy), argmax, total, d);
  KERNEL_CHECK();
}

}  // namespace mpicnn::gpu
