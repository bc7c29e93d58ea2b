// AvgPool2d of the CUDA backend (src/layers/avgpool2d.cpp): PyTorch's windows and divisors
// (count_include_pad, divisor_override). Own kernels, not cuDNN, for plain float NCHW tensors
// and the channels-last typed ones (--gpu-layout nhwc): sums in float, each output rounded once;
// backward gathers per input cell in the CPU's summation order, so it is deterministic without
// atomics.
#include "pool_common.cuh"
#include "typed.cuh"

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

// Element e of an (N, C, P, Q) tensor of order kNhwc (NHWC, else NCHW): its image, channel,
// row and column; plane(X, Y): where cell (0, 0) of its plane (n, c) sits in an (N, C, X, Y)
// tensor of the same order, whose cell (x, y) is then at plane + (x * Y + y) * step.
template <bool kNhwc>
struct Cell {
  int64_t n, c, p, q, C;
  __device__ __forceinline__ Cell(int64_t e, int64_t C, int64_t P, int64_t Q) : C(C) {
    int64_t t;
    if (kNhwc) c = e % C, t = e / C, q = t % Q, t /= Q, p = t % P, n = t / P;
    else q = e % Q, t = e / Q, p = t % P, t /= P, c = t % C, n = t / C;
  }
  __device__ __forceinline__ int64_t plane(int64_t X, int64_t Y) const {
    return kNhwc ? n * X * Y * C + c : (n * C + c) * X * Y;
  }
  __device__ __forceinline__ int64_t step() const { return kNhwc ? C : 1; }
};

// One thread per output element (order kNhwc): y = window sum (float, row-major order) /
// divisor, rounded once to T.
template <Elem T, bool kNhwc>
__global__ void avgpool_forward_kernel(storage_t<T>* y, const storage_t<T>* x, int64_t total,
                                       PoolDesc d) {
  const int64_t H = d.h, W = d.w, OH = d.oh, OW = d.ow;
  for (int64_t e = global_index(); e < total; e += grid_stride()) {
    const Cell<kNhwc> o(e, d.c, OH, OW);
    const storage_t<T>* xp = x + o.plane(H, W);
    const int64_t step = o.step();
    const Span sh = span(o.p, d.kh, d.stride_h, d.pad_h, H);
    const Span sw = span(o.q, d.kw, d.stride_w, d.pad_w, W);
    float sum = 0.f;
    for (int64_t h = sh.begin; h < sh.end; ++h)
      for (int64_t w = sw.begin; w < sw.end; ++w)
        sum = __fadd_rn(sum, to_float(xp[(h * W + w) * step]));
    // A window of padding only cannot arise from the output-size rule; PyTorch writes 0.
    const bool empty = sh.begin >= sh.end || sw.begin >= sw.end;
    y[e] = from_float<storage_t<T>>(empty ? 0.f : __fdiv_rn(sum, divisor(sh, sw, d)));
  }
}

// One thread per input element (order kNhwc): dx '=' sum of dy / divisor over the windows
// holding the cell, in increasing output index (the CPU's order), from 0, rounded once to T.
template <Elem T, bool kNhwc>
__global__ void avgpool_backward_kernel(storage_t<T>* dx, const storage_t<T>* dy, int64_t total,
                                        PoolDesc d) {
  const int64_t H = d.h, W = d.w, OH = d.oh, OW = d.ow;
  for (int64_t e = global_index(); e < total; e += grid_stride()) {
    const Cell<kNhwc> i(e, d.c, H, W);
    const int64_t h = i.p, w = i.q, step = i.step();
    const storage_t<T>* dyp = dy + i.plane(OH, OW);
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
        g = __fadd_rn(g, __fdiv_rn(to_float(dyp[(oh * OW + ow) * step]), divisor(sh, sw, d)));
      }
    }
    dx[e] = from_float<storage_t<T>>(g);
  }
}
}  // namespace

void CudaBackend::avgpool_forward(Format f, void* y, const void* x, int64_t N,
                                  const PoolDesc& d) {
  // y: (N, C, OH, OW), x: (N, C, H, W), both in format f
  const int64_t total = out_count(N, d);
  if (total <= 0) return;
  CHECK(d.stride_h > 0 && d.stride_w > 0, "avgpool_forward: stride must be positive");
  with_elem(f.elem, [&](auto T) {
    using S = storage_t<decltype(T)::value>;
    auto run = [&](auto kernel) {
      kernel<<<blocks_for(total), kThreads, 0, ctx().stream>>>(static_cast<S*>(y),
                                                               static_cast<const S*>(x), total, d);
      KERNEL_CHECK();
    };
    if (f.order == Order::NHWC) run(avgpool_forward_kernel<decltype(T)::value, true>);
    else run(avgpool_forward_kernel<decltype(T)::value, false>);
  });
}

void CudaBackend::avgpool_backward(Format f, void* dx, const void* dy, int64_t N,
                                   const PoolDesc& d) {
  // dx: (N, C, H, W), dy: (N, C, OH, OW), both in format f
  const int64_t total = in_count(N, d);
  if (total <= 0) return;
  CHECK(d.stride_h > 0 && d.stride_w > 0, "avgpool_backward: stride must be positive");
  with_elem(f.elem, [&](auto T) {
    using S = storage_t<decltype(T)::value>;
    auto run = [&](auto kernel) {
      kernel<<<blocks_for(total), kThreads, 0, ctx().stream>>>(static_cast<S*>(dx),
                                                               static_cast<const S*>(dy), total, d);
      KERNEL_CHECK();
    };
    if (f.order == Order::NHWC) run(avgpool_backward_kernel<decltype(T)::value, true>);
    else run(avgpool_backward_kernel<decltype(T)::value, false>);
  });
}

}  // namespace mpicnn::gpu
