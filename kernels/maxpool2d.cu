// Pooling of the CUDA backend: MaxPool2d, AvgPool2d and AdaptiveAvgPool2d forward and backward
// with the semantics of src/layers/maxpool2d.cpp, avgpool2d.cpp and adaptive_avgpool2d.cpp
// (PyTorch's windows, tie and NaN rules, divisors). Own kernels, not cuDNN; backward gathers
// per input cell in the CPU's summation order, so it is deterministic without atomics.
#include "common.cuh"

namespace mpicnn::gpu {

namespace {

__device__ __forceinline__ int64_t global_index() {
  return int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_stride() { return int64_t(gridDim.x) * blockDim.x; }

// Smallest output index o >= 0 with o * stride >= num (num may be negative).
__device__ __forceinline__ int64_t first_at_or_after(int64_t num, int64_t stride) {
  return num <= 0 ? 0 : (num + stride - 1) / stride;
}

// ---- max pooling ---------------------------------------------------------------------------

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

// ---- average pooling -----------------------------------------------------------------------

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

// ---- adaptive average pooling --------------------------------------------------------------

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

// Element counts of the input and output of N planes.
int64_t in_count(int64_t N, const PoolDesc& d) { return N * d.c * int64_t(d.h) * d.w; }
int64_t out_count(int64_t N, const PoolDesc& d) { return N * d.c * int64_t(d.oh) * d.ow; }

}  // namespace

void CudaBackend::maxpool_forward(float* y, int32_t* argmax, const float* x, int64_t N,
                                  const PoolDesc& d) {
  // y, argmax: (N, C, OH, OW); x: (N, C, H, W)
  const int64_t total = out_count(N, d);
  if (total <= 0) return;
  CHECK(d.stride_h > 0 && d.stride_w > 0 && d.dil_h > 0 && d.dil_w > 0,
        "maxpool_forward: stride and dilation must be positive");
  maxpool_forward_kernel<<<blocks_for(total), kThreads, 0, ctx().stream>>>(y, argmax, x, total,
                                                                           d);
  KERNEL_CHECK();
}

void CudaBackend::maxpool_backward(float* dx, const float* dy, const int32_t* argmax, int64_t N,
                                   const PoolDesc& d) {
  // dx: (N, C, H, W); dy, argmax: (N, C, OH, OW)
  const int64_t total = in_count(N, d);
  if (total <= 0) return;
  CHECK(d.stride_h > 0 && d.stride_w > 0 && d.dil_h > 0 && d.dil_w > 0,
        "maxpool_backward: stride and dilation must be positive");
  maxpool_backward_kernel<<<blocks_for(total), kThreads, 0, ctx().stream>>>(dx, dy, argmax,
                                                                            total, d);
  KERNEL_CHECK();
}

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

void CudaBackend::adaptive_avgpool_forward(float* y, const float* x, int64_t N,
                                           const PoolDesc& d) {
  // y: (N, C, OH, OW); x: (N, C, H, W)
  const int64_t total = out_count(N, d);
  if (total <= 0) return;
  CHECK(d.h >= 1 && d.w >= 1, "adaptive_avgpool_forward: empty input plane");
  adaptive_avgpool_forward_kernel<<<blocks_for(total), kThreads, 0, ctx().stream>>>(y, x, total,
                                                                                    d);
  KERNEL_CHECK();
}

void CudaBackend::adaptive_avgpool_backward(float* dx, const float* dy, int64_t N,
                                            const PoolDesc& d) {
  // dx: (N, C, H, W); dy: (N, C, OH, OW)
  const int64_t total = in_count(N, d);
  if (total <= 0) return;
  CHECK(d.oh >= 1 && d.ow >= 1, "adaptive_avgpool_backward: empty output plane");
  adaptive_avgpool_backward_kernel<<<blocks_for(total), kThreads, 0, ctx().stream>>>(dx, dy,
                                                                                     total, d);
  KERNEL_CHECK();
}

}  // namespace mpicnn::gpu
