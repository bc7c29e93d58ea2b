// BatchNorm2d of the CUDA backend on channels-last typed activations (--gpu-layout nhwc,
// core/format.h): batchnorm_forward_nhwc / batchnorm_backward_nhwc, the contract and math of
// batchnorm_forward / batchnorm_backward (kernels/batchnorm.cu) on NHWC tensors of float32,
// bfloat16 or float16. Element (row m, channel c) is at m * C + c, with M = N * HW rows (the
// pixels). Loads widen to float, the statistics are summed in double with the per-element math
// of layers/batchnorm_math.h, and each output element (y, dx) is rounded once to its type.
// Parameters, statistics and their gradients stay float. Deterministic (fixed-order sums), but
// not bit-identical to batchnorm.cu's NCHW kernels: the order of the sums differs.
// Not the NCHW float32 kernels (batchnorm.cu) nor cuDNN's batch norm. The same per-channel sums
// also give a convolution's bias gradient on this path (conv_bias_grad).
// Reductions: blocks of kCols consecutive channels x kLanes row lanes, so a warp reads
// kCols consecutive channels of one row (coalesced); each channel's rows are split over
// S blocks (partial sums in the context's scratch, added in a fixed order by the next kernel).
// Over 500 lines: forward, backward and the bias gradient share the reduction's block layout
// and its two-pass fixed-order partial sums; apart, each would restate them.
#include <cstdint>
#include <type_traits>

#include "layers/batchnorm_math.h"
#include "typed.cuh"

namespace mpicnn::gpu {

namespace {

// Reduction blocks: kCols channels (threadIdx.x, one warp) x kLanes row lanes (threadIdx.y, a
// power of two for the tree over the lanes).
constexpr int kCols = 32, kLanes = 16;
constexpr int kStatThreads = kCols * kLanes;
// Channels per pass (grid y holds ceil(cnt / kCols) blocks), and most blocks one channel's rows
// are split over (grid x). A pass keeps two partial sums per (split, channel) in ctx().scratch,
// and in backward the dx pass's kDxCoefs coefficients per channel after them.
constexpr int64_t kChunkChannels = 4096, kMaxSplits = 256;
// The dx pass's per-channel coefficients, each an array of cnt floats at coef + i * cnt.
enum DxCoef { kMean, kInvstd, kK, kMdy, kMdyx, kDxCoefs };
static_assert((kChunkChannels + kCols - 1) / kCols <= 65535, "grid y");
static_assert((int64_t(Context::kScratchBytes) / kChunkChannels - kDxCoefs * int64_t(sizeof(float))) /
                      (2 * int64_t(sizeof(double))) >=
                  1,
              "the scratch holds a chunk's partial sums");


// Row splits S for chunks of at most cnt channels and M rows: about 4 blocks per SM in all
// (rounded down: one more split would start a second, nearly empty wave), each lane with at
// least 4 rows, and the partial sums (2 * cnt * S doubles) and the dx coefficients
// (kDxCoefs * cnt floats) within the scratch.
int64_t splits_for(int64_t cnt, int64_t M) {
  const int64_t groups = (cnt + kCols - 1) / kCols;
  const int64_t want = 4 * int64_t(ctx().sm_count) / groups;
  const int64_t by_size = M / (int64_t(kLanes) * 4);
  const int64_t by_scratch =
      (int64_t(Context::kScratchBytes) / cnt - kDxCoefs * int64_t(sizeof(float))) /
      (2 * int64_t(sizeof(double)));
  int64_t s = want < by_size ? want : by_size;
  s = s < kMaxSplits ? s : kMaxSplits;
  s = s < by_scratch ? s : by_scratch;
  return s < 1 ? 1 : s;
}

// Sum over the kLanes lanes (threadIdx.y) of each column (threadIdx.x) of one double per
// thread, in a fixed tree order (same bits every run); every thread of the column gets its
// column's sum. Every thread of the block must call it; buf is free to reuse on return.
__device__ double column_sum(double v, double (*buf)[kCols]) {
  const int tx = threadIdx.x, ty = threadIdx.y;
  buf[ty][tx] = v;
  __syncthreads();
  for (int h = kLanes / 2; h > 0; h >>= 1) {
    if (ty < h) buf[ty][tx] += buf[ty + h][tx];
    __syncthreads();
  }
  const double r = buf[0][tx];
  __syncthreads();
  return r;
}

// Two column sums with one pass of barriers (each as column_sum alone).
__device__ void column_sum2(double& a, double& b, double (*buf_a)[kCols],
                            double (*buf_b)[kCols]) {
  const int tx = threadIdx.x, ty = threadIdx.y;
  buf_a[ty][tx] = a;
  buf_b[ty][tx] = b;
  __syncthreads();
  for (int h = kLanes / 2; h > 0; h >>= 1) {
    if (ty < h) buf_a[ty][tx] += buf_a[ty + h][tx], buf_b[ty][tx] += buf_b[ty + h][tx];
    __syncthreads();
  }
  a = buf_a[0][tx];
  b = buf_b[0][tx];
  __syncthreads();
}

// Channel j's total of the S partial sums part[s * cnt + j] (0 where !valid): lane ty adds
// s = ty, ty + kLanes, ... in order, then column_sum. Always the same order for the same S, so
// every kernel that calls it (with the block shape kCols x kLanes) gets the same bits.
__device__ double channel_total(const double* part, int64_t j, bool valid, int64_t S,
                                int64_t cnt, double (*buf)[kCols]) {
  double t = 0;
  if (valid)
    for (int64_t s = threadIdx.y; s < S; s += kLanes) t += part[s * cnt + j];
  return column_sum(t, buf);
}

// Calls f(offset) for each row of this block's split of the rows that lane threadIdx.y takes,
// in increasing order: block x = s covers rows [s * rows, min((s + 1) * rows, M)), lane ty
// its rows ty, ty + kLanes, ... of that range; offset = m * C + c.
template <typename F>
__device__ __forceinline__ void for_rows(int64_t c, int64_t M, int64_t C, int64_t rows, F f) {
  const int64_t begin = int64_t(blockIdx.x) * rows;
  const int64_t end = begin + rows < M ? begin + rows : M;
  const int64_t step = int64_t(kLanes) * C;
  int64_t k = (begin + threadIdx.y) * C + c;
#pragma unroll 4
  for (int64_t m = begin + threadIdx.y; m < end; m += kLanes, k += step) f(k);
}

// Grid (S, ceil(cnt / kCols)), blocks (kCols, kLanes): block (s, g) sums its split of channel
// c0 + j, j = g * kCols + threadIdx.x < cnt, into sum[s * cnt + j] (double).
template <Elem E>
__global__ void __launch_bounds__(kStatThreads)
    nhwc_partial_sum_kernel(double* sum, const storage_t<E>* x, int64_t M, int64_t C,
                            int64_t c0, int64_t cnt, int64_t rows) {
  __shared__ double buf[kLanes][kCols];
  const int64_t j = int64_t(blockIdx.y) * kCols + threadIdx.x;
  const bool valid = j < cnt;
  double s = 0;
  if (valid) for_rows(c0 + j, M, C, rows, [&](int64_t k) { s += double(to_float(x[k])); });
  s = column_sum(s, buf);
  if (valid && threadIdx.y == 0) sum[int64_t(blockIdx.x) * cnt + j] = s;
}

// Grid ceil(cnt / kCols), blocks (kCols, kLanes): out[c0 + j] += the total of channel c0 + j's
// partial sums (a convolution's bias gradient from nhwc_partial_sum_kernel over dy).
__global__ void __launch_bounds__(kStatThreads)
    nhwc_add_totals_kernel(float* out, const double* sum, int64_t S, int64_t c0, int64_t cnt) {
  __shared__ double buf[kLanes][kCols];
  const int64_t j = int64_t(blockIdx.x) * kCols + threadIdx.x;
  const bool valid = j < cnt;
  const double t = channel_total(sum, j, valid, S, cnt, buf);
  if (valid && threadIdx.y == 0) out[c0 + j] = __fadd_rn(out[c0 + j], float(t));
}

// As nhwc_partial_sum_kernel: the squared deviations from the channel's mean (from the partial
// sums, as the CPU's two passes), summed into ss[s * cnt + j].
template <Elem E>
__global__ void __launch_bounds__(kStatThreads)
    nhwc_partial_ss_kernel(double* ss, const double* sum, const storage_t<E>* x, int64_t M,
                           int64_t C, int64_t c0, int64_t cnt, int64_t rows) {
  __shared__ double buf[kLanes][kCols];
  const int64_t j = int64_t(blockIdx.y) * kCols + threadIdx.x, S = gridDim.x;
  const bool valid = j < cnt;
  const double mu = channel_total(sum, j, valid, S, cnt, buf) / double(M);
  double v = 0;
  if (valid)
    for_rows(c0 + j, M, C, rows, [&](int64_t k) {
      const double t = double(to_float(x[k])) - mu;
      v = fma(t, t, v);  // GCC contracts the CPU's pss += t * t
    });
  v = column_sum(v, buf);
  if (valid && threadIdx.y == 0) ss[int64_t(blockIdx.x) * cnt + j] = v;
}

// Grid ceil(cnt / kCols), blocks (kCols, kLanes): channel c0 + j's mean and biased variance
// (used to normalise) from the S partial sums; writes save_mean/save_invstd and updates
// running_mean/var (C).
__global__ void __launch_bounds__(kStatThreads)
    nhwc_stats_finish_kernel(float* save_mean, float* save_invstd, float* running_mean,
                             float* running_var, const double* sum, const double* ss, int64_t S,
                             int64_t c0, int64_t cnt, int64_t M, float eps, float momentum) {
  __shared__ double buf[kLanes][kCols];
  const int64_t j = int64_t(blockIdx.x) * kCols + threadIdx.x;
  const bool valid = j < cnt;
  const double sum_c = channel_total(sum, j, valid, S, cnt, buf);
  const double ss_c = channel_total(ss, j, valid, S, cnt, buf);
  if (!valid || threadIdx.y != 0) return;
  const int64_t c = c0 + j;
  bn_math::finish_stats(save_mean[c], save_invstd[c], running_mean[c], running_var[c], sum_c,
                        ss_c, double(M), eps, momentum);
}

// Eval mode: the running stats become save_mean/save_invstd (C), so backward reads one pair.
__global__ void nhwc_eval_stats_kernel(float* save_mean, float* save_invstd,
                                       const float* running_mean, const float* running_var,
                                       int64_t C, float eps) {
  for (int64_t c = global_index(); c < C; c += grid_stride()) {
    save_mean[c] = running_mean[c];
    save_invstd[c] = bn_math::eval_invstd(running_var[c], eps);
  }
}


// scale[c] = weight * invstd and shift[c] = bias - mean * scale (bn_math), for the apply pass
// to read V channels' worth at once.
__global__ void nhwc_scale_shift_kernel(float* scale, float* shift, const float* weight,
                                        const float* bias, const float* save_mean,
                                        const float* save_invstd, int64_t C) {
  for (int64_t c = global_index(); c < C; c += grid_stride()) {
    const float sc = bn_math::scale(weight[c], save_invstd[c]);
    scale[c] = sc;
    shift[c] = bn_math::shift(bias[c], save_mean[c], sc);
  }
}

// V consecutive floats from a[i * V] (V-float aligned): one vector load (V > 1), so that a warp
// whose threads hold different channels reads their parameters in a few transactions, not V.
template <int V>
__device__ __forceinline__ Vec<float, V> load_vec(const float* a, int64_t i) {
  return reinterpret_cast<const Vec<float, V>*>(a)[i];
}

// y (M, C) = x * scale + shift (scale, shift from nhwc_scale_shift_kernel; bn_math::apply),
// + residual r (kResidual), then the ReLU (kRelu), rounded once to S. V elements per thread
// step (C % V == 0 and the pointers V-element aligned, so a vector lies in one row, and scale
// and shift V-float aligned); npacks = M * C / V. y may alias x: one thread reads then writes.
// I: uint32_t when M * C < 2^31 (64-bit division is emulated), else int64_t.
template <Elem E, typename I, int V, bool kResidual, bool kRelu>
__global__ void nhwc_apply_kernel(storage_t<E>* y, const storage_t<E>* x,
                                  const storage_t<E>* r, const float* scale, const float* shift,
                                  I C, I npacks) {
  using S = storage_t<E>;
  using P = Vec<S, V>;
  for (I p = I(blockIdx.x) * blockDim.x + threadIdx.x; p < npacks;
       p += I(gridDim.x) * blockDim.x) {
    const I c0 = (p * I(V)) % C;
    const P xv = reinterpret_cast<const P*>(x)[p];
    P rv{};
    if constexpr (kResidual) rv = reinterpret_cast<const P*>(r)[p];
    const Vec<float, V> sc = load_vec<V>(scale, c0 / I(V)), sh = load_vec<V>(shift, c0 / I(V));
    P yv;
#pragma unroll
    for (int v = 0; v < V; ++v)
      yv.v[v] = from_float<S>(bn_math::apply<kResidual, kRelu>(
          to_float(xv.v[v]), sc.v[v], sh.v[v], kResidual ? to_float(rv.v[v]) : 0.f));
    reinterpret_cast<P*>(y)[p] = yv;
  }
}

// Grid (S, ceil(cnt / kCols)), blocks (kCols, kLanes): block (s, g) sums g and g * xhat over its
// split of channel c0 + j in double (g * xhat rounded to float first, as on the CPU), into
// a[s * cnt + j], b[s * cnt + j]; g is dy, masked by the fused ReLU's output y > 0 with kRelu
// (bn_math::grad).
template <Elem E, bool kRelu>
__global__ void __launch_bounds__(kStatThreads)
    nhwc_backward_partial_kernel(double* a_part, double* b_part, const storage_t<E>* dy,
                                 const storage_t<E>* y, const storage_t<E>* x,
                                 const float* save_mean, const float* save_invstd, int64_t M,
                                 int64_t C, int64_t c0, int64_t cnt, int64_t rows) {
  __shared__ double buf_a[kLanes][kCols];
  __shared__ double buf_b[kLanes][kCols];
  const int64_t j = int64_t(blockIdx.y) * kCols + threadIdx.x;
  const bool valid = j < cnt;
  double a = 0, b = 0;
  if (valid) {
    const float mean = save_mean[c0 + j], invstd = save_invstd[c0 + j];
    for_rows(c0 + j, M, C, rows, [&](int64_t k) {
      const float d = bn_math::grad<kRelu>(to_float(dy[k]), kRelu ? to_float(y[k]) : 0.f);
      a += double(d);
      b += double(bn_math::mul(d, bn_math::xhat(to_float(x[k]), mean, invstd)));
    });
  }
  column_sum2(a, b, buf_a, buf_b);
  if (valid && threadIdx.y == 0) {
    a_part[int64_t(blockIdx.x) * cnt + j] = a;
    b_part[int64_t(blockIdx.x) * cnt + j] = b;
  }
}

// Grid ceil(cnt / kCols), blocks (kCols, kLanes): dbias/dweight (C) '+=' sum(g), sum(g * xhat)
// of channel c0 + j. With coef, stores for the dx pass channel j's mean, invstd, k = weight *
// invstd (bn_math::mul), mean(g) and mean(g * xhat) (both 0 in eval) as DxCoef says.
__global__ void __launch_bounds__(kStatThreads)
    nhwc_backward_finish_kernel(float* dweight, float* dbias, float* coef, const float* weight,
                                const float* save_mean, const float* save_invstd,
                                const double* a_part, const double* b_part, int64_t S,
                                int64_t c0, int64_t cnt, int64_t M, bool training) {
  __shared__ double buf[kLanes][kCols];
  const int64_t j = int64_t(blockIdx.x) * kCols + threadIdx.x;
  const bool valid = j < cnt;
  const double sdy = channel_total(a_part, j, valid, S, cnt, buf);
  const double sdyx = channel_total(b_part, j, valid, S, cnt, buf);
  if (!valid || threadIdx.y != 0) return;
  const int64_t c = c0 + j;
  if (dweight) {  // null for frozen parameters
    dbias[c] = __fadd_rn(dbias[c], float(sdy));
    dweight[c] = __fadd_rn(dweight[c], float(sdyx));
  }
  if (coef) {
    coef[kMean * cnt + j] = save_mean[c];
    coef[kInvstd * cnt + j] = save_invstd[c];
    coef[kK * cnt + j] = bn_math::mul(weight[c], save_invstd[c]);
    coef[kMdy * cnt + j] = training ? float(sdy / double(M)) : 0.f;
    coef[kMdyx * cnt + j] = training ? float(sdyx / double(M)) : 0.f;
  }
}

// dx (M, C) for channels [c0, c0 + cnt) = k * (g - mdy - xhat * mdyx) ('=', bn_math::dx), g as
// in nhwc_backward_partial_kernel, the channel's coefficients from coef (DxCoef), rounded once
// to S. V elements per thread step (cnt, C and c0 multiples of V, the pointers V-element
// aligned, coef V-float aligned); npacks = M * cnt / V. dx may alias dy: one thread reads then
// writes each element, and the reductions over dy finished in the previous kernels. I as in
// nhwc_apply_kernel (uint32_t when M * C < 2^31).
template <Elem E, typename I, int V, bool kRelu>
__global__ void nhwc_backward_dx_kernel(storage_t<E>* dx, const storage_t<E>* dy,
                                        const storage_t<E>* y, const storage_t<E>* x,
                                        const float* coef, I C, I c0, I cnt, I npacks) {
  using S = storage_t<E>;
  using P = Vec<S, V>;
  for (I p = I(blockIdx.x) * blockDim.x + threadIdx.x; p < npacks;
       p += I(gridDim.x) * blockDim.x) {
    const I e = p * I(V);  // element e = m * cnt + j0 of the chunk
    const I m = e / cnt, j0 = e - m * cnt;
    const I q = (m * C + c0 + j0) / I(V);  // its vector in the tensor
    const P dyv = reinterpret_cast<const P*>(dy)[q];
    const P xv = reinterpret_cast<const P*>(x)[q];
    P yv{};
    if constexpr (kRelu) yv = reinterpret_cast<const P*>(y)[q];
    const I jv = j0 / I(V);
    const Vec<float, V> mean = load_vec<V>(coef + kMean * cnt, jv);
    const Vec<float, V> invstd = load_vec<V>(coef + kInvstd * cnt, jv);
    const Vec<float, V> k = load_vec<V>(coef + kK * cnt, jv);
    const Vec<float, V> mdy = load_vec<V>(coef + kMdy * cnt, jv);
    const Vec<float, V> mdyx = load_vec<V>(coef + kMdyx * cnt, jv);
    P dxv;
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const float g = bn_math::grad<kRelu>(to_float(dyv.v[v]), kRelu ? to_float(yv.v[v]) : 0.f);
      const float xh = bn_math::xhat(to_float(xv.v[v]), mean.v[v], invstd.v[v]);
      dxv.v[v] = from_float<S>(bn_math::dx(g, xh, k.v[v], mdy.v[v], mdyx.v[v]));
    }
    reinterpret_cast<P*>(dx)[q] = dxv;
  }
}

}  // namespace

void CudaBackend::batchnorm_forward_nhwc(Elem t, void* y, float* save_mean, float* save_invstd,
                                         float* running_mean, float* running_var, const void* x,
                                         const float* weight, const float* bias,
                                         const void* residual, bool relu, int64_t N, int64_t C,
                                         int64_t HW, float eps, float momentum, bool training) {
  // y, x, residual: (N, HW, C) of type t; save_*, running_*, weight, bias: (C) float
  if (C <= 0) return;
  const cudaStream_t st = ctx().stream;
  const int64_t M = N * HW;
  if (training) {
    CHECK(M > 1, "batchnorm_forward_nhwc: training needs more than one value per channel, got ",
          "N=", N, ", HW=", HW);
    const int64_t S = splits_for(C < kChunkChannels ? C : kChunkChannels, M);
    const int64_t rows = (M + S - 1) / S;
    double* sum = reinterpret_cast<double*>(ctx().scratch);  // (S, cnt), then ss (S, cnt)
    for (int64_t c0 = 0; c0 < C; c0 += kChunkChannels) {
      const int64_t cnt = C - c0 < kChunkChannels ? C - c0 : kChunkChannels;
      const int64_t groups = (cnt + kCols - 1) / kCols;
      double* ss = sum + cnt * S;
      const dim3 grid(static_cast<unsigned>(S), static_cast<unsigned>(groups));
      const dim3 block(kCols, kLanes);
      with_elem(t, [&](auto T) {
        constexpr Elem E = decltype(T)::value;
        const auto* xs = static_cast<const storage_t<E>*>(x);
        nhwc_partial_sum_kernel<E><<<grid, block, 0, st>>>(sum, xs, M, C, c0, cnt, rows);
        KERNEL_CHECK();
        nhwc_partial_ss_kernel<E><<<grid, block, 0, st>>>(ss, sum, xs, M, C, c0, cnt, rows);
        KERNEL_CHECK();
      });
      nhwc_stats_finish_kernel<<<static_cast<unsigned>(groups), block, 0, st>>>(
          save_mean, save_invstd, running_mean, running_var, sum, ss, S, c0, cnt, M, eps,
          momentum);
      KERNEL_CHECK();
    }
  } else {
    nhwc_eval_stats_kernel<<<blocks_for(C), kThreads, 0, st>>>(save_mean, save_invstd,
                                                               running_mean, running_var, C, eps);
    KERNEL_CHECK();
  }
  const int64_t total = M * C;
  if (total <= 0) return;
  // scale and shift in the scratch (the statistics' partial sums are spent), each array
  // starting on 32 bytes, the widest vector the apply pass reads.
  const int64_t cpad = (C + 7) / 8 * 8;
  CHECK(2 * cpad * int64_t(sizeof(float)) <= int64_t(Context::kScratchBytes),
        "batchnorm_forward_nhwc: ", C, " channels exceed the scratch");
  float* scale = ctx().scratch;
  float* shift = scale + cpad;
  nhwc_scale_shift_kernel<<<blocks_for(C), kThreads, 0, st>>>(scale, shift, weight, bias,
                                                              save_mean, save_invstd, C);
  KERNEL_CHECK();
  with_elem(t, [&](auto T) {
    constexpr Elem E = decltype(T)::value;
    using S = storage_t<E>;
    constexpr int V = kVec16<S>;
    const bool vec = C % V == 0 && aligned16(y) && aligned16(x) &&
                     (residual == nullptr || aligned16(residual));
    auto* ys = static_cast<S*>(y);
    const auto* xs = static_cast<const S*>(x);
    const auto* rs = static_cast<const S*>(residual);
    with_flags(residual != nullptr, relu, [&](auto res, auto rl) {
      constexpr bool kRes = decltype(res)::value, kRelu = decltype(rl)::value;
      if (vec) {
        const int64_t npacks = total / V;
        if (total < kIndex32)
          nhwc_apply_kernel<E, uint32_t, V, kRes, kRelu>
              <<<blocks_for(npacks), kThreads, 0, st>>>(ys, xs, rs, scale, shift, uint32_t(C),
                                                        uint32_t(npacks));
        else
          nhwc_apply_kernel<E, int64_t, V, kRes, kRelu><<<blocks_for(npacks), kThreads, 0, st>>>(
              ys, xs, rs, scale, shift, C, npacks);
      } else {
        if (total < kIndex32)
          nhwc_apply_kernel<E, uint32_t, 1, kRes, kRelu><<<blocks_for(total), kThreads, 0, st>>>(
              ys, xs, rs, scale, shift, uint32_t(C), uint32_t(total));
        else
          nhwc_apply_kernel<E, int64_t, 1, kRes, kRelu><<<blocks_for(total), kThreads, 0, st>>>(
              ys, xs, rs, scale, shift, C, total);
      }
      KERNEL_CHECK();
    });
  });
}

void CudaBackend::batchnorm_backward_nhwc(Elem t, void* dx, float* dweight, float* dbias,
                                          const void* dy, const void* y, const void* x,
                                          const float* weight, const float* save_mean,
                                          const float* save_invstd, int64_t N, int64_t C,
                                          int64_t HW, bool training) {
  // dx, dy, y, x: (N, HW, C) of type t; dweight, dbias, weight, save_*: (C) float
  const int64_t M = N * HW;
  if (C <= 0 || M <= 0) return;  // no elements: every sum is 0
  Context& cx = ctx();
  const cudaStream_t st = cx.stream;
  // Channels in chunks whose partial sums and two means fit in the scratch; the stream orders
  // a chunk's dx pass before the next chunk's reduction overwrites them.
  const int64_t S = splits_for(C < kChunkChannels ? C : kChunkChannels, M);
  const int64_t rows = (M + S - 1) / S;
  const int64_t total = M * C;
  with_elem(t, [&](auto T) {
    constexpr Elem E = decltype(T)::value;
    using St = storage_t<E>;
    constexpr int V = kVec16<St>;
    auto* dxs = static_cast<St*>(dx);
    const auto* dys = static_cast<const St*>(dy);
    const auto* ys = static_cast<const St*>(y);
    const auto* xs = static_cast<const St*>(x);
    for (int64_t c0 = 0; c0 < C; c0 += kChunkChannels) {
      const int64_t cnt = C - c0 < kChunkChannels ? C - c0 : kChunkChannels;
      const int64_t groups = (cnt + kCols - 1) / kCols;
      double* a_part = reinterpret_cast<double*>(cx.scratch);  // (S, cnt)
      double* b_part = a_part + cnt * S;                        // (S, cnt)
      // (kDxCoefs, cnt) after them: 2 * cnt * S doubles, on 32 bytes when cnt % 8 == 0 (the
      // vector path's V divides cnt, and 16-bit types take V = 8).
      float* coef = dx ? reinterpret_cast<float*>(b_part + cnt * S) : nullptr;
      const dim3 grid(static_cast<unsigned>(S), static_cast<unsigned>(groups));
      const dim3 block(kCols, kLanes);
      if (y)
        nhwc_backward_partial_kernel<E, true><<<grid, block, 0, st>>>(
            a_part, b_part, dys, ys, xs, save_mean, save_invstd, M, C, c0, cnt, rows);
      else
        nhwc_backward_partial_kernel<E, false><<<grid, block, 0, st>>>(
            a_part, b_part, dys, ys, xs, save_mean, save_invstd, M, C, c0, cnt, rows);
      KERNEL_CHECK();
      nhwc_backward_finish_kernel<<<static_cast<unsigned>(groups), block, 0, st>>>(
          dweight, dbias, coef, weight, save_mean, save_invstd, a_part, b_part, S, c0, cnt, M,
          training);
      KERNEL_CHECK();
      if (!dx) continue;
      // c0 is a multiple of kChunkChannels, so of V.
      static_assert(kChunkChannels % V == 0, "chunks start on a vector");
      const bool vec = cnt % V == 0 && C % V == 0 && aligned16(dx) && aligned16(dy) &&
                       aligned16(x) && (y == nullptr || aligned16(y));
      with_flags(total < kIndex32, y != nullptr, [&](auto small, auto rl) {
        constexpr bool kRelu = decltype(rl)::value;
        using I = std::conditional_t<decltype(small)::value, uint32_t, int64_t>;
        if (vec) {
          const int64_t npacks = M * cnt / V;
          nhwc_backward_dx_kernel<E, I, V, kRelu><<<blocks_for(npacks), kThreads, 0, st>>>(
              dxs, dys, ys, xs, coef, I(C), I(c0), I(cnt), I(npacks));
        } else {
          const int64_t n = M * cnt;
          nhwc_backward_dx_kernel<E, I, 1, kRelu><<<blocks_for(n), kThreads, 0, st>>>(
              dxs, dys, ys, xs, coef, I(C), I(c0), I(cnt), I(n));
        }
      });
      KERNEL_CHECK();
    }
  });
}

// A convolution's bias gradient on the channels-last path: the per-channel sums of the
// forward statistics (double, the same splits and order), added into the float slab.
void CudaBackend::conv_bias_grad(Elem t, float* dbias, const void* dy, int64_t rows, int64_t C) {
  // dy: (rows, C) of type t; dbias: (C) float
  if (C <= 0 || rows <= 0) return;
  const cudaStream_t st = ctx().stream;
  const int64_t S = splits_for(C < kChunkChannels ? C : kChunkChannels, rows);
  const int64_t per_split = (rows + S - 1) / S;
  double* sum = reinterpret_cast<double*>(ctx().scratch);  // (S, cnt)
  for (int64_t c0 = 0; c0 < C; c0 += kChunkChannels) {
    const int64_t cnt = C - c0 < kChunkChannels ? C - c0 : kChunkChannels;
    const int64_t groups = (cnt + kCols - 1) / kCols;
    const dim3 block(kCols, kLanes);
    with_elem(t, [&](auto T) {
      constexpr Elem E = decltype(T)::value;
      nhwc_partial_sum_kernel<E><<<dim3(unsigned(S), unsigned(groups)), block, 0, st>>>(
          sum, static_cast<const storage_t<E>*>(dy), rows, C, c0, cnt, per_split);
      KERNEL_CHECK();
    });
    nhwc_add_totals_kernel<<<unsigned(groups), block, 0, st>>>(dbias, sum, S, c0, cnt);
    KERNEL_CHECK();
  }
}

}  // namespace mpicnn::gpu
