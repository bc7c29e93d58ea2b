// Channels-last typed activations on the CUDA backend (--gpu-layout nhwc, core/format.h):
// format conversion (element type and NCHW <-> NHWC order), the typed fill, add, accumulate and
// ReLU, the input normalisation into NHWC, and MaxPool2d / AdaptiveAvgPool2d on NHWC tensors of
// float32, bfloat16 or float16. Each is the float kernel's math (add.cu, relu.cu, transform.cu,
// maxpool2d.cu, adaptive_avgpool2d.cu: same windows, ties, NaN rule, summation order and
// divisions) computed in float and rounded once on store, so float32 results match those
// kernels bit for bit; and a convolution's bias added to an NHWC tensor (its gradient is
// batchnorm_nhwc.cu's per-channel sums). Not BatchNorm (batchnorm_nhwc.cu) or convolutions (conv2d.cu), and not
// the plain NCHW float32 path (the files named above).
// Over 500 lines: one typed twin per float kernel named above, each short; they share the typed
// load/store helpers (typed.cuh) and the pooling windows (pool_common.cuh).
#include <cstdint>

#include "pool_common.cuh"
#include "typed.cuh"

namespace mpicnn::gpu {

namespace {

// ---- helpers ------------------------------------------------------------------------------

// Calls f(int32_t{}) when every index of the call fits in 32 bits, else f(int64_t{}): kernels
// decompose indices with divisions, which cost several times more in 64 bits.
template <typename F>
void with_index(bool fits32, F&& f) {
  if (fits32)
    f(int32_t{});
  else
    f(int64_t{});
}

template <typename I>
__device__ __forceinline__ I imin(I a, I b) {
  return a < b ? a : b;
}

// ---- elementwise (fill, add, accumulate, ReLU) --------------------------------------------

struct FillOp {
  float value;
  __device__ float operator()(float, float) const { return value; }
};
// As add.cu: one IEEE-rounded float add.
struct AddOp {
  __device__ float operator()(float a, float b) const { return __fadd_rn(a, b); }
};
// As relu.cu: `x > 0 ? x : 0` (NaN becomes 0).
struct ReluOp {
  __device__ float operator()(float x, float) const { return x > 0.f ? x : 0.f; }
};
// As relu.cu: dx = y > 0 ? dy : 0, with a = dy, b = y.
struct ReluBackwardOp {
  __device__ float operator()(float dy, float y) const { return y > 0.f ? dy : 0.f; }
};

// out[i] = op(a[i], b[i]) for i < n, with kIn inputs (0: neither is read, 1: a only). out may
// alias a or b: each element is read before it is written, by the same thread. The first nvec
// packs go 16 bytes at a time (nvec is 0 unless every pointer is 16-byte aligned), the rest
// one element at a time.
template <Elem T, int kIn, typename Op>
__global__ void map_kernel(storage_t<T>* out, const storage_t<T>* a, const storage_t<T>* b,
                           int64_t n, int64_t nvec, Op op) {
  using S = storage_t<T>;
  using P = Vec<S, kVec16<S>>;
  for (int64_t i = global_index(); i < nvec; i += grid_stride()) {
    P pa, pb, po;
    if constexpr (kIn >= 1) pa = reinterpret_cast<const P*>(a)[i];
    if constexpr (kIn >= 2) pb = reinterpret_cast<const P*>(b)[i];
#pragma unroll
    for (int k = 0; k < kVec16<S>; ++k) {
      float fa = 0.f, fb = 0.f;
      if constexpr (kIn >= 1) fa = to_float(pa.v[k]);
      if constexpr (kIn >= 2) fb = to_float(pb.v[k]);
      po.v[k] = from_float<S>(op(fa, fb));
    }
    reinterpret_cast<P*>(out)[i] = po;
  }
  for (int64_t i = nvec * kVec16<S> + global_index(); i < n; i += grid_stride()) {
    float fa = 0.f, fb = 0.f;
    if constexpr (kIn >= 1) fa = to_float(a[i]);
    if constexpr (kIn >= 2) fb = to_float(b[i]);
    out[i] = from_float<S>(op(fa, fb));
  }
}

template <int kIn, typename Op>
void launch_map(Elem t, void* out, const void* a, const void* b, int64_t n, Op op) {
  if (n <= 0) return;
  with_elem(t, [&](auto T) {
    constexpr Elem E = decltype(T)::value;
    using S = storage_t<E>;
    const bool aligned =
        aligned16(out) && (kIn < 1 || aligned16(a)) && (kIn < 2 || aligned16(b));
    const int64_t nvec = aligned ? n / kVec16<S> : 0;
    map_kernel<E, kIn, Op><<<blocks_for(nvec > 0 ? nvec : n), kThreads, 0, ctx().stream>>>(
        static_cast<S*>(out), static_cast<const S*>(a), static_cast<const S*>(b), n, nvec, op);
    KERNEL_CHECK();
  });
}

// ---- convert ------------------------------------------------------------------------------

// Same memory order: dst[i] '=' (or, with Acc, '+=') src[i] converted through float.
template <Elem D, Elem Src, bool Acc>
__global__ void convert_flat_kernel(storage_t<D>* dst, const storage_t<Src>* src, int64_t n) {
  static_assert(!Acc || D == Elem::F32, "convert: accumulation into float32 only");
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    const float v = to_float(src[i]);
    if constexpr (Acc)
      dst[i] = __fadd_rn(dst[i], v);
    else
      dst[i] = from_float<storage_t<D>>(v);
  }
}

// Tiled transpose of each of N images: dst (N, S, R) '=' src (N, R, S) (NCHW -> NHWC: R = C,
// S = H*W; NHWC -> NCHW: R = H*W, S = C), converted through float. Blocks of kTile x kTileRows
// threads walk the N * tiles_r * tiles_s tiles of kTile x kTile grid-stride; reads and writes
// are both coalesced along the tile's rows, the padded shared tile avoids bank conflicts.
constexpr int kTile = 32, kTileRows = 8;
template <Elem D, Elem Src, bool Acc>
__global__ void convert_transpose_kernel(storage_t<D>* dst, const storage_t<Src>* src,
                                         int64_t N, int64_t R, int64_t S, int64_t tiles_r,
                                         int64_t tiles_s) {
  static_assert(!Acc || D == Elem::F32, "convert: accumulation into float32 only");
  __shared__ float tile[kTile][kTile + 1];
  const int64_t per_image = tiles_r * tiles_s, total = N * per_image;
  const int tx = int(threadIdx.x), ty = int(threadIdx.y);
  // The tile index depends on the block only, so every thread reaches each __syncthreads.
  for (int64_t t = blockIdx.x; t < total; t += gridDim.x) {
    const int64_t n = t / per_image, in_image = t % per_image;
    const int64_t r0 = in_image / tiles_s * kTile, s0 = in_image % tiles_s * kTile;
    const storage_t<Src>* sp = src + n * R * S;
    for (int j = ty; j < kTile; j += kTileRows) {
      const int64_t r = r0 + j, s = s0 + tx;
      if (r < R && s < S) tile[j][tx] = to_float(sp[r * S + s]);
    }
    __syncthreads();
    storage_t<D>* dp = dst + n * R * S;
    for (int j = ty; j < kTile; j += kTileRows) {
      const int64_t s = s0 + j, r = r0 + tx;
      if (r < R && s < S) {
        const float v = tile[tx][j];
        if constexpr (Acc)
          dp[s * R + r] = __fadd_rn(dp[s * R + r], v);
        else
          dp[s * R + r] = from_float<storage_t<D>>(v);
      }
    }
    __syncthreads();  // before the next tile overwrites this one
  }
}

template <Elem D, Elem Src, bool Acc>
void launch_convert(void* dst, const void* src, int64_t N, int64_t R, int64_t S,
                    bool transpose) {
  auto* d = static_cast<storage_t<D>*>(dst);
  const auto* s = static_cast<const storage_t<Src>*>(src);
  const int64_t n = N * R * S;
  if (!transpose) {
    convert_flat_kernel<D, Src, Acc><<<blocks_for(n), kThreads, 0, ctx().stream>>>(d, s, n);
  } else {
    const int64_t tiles_r = (R + kTile - 1) / kTile, tiles_s = (S + kTile - 1) / kTile;
    const int64_t tiles = N * tiles_r * tiles_s;
    const unsigned blocks = unsigned(tiles < 65535 * 8 ? tiles : 65535 * 8);
    convert_transpose_kernel<D, Src, Acc>
        <<<blocks, dim3(kTile, kTileRows), 0, ctx().stream>>>(d, s, N, R, S, tiles_r, tiles_s);
  }
  KERNEL_CHECK();
}

// ---- input normalisation ------------------------------------------------------------------

constexpr int kMaxNormChannels = 4;  // as transform.cu
struct NormStats {
  float mean[kMaxNormChannels], std[kMaxNormChannels];
};

// out (N, H, W, C) of type T from in (N, H, W, C) uint8, one thread per output element: the
// arithmetic of transform.cu's normalize_u8_kernel, rounded once to T. Unmirrored, input and
// output share the index, so reads and writes are both coalesced.
template <Elem T, typename I>
__global__ void normalize_u8_nhwc_kernel(storage_t<T>* out, const uint8_t* in,
                                         const uint8_t* flip, int64_t total, int C, int H, int W,
                                         NormStats st) {
  for (int64_t i = global_index(); i < total; i += grid_stride()) {
    const I e = I(i);
    const int c = int(e % C);
    I t = e / C;
    const I w = t % W;
    t /= W;
    const I h = t % H;
    const I n = t / H;
    const I ws = flip && flip[n] ? W - 1 - w : w;
    const float v = float(in[((n * H + h) * W + ws) * C + c]);
    out[e] = from_float<storage_t<T>>(
        __fdiv_rn(__fsub_rn(__fdiv_rn(v, 255.0f), st.mean[c]), st.std[c]));
  }
}

// ---- pools --------------------------------------------------------------------------------

// Whether the pools' index arithmetic (element indices, window starts and ends, the adaptive
// bins' products) fits in int32.
bool pool_fits32(int64_t N, const PoolDesc& d) {
  const int64_t lim = INT32_MAX;
  return in_count(N, d) < lim && out_count(N, d) < lim &&
         (int64_t(d.oh) + 1) * d.stride_h + int64_t(d.kh) * d.dil_h + d.pad_h + d.h < lim &&
         (int64_t(d.ow) + 1) * d.stride_w + int64_t(d.kw) * d.dil_w + d.pad_w + d.w < lim &&
         (int64_t(d.h) + 1) * (int64_t(d.oh) + 1) < lim &&
         (int64_t(d.w) + 1) * (int64_t(d.ow) + 1) < lim;
}

// As pool_common.cuh's first_at_or_after, in I.
template <typename I>
__device__ __forceinline__ I first_out_at_or_after(I num, I stride) {
  return num <= 0 ? I(0) : (num + stride - 1) / stride;
}

// As maxpool2d.cu's clip_window, in I.
template <typename I>
__device__ __forceinline__ void clip_window_t(I& begin, I& end, I start, I kernel, I dilation,
                                              I size) {
  end = imin<I>(start + (kernel - 1) * dilation + 1, size);
  begin = start;
  if (begin < 0) begin += (-begin + dilation - 1) / dilation * dilation;
}

// One thread per output element e = ((n * OH + oh) * OW + ow) * C + c: y, argmax (N, OH, OW, C)
// from x (N, H, W, C). maxpool2d.cu's scan: rows then columns, `v > best` keeps the first
// maximum, a NaN always replaces best; an empty window gives -inf and -1; an all -inf window
// points at its first cell.
template <Elem T, typename I>
__global__ void maxpool_forward_nhwc_kernel(storage_t<T>* y, int32_t* argmax,
                                            const storage_t<T>* x, int64_t total, PoolDesc d) {
  const I C = d.c, H = d.h, W = d.w, OH = d.oh, OW = d.ow;
  for (int64_t i = global_index(); i < total; i += grid_stride()) {
    const I e = I(i);
    const I c = e % C;
    I t = e / C;
    const I ow = t % OW;
    t /= OW;
    const I oh = t % OH;
    const I n = t / OH;
    const storage_t<T>* xp = x + n * H * W * C + c;  // cell (h, w) at xp[(h * W + w) * C]
    I h0, h1, w0, w1;
    clip_window_t<I>(h0, h1, oh * d.stride_h - d.pad_h, d.kh, d.dil_h, H);
    clip_window_t<I>(w0, w1, ow * d.stride_w - d.pad_w, d.kw, d.dil_w, W);
    I best_i = (h0 < h1 && w0 < w1) ? h0 * W + w0 : I(-1);
    float best = -INFINITY;
    for (I h = h0; h < h1; h += d.dil_h)
      for (I w = w0; w < w1; w += d.dil_w) {
        const float v = to_float(xp[(h * W + w) * C]);
        if (v > best || isnan(v)) best = v, best_i = h * W + w;
      }
    y[e] = from_float<storage_t<T>>(best);
    argmax[e] = int32_t(best_i);
  }
}

// One thread per input element e = ((n * H + h) * W + w) * C + c: dx '=' the sum of dy over
// the outputs of the same image and channel whose argmax is this cell, in increasing output
// index (oh, ow), from 0, in float (maxpool2d.cu's gather).
template <Elem T, typename I>
__global__ void maxpool_backward_nhwc_kernel(storage_t<T>* dx, const storage_t<T>* dy,
                                             const int32_t* argmax, int64_t total, PoolDesc d) {
  const I C = d.c, H = d.h, W = d.w, OH = d.oh, OW = d.ow;
  const I span_h = I(d.kh - 1) * d.dil_h, span_w = I(d.kw - 1) * d.dil_w;
  for (int64_t i = global_index(); i < total; i += grid_stride()) {
    const I e = I(i);
    const I c = e % C;
    I t = e / C;
    const I w = t % W;
    t /= W;
    const I h = t % H;
    const I n = t / H;
    const int32_t cell = int32_t(h * W + w);
    const I plane = n * OH * OW * C + c;  // output (oh, ow) at plane + (oh * OW + ow) * C
    const storage_t<T>* dyp = dy + plane;
    const int32_t* ap = argmax + plane;
    const I oh0 = first_out_at_or_after<I>(h + d.pad_h - span_h, d.stride_h);
    const I oh1 = imin<I>((h + d.pad_h) / d.stride_h, OH - 1);
    const I ow0 = first_out_at_or_after<I>(w + d.pad_w - span_w, d.stride_w);
    const I ow1 = imin<I>((w + d.pad_w) / d.stride_w, OW - 1);
    float g = 0.f;
    for (I oh = oh0; oh <= oh1; ++oh)
      for (I ow = ow0; ow <= ow1; ++ow) {
        const I o = (oh * OW + ow) * C;
        if (ap[o] == cell) g = __fadd_rn(g, to_float(dyp[o]));
      }
    dx[e] = from_float<storage_t<T>>(g);
  }
}

// Bin i of `out` over `in` cells: [floor(i * in / out), ceil((i + 1) * in / out)).
template <typename I>
__device__ __forceinline__ I bin_begin_t(I i, I out, I in) {
  return i * in / out;
}
template <typename I>
__device__ __forceinline__ I bin_end_t(I i, I out, I in) {
  return ((i + 1) * in + out - 1) / out;
}

// One thread per output element (NHWC order): y = bin sum / bin height / bin width, summed in
// adaptive_avgpool2d.cu's order.
template <Elem T, typename I>
__global__ void adaptive_avgpool_forward_nhwc_kernel(storage_t<T>* y, const storage_t<T>* x,
                                                     int64_t total, PoolDesc d) {
  const I C = d.c, H = d.h, W = d.w, OH = d.oh, OW = d.ow;
  for (int64_t i = global_index(); i < total; i += grid_stride()) {
    const I e = I(i);
    const I c = e % C;
    I t = e / C;
    const I ow = t % OW;
    t /= OW;
    const I oh = t % OH;
    const I n = t / OH;
    const storage_t<T>* xp = x + n * H * W * C + c;
    const I h0 = bin_begin_t<I>(oh, OH, H), h1 = bin_end_t<I>(oh, OH, H);
    const I w0 = bin_begin_t<I>(ow, OW, W), w1 = bin_end_t<I>(ow, OW, W);
    float sum = 0.f;
    for (I h = h0; h < h1; ++h)
      for (I w = w0; w < w1; ++w) sum = __fadd_rn(sum, to_float(xp[(h * W + w) * C]));
    y[e] = from_float<storage_t<T>>(__fdiv_rn(__fdiv_rn(sum, float(h1 - h0)), float(w1 - w0)));
  }
}

// One thread per input element (NHWC order): dx '=' sum of dy / bin height / bin width over
// the bins holding the cell, in increasing output index, from 0 (adaptive_avgpool2d.cu).
template <Elem T, typename I>
__global__ void adaptive_avgpool_backward_nhwc_kernel(storage_t<T>* dx, const storage_t<T>* dy,
                                                      int64_t total, PoolDesc d) {
  const I C = d.c, H = d.h, W = d.w, OH = d.oh, OW = d.ow;
  for (int64_t i = global_index(); i < total; i += grid_stride()) {
    const I e = I(i);
    const I c = e % C;
    I t = e / C;
    const I w = t % W;
    t /= W;
    const I h = t % H;
    const I n = t / H;
    const storage_t<T>* dyp = dy + n * OH * OW * C + c;
    const I oh0 = h * OH / H, oh1 = imin<I>(((h + 1) * OH + H - 1) / H - 1, OH - 1);
    const I ow0 = w * OW / W, ow1 = imin<I>(((w + 1) * OW + W - 1) / W - 1, OW - 1);
    float g = 0.f;
    for (I oh = oh0; oh <= oh1; ++oh) {
      const I h0 = bin_begin_t<I>(oh, OH, H), h1 = bin_end_t<I>(oh, OH, H);
      if (h < h0 || h >= h1) continue;  // defensive: the range above is exact
      for (I ow = ow0; ow <= ow1; ++ow) {
        const I w0 = bin_begin_t<I>(ow, OW, W), w1 = bin_end_t<I>(ow, OW, W);
        if (w < w0 || w >= w1) continue;
        g = __fadd_rn(g, __fdiv_rn(__fdiv_rn(to_float(dyp[(oh * OW + ow) * C]), float(h1 - h0)),
                                   float(w1 - w0)));
      }
    }
    dx[e] = from_float<storage_t<T>>(g);
  }
}

// ---- convolution bias on NHWC tensors -------------------------------------------------------

// y (rows, C) of type T: y[r, c] '=' y[r, c] + bias[c] (float), rounded once.
template <Elem T>
__global__ void add_bias_typed_kernel(storage_t<T>* y, const float* bias, int64_t total,
                                     int64_t C) {
  for (int64_t e = global_index(); e < total; e += grid_stride())
    y[e] = from_float<storage_t<T>>(__fadd_rn(to_float(y[e]), bias[e % C]));
}

}  // namespace

// ---- elementwise --------------------------------------------------------------------------

void CudaBackend::fill_typed(Elem t, void* x, float value, int64_t n) {
  launch_map<0>(t, x, nullptr, nullptr, n, FillOp{value});
}

void CudaBackend::add_typed(Elem t, void* out, const void* a, const void* b, int64_t n) {
  launch_map<2>(t, out, a, b, n, AddOp{});
}

void CudaBackend::accumulate_typed(Elem t, void* dst, const void* src, int64_t n) {
  launch_map<2>(t, dst, dst, src, n, AddOp{});
}

void CudaBackend::relu_forward_typed(Elem t, void* y, const void* x, int64_t n) {
  launch_map<1>(t, y, x, nullptr, n, ReluOp{});
}

void CudaBackend::relu_backward_typed(Elem t, void* dx, const void* dy, const void* y,
                                      int64_t n) {
  launch_map<2>(t, dx, dy, y, n, ReluBackwardOp{});
}

// ---- convert ------------------------------------------------------------------------------

void CudaBackend::convert(void* dst, Format df, const void* src, Format sf, int64_t N,
                          int64_t C, int64_t H, int64_t W, bool accumulate) {
  CHECK(!accumulate || df.elem == Elem::F32, "convert: accumulating into ", format_name(df),
        " (float32 only)");
  const int64_t HW = H * W, n = N * C * HW;
  if (n <= 0) return;
  // With one channel or one cell per plane the two orders are the same memory.
  const bool transpose = df.order != sf.order && C > 1 && HW > 1;
  if (!transpose && !accumulate && df.elem == sf.elem) {
    const size_t bytes = size_t(n) * (df.elem == Elem::F32 ? sizeof(float) : 2);
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ctx().stream));
    return;
  }
  // Each image as a matrix (R, S) read row by row: (C, HW) in NCHW, (HW, C) in NHWC.
  const bool src_nchw = sf.order == Order::NCHW;
  const int64_t R = transpose ? (src_nchw ? C : HW) : 1;
  const int64_t S = transpose ? (src_nchw ? HW : C) : C * HW;
  if (accumulate) {
    with_elem(sf.elem, [&](auto Src) {
      launch_convert<Elem::F32, decltype(Src)::value, true>(dst, src, N, R, S, transpose);
    });
  } else {
    with_elem(df.elem, [&](auto D) {
      with_elem(sf.elem, [&](auto Src) {
        launch_convert<decltype(D)::value, decltype(Src)::value, false>(dst, src, N, R, S,
                                                                        transpose);
      });
    });
  }
}

// ---- input normalisation ------------------------------------------------------------------

void CudaBackend::normalize_u8_nhwc(Elem t, void* out, const uint8_t* in, const uint8_t* flip,
                                    int64_t N, int C, int H, int W, const float* mean,
                                    const float* std) {
  CHECK(C >= 1 && C <= kMaxNormChannels, "normalize_u8_nhwc: ", C, " channels (at most ",
        kMaxNormChannels, ")");
  const int64_t total = N * C * H * W;
  if (total <= 0) return;
  NormStats st{};
  for (int c = 0; c < C; ++c) st.mean[c] = mean[c], st.std[c] = std[c];
  with_elem(t, [&](auto T) {
    with_index(total < INT32_MAX, [&](auto index) {
      normalize_u8_nhwc_kernel<decltype(T)::value, decltype(index)>
          <<<blocks_for(total), kThreads, 0, ctx().stream>>>(
              static_cast<storage_t<decltype(T)::value>*>(out), in, flip, total, C, H, W, st);
      KERNEL_CHECK();
    });
  });
}

// ---- pools --------------------------------------------------------------------------------

void CudaBackend::maxpool_forward_nhwc(Elem t, void* y, int32_t* argmax, const void* x,
                                       int64_t N, const PoolDesc& d) {
  // y, argmax: (N, OH, OW, C); x: (N, H, W, C)
  const int64_t total = out_count(N, d);
  if (total <= 0) return;
  CHECK(d.stride_h > 0 && d.stride_w > 0 && d.dil_h > 0 && d.dil_w > 0,
        "maxpool_forward_nhwc: stride and dilation must be positive");
  with_elem(t, [&](auto T) {
    using S = storage_t<decltype(T)::value>;
    with_index(pool_fits32(N, d), [&](auto index) {
      maxpool_forward_nhwc_kernel<decltype(T)::value, decltype(index)>
          <<<blocks_for(total), kThreads, 0, ctx().stream>>>(
              static_cast<S*>(y), argmax, static_cast<const S*>(x), total, d);
      KERNEL_CHECK();
    });
  });
}

void CudaBackend::maxpool_backward_nhwc(Elem t, void* dx, const void* dy, const int32_t* argmax,
                                        int64_t N, const PoolDesc& d) {
  // dx: (N, H, W, C); dy, argmax: (N, OH, OW, C)
  const int64_t total = in_count(N, d);
  if (total <= 0) return;
  CHECK(d.stride_h > 0 && d.stride_w > 0 && d.dil_h > 0 && d.dil_w > 0,
        "maxpool_backward_nhwc: stride and dilation must be positive");
  with_elem(t, [&](auto T) {
    using S = storage_t<decltype(T)::value>;
    with_index(pool_fits32(N, d), [&](auto index) {
      maxpool_backward_nhwc_kernel<decltype(T)::value, decltype(index)>
          <<<blocks_for(total), kThreads, 0, ctx().stream>>>(
              static_cast<S*>(dx), static_cast<const S*>(dy), argmax, total, d);
      KERNEL_CHECK();
    });
  });
}

void CudaBackend::adaptive_avgpool_forward_nhwc(Elem t, void* y, const void* x, int64_t N,
                                                const PoolDesc& d) {
  // y: (N, OH, OW, C); x: (N, H, W, C)
  const int64_t total = out_count(N, d);
  if (total <= 0) return;
  CHECK(d.h >= 1 && d.w >= 1, "adaptive_avgpool_forward_nhwc: empty input plane");
  with_elem(t, [&](auto T) {
    using S = storage_t<decltype(T)::value>;
    with_index(pool_fits32(N, d), [&](auto index) {
      adaptive_avgpool_forward_nhwc_kernel<decltype(T)::value, decltype(index)>
          <<<blocks_for(total), kThreads, 0, ctx().stream>>>(
              static_cast<S*>(y), static_cast<const S*>(x), total, d);
      KERNEL_CHECK();
    });
  });
}

void CudaBackend::adaptive_avgpool_backward_nhwc(Elem t, void* dx, const void* dy, int64_t N,
                                                 const PoolDesc& d) {
  // dx: (N, H, W, C); dy: (N, OH, OW, C)
  const int64_t total = in_count(N, d);
  if (total <= 0) return;
  CHECK(d.oh >= 1 && d.ow >= 1, "adaptive_avgpool_backward_nhwc: empty output plane");
  with_elem(t, [&](auto T) {
    using S = storage_t<decltype(T)::value>;
    with_index(pool_fits32(N, d), [&](auto index) {
      adaptive_avgpool_backward_nhwc_kernel<decltype(T)::value, decltype(index)>
          <<<blocks_for(total), kThreads, 0, ctx().stream>>>(
              static_cast<S*>(dx), static_cast<const S*>(dy), total, d);
      KERNEL_CHECK();
    });
  });
}

// ---- convolution bias ---------------------------------------------------------------------

void CudaBackend::add_bias_typed(Elem t, void* y, const float* bias, int64_t rows, int64_t C) {
  const int64_t total = rows * C;
  if (total <= 0) return;
  with_elem(t, [&](auto T) {
    add_bias_typed_kernel<decltype(T)::value><<<blocks_for(total), kThreads, 0, ctx().stream>>>(
        static_cast<storage_t<decltype(T)::value>*>(y), bias, total, C);
    KERNEL_CHECK();
  });
}

}  // namespace mpicnn::gpu
