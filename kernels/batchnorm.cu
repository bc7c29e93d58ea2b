// BatchNorm2d of the CUDA backend: batch statistics, running-stat update, normalisation and
// backward, with the math of src/layers/batchnorm.cpp (double accumulators, the same rounding
// points and the FMAs GCC forms there; the per-element math in layers/batchnorm_math.h, which a
// CPU test checks against the CPU layer). Own kernels, deterministic; not cuDNN's batch norm.
// Fused (layers/fusion.h): the apply pass also adds the residual and applies the ReLU, and the
// backward passes mask the gradient with the ReLU's output as they read it.
// Each channel's sums are split over several blocks (partial sums in the context's scratch,
// added in a fixed order by a finishing kernel), so small-channel layers fill the GPU.
#include <type_traits>

#include "common.cuh"
#include "layers/batchnorm_math.h"

namespace mpicnn::gpu {

namespace {

// Threads of the per-channel reduction blocks (a power of two for the tree reduce).
constexpr int kStatThreads = 512;
// Channels per pass (grid y), and most blocks one channel's reduction is split over (grid x).
// A pass keeps two partial sums per (channel, split) in ctx().scratch, and in backward the
// channels' mean(dy) and mean(dy * xhat) after them.
constexpr int64_t kChunkChannels = 4096, kMaxSplits = 64;
static_assert(kChunkChannels <= 65535, "grid y");
constexpr int64_t kSplitsByScratch =
    (int64_t(Context::kScratchBytes) / kChunkChannels - 2 * int64_t(sizeof(float))) /
    (2 * int64_t(sizeof(double)));
static_assert(kSplitsByScratch >= 1, "the scratch holds a chunk's partial sums");

// Blocks per channel: one block per channel leaves most of a large GPU idle in the 64-channel
// layers, so a channel's M values are split over enough blocks for about 4 per SM in all,
// each with at least 4 values per thread. The partial sums are added in a fixed order, so
// the result has the same bits in every run (not, in general, the CPU's: its order differs).
int64_t splits_for(int64_t C, int64_t M) {
  // Rounded down: one more block per channel would start a second, nearly empty wave.
  const int64_t want = 4 * int64_t(ctx().sm_count) / C;
  const int64_t by_size = M / (int64_t(kStatThreads) * 4);
  int64_t s = want < by_size ? want : by_size;
  s = s < kMaxSplits ? s : kMaxSplits;
  s = s < kSplitsByScratch ? s : kSplitsByScratch;
  return s < 1 ? 1 : s;
}

// Calls f(offset) for this thread's share of channel c's M = N * HW elements, element j at
// (n * C + c) * HW + i with j = n * HW + i: the blocks of grid row blockIdx.y split the
// channel, and thread t of block b takes j = b * blockDim + t, then steps by gridDim.x *
// blockDim. The (n, i) cursor steps without a division per element.
template <typename F>
__device__ __forceinline__ void for_channel(int64_t c, int64_t N, int64_t C, int64_t HW, F f) {
  if (HW <= 0) return;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  const int64_t dn = step / HW, di = step % HW;
  int64_t n = first / HW, i = first % HW;
  while (n < N) {
    f((n * C + c) * HW + i);
    i += di;
    n += dn;
    if (i >= HW) i -= HW, ++n;  // di < HW, so one wrap at most
  }
}

// Sum over the block of one double per thread in a fixed tree order (same bits every run);
// every thread gets the result. buf is kStatThreads doubles of shared memory, free to reuse
// on return.
__device__ double block_sum(double v, double* buf) {
  const int t = threadIdx.x;
  buf[t] = v;
  __syncthreads();
  for (int s = kStatThreads / 2; s > 0; s >>= 1) {
    if (t < s) buf[t] += buf[t + s];
    __syncthreads();
  }
  const double r = buf[0];
  __syncthreads();
  return r;
}

// Sum of the S partial sums of channel j (fixed order: the same value in every thread).
__device__ __forceinline__ double partial_total(const double* part, int64_t j, int64_t S) {
  double t = 0;
  for (int64_t s = 0; s < S; ++s) t += part[j * S + s];
  return t;
}

// Grid (S, cnt): block (s, j) sums its share of channel c0 + j into sum[j * S + s] (double).
__global__ void __launch_bounds__(kStatThreads)
    bn_partial_sum_kernel(double* sum, const float* x, int64_t N, int64_t C, int64_t HW,
                          int64_t c0) {
  __shared__ double buf[kStatThreads];
  const int64_t j = blockIdx.y, c = c0 + j;
  double s = 0;
  for_channel(c, N, C, HW, [&](int64_t k) { s += double(x[k]); });
  s = block_sum(s, buf);
  if (threadIdx.x == 0) sum[j * gridDim.x + blockIdx.x] = s;
}

// Grid (S, cnt): the squared deviations from the channel's mean (from the partial sums, as the
// CPU's two passes), summed into ss[j * S + s].
__global__ void __launch_bounds__(kStatThreads)
    bn_partial_ss_kernel(double* ss, const double* sum, const float* x, int64_t N, int64_t C,
                         int64_t HW, int64_t c0) {
  __shared__ double buf[kStatThreads];
  const int64_t j = blockIdx.y, c = c0 + j, S = gridDim.x;
  const double mu = partial_total(sum, j, S) / double(N * HW);
  double v = 0;
  for_channel(c, N, C, HW, [&](int64_t k) {
    const double t = double(x[k]) - mu;
    v = fma(t, t, v);  // GCC contracts the CPU's pss += t * t
  });
  v = block_sum(v, buf);
  if (threadIdx.x == 0) ss[j * S + blockIdx.x] = v;
}

// One thread per channel c0 + j: mean and biased variance (used to normalise) from the partial
// sums; writes save_mean/save_invstd and updates running_mean/var (C).
__global__ void bn_stats_finish_kernel(float* save_mean, float* save_invstd, float* running_mean,
                                       float* running_var, const double* sum, const double* ss,
                                       int64_t S, int64_t c0, int64_t cnt, int64_t M, float eps,
                                       float momentum) {
  for (int64_t j = global_index(); j < cnt; j += grid_stride()) {
    const int64_t c = c0 + j;
    bn_math::finish_stats(save_mean[c], save_invstd[c], running_mean[c], running_var[c],
                          partial_total(sum, j, S), partial_total(ss, j, S), double(M), eps,
                          momentum);
  }
}

// Eval mode: the running stats become save_mean/save_invstd (C), so backward reads one pair.
__global__ void bn_eval_stats_kernel(float* save_mean, float* save_invstd,
                                     const float* running_mean, const float* running_var,
                                     int64_t C, float eps) {
  for (int64_t c = global_index(); c < C; c += grid_stride()) {
    save_mean[c] = running_mean[c];
    save_invstd[c] = bn_math::eval_invstd(running_var[c], eps);
  }
}

// y (N, C, HW) = x * scale + shift with scale = weight * invstd, shift = bias - mean * scale
// (bn_math::apply), + residual r (kResidual), then the ReLU (kRelu). y may alias x: one thread
// reads then writes. I: the index type, uint32_t when the whole tensor has fewer than 2^31
// elements (64-bit division is emulated and would dominate these memory-bound loops), else
// int64_t.
template <typename I, bool kResidual, bool kRelu>
__global__ void bn_apply_kernel(float* y, const float* x, const float* r, const float* save_mean,
                                const float* save_invstd, const float* weight,
                                const float* bias, I C, I HW, I total) {
  for (I k = I(blockIdx.x) * blockDim.x + threadIdx.x; k < total; k += I(gridDim.x) * blockDim.x) {
    const I c = (k / HW) % C;
    const float scale = bn_math::scale(weight[c], save_invstd[c]);
    const float shift = bn_math::shift(bias[c], save_mean[c], scale);
    y[k] = bn_math::apply<kResidual, kRelu>(x[k], scale, shift, kResidual ? r[k] : 0.f);
  }
}

// Grid (S, cnt): block (s, j) sums g and g * xhat over its share of channel c0 + j in double
// (g * xhat rounded to float first, as on the CPU), into a[j * S + s], b[j * S + s]; g is dy,
// masked by the fused ReLU's output y > 0 with kRelu (bn_math::grad).
template <bool kRelu>
__global__ void __launch_bounds__(kStatThreads)
    bn_backward_partial_kernel(double* a_part, double* b_part, const float* dy, const float* y,
                               const float* x, const float* save_mean, const float* save_invstd,
                               int64_t N, int64_t C, int64_t HW, int64_t c0) {
  __shared__ double buf_a[kStatThreads];
  __shared__ double buf_b[kStatThreads];
  const int64_t j = blockIdx.y, c = c0 + j;
  const float mean = save_mean[c], invstd = save_invstd[c];
  double a = 0, b = 0;
  for_channel(c, N, C, HW, [&](int64_t k) {
    const float d = bn_math::grad<kRelu>(dy[k], kRelu ? y[k] : 0.f);
    a += double(d);
    b += double(bn_math::mul(d, bn_math::xhat(x[k], mean, invstd)));
  });
  // Both trees in one pass of barriers.
  const int t = threadIdx.x;
  buf_a[t] = a;
  buf_b[t] = b;
  __syncthreads();
  for (int s = kStatThreads / 2; s > 0; s >>= 1) {
    if (t < s) buf_a[t] += buf_a[t + s], buf_b[t] += buf_b[t + s];
    __syncthreads();
  }
  if (t == 0) {
    a_part[j * gridDim.x + blockIdx.x] = buf_a[0];
    b_part[j * gridDim.x + blockIdx.x] = buf_b[0];
  }
}

// One thread per channel c0 + j: dbias/dweight (C) '+=' sum(dy), sum(dy * xhat). With mstats,
// stores mean(dy) at mstats[j] and mean(dy * xhat) at mstats[cnt + j] (training only, 0 in
// eval) for the dx pass.
__global__ void bn_backward_finish_kernel(float* dweight, float* dbias, float* mstats,
                                          const double* a_part, const double* b_part, int64_t S,
                                          int64_t c0, int64_t cnt, int64_t M, bool training) {
  for (int64_t j = global_index(); j < cnt; j += grid_stride()) {
    const int64_t c = c0 + j;
    const double sdy = partial_total(a_part, j, S), sdyx = partial_total(b_part, j, S);
    if (dweight) {  // null for frozen parameters
      dbias[c] = __fadd_rn(dbias[c], float(sdy));
      dweight[c] = __fadd_rn(dweight[c], float(sdyx));
    }
    if (mstats) {
      mstats[j] = training ? float(sdy / double(M)) : 0.f;
      mstats[cnt + j] = training ? float(sdyx / double(M)) : 0.f;
    }
  }
}

// dx (N, C, HW) for channels [c0, c0 + cnt) = weight * invstd * (g - mdy - xhat * mdyx)
// ('=', bn_math::dx), g as in bn_backward_partial_kernel. dx may alias dy: one thread reads
// then writes each element, and the reductions over dy finished in the previous kernel.
// I as in bn_apply_kernel (uint32_t when N * C * HW < 2^31).
template <typename I, bool kRelu>
__global__ void bn_backward_dx_kernel(float* dx, const float* dy, const float* y, const float* x,
                                      const float* weight, const float* save_mean,
                                      const float* save_invstd, const float* mstats, I N, I C,
                                      I HW, I c0, I cnt) {
  const I total = N * cnt * HW;
  for (I e = I(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += I(gridDim.x) * blockDim.x) {
    const I i = e % HW, r = e / HW;
    const I j = r % cnt, n = r / cnt;
    const I c = c0 + j;
    const I k = (n * C + c) * HW + i;
    const float invstd = save_invstd[c];
    const float g = bn_math::grad<kRelu>(dy[k], kRelu ? y[k] : 0.f);
    dx[k] = bn_math::dx(g, bn_math::xhat(x[k], save_mean[c], invstd),
                        bn_math::mul(weight[c], invstd), mstats[j], mstats[cnt + j]);
  }
}

}  // namespace

void CudaBackend::batchnorm_forward(Format f, void* y_, float* save_mean, float* save_invstd,
                                    float* running_mean, float* running_var, const void* x_,
                                    const float* weight, const float* bias,
                                    const void* residual_, bool relu, int64_t N, int64_t C,
                                    int64_t HW, float eps, float momentum, bool training) {
  if (channels_last(f, "batchnorm_forward"))
    return batchnorm_forward_nhwc(f.elem, y_, save_mean, save_invstd, running_mean, running_var,
                                  x_, weight, bias, residual_, relu, N, C, HW, eps, momentum,
                                  training);
  auto* y = static_cast<float*>(y_);
  const auto* x = static_cast<const float*>(x_);
  const auto* residual = static_cast<const float*>(residual_);
  // y, x, residual: (N, C, HW); save_*, running_*, weight, bias: (C)
  if (C <= 0) return;
  const cudaStream_t st = ctx().stream;
  if (training) {
    CHECK(N * HW > 1, "batchnorm_forward: training needs more than one value per channel, got ",
          "N=", N, ", HW=", HW);
    const int64_t M = N * HW, S = splits_for(C, M);
    double* sum = reinterpret_cast<double*>(ctx().scratch);  // (cnt, S), then ss (cnt, S)
    for (int64_t c0 = 0; c0 < C; c0 += kChunkChannels) {
      const int64_t cnt = C - c0 < kChunkChannels ? C - c0 : kChunkChannels;
      double* ss = sum + cnt * S;
      const dim3 grid(static_cast<unsigned>(S), static_cast<unsigned>(cnt));
      bn_partial_sum_kernel<<<grid, kStatThreads, 0, st>>>(sum, x, N, C, HW, c0);
      KERNEL_CHECK();
      bn_partial_ss_kernel<<<grid, kStatThreads, 0, st>>>(ss, sum, x, N, C, HW, c0);
      KERNEL_CHECK();
      bn_stats_finish_kernel<<<blocks_for(cnt), kThreads, 0, st>>>(
          save_mean, save_invstd, running_mean, running_var, sum, ss, S, c0, cnt, M, eps,
          momentum);
      KERNEL_CHECK();
    }
  } else {
    bn_eval_stats_kernel<<<blocks_for(C), kThreads, 0, st>>>(save_mean, save_invstd,
                                                             running_mean, running_var, C, eps);
    KERNEL_CHECK();
  }
  const int64_t total = N * C * HW;
  if (total == 0) return;
  with_flags(residual != nullptr, relu, [&](auto res, auto rl) {
    constexpr bool kRes = decltype(res)::value, kRelu = decltype(rl)::value;
    if (total < kIndex32)
      bn_apply_kernel<uint32_t, kRes, kRelu><<<blocks_for(total), kThreads, 0, st>>>(
          y, x, residual, save_mean, save_invstd, weight, bias, uint32_t(C), uint32_t(HW),
          uint32_t(total));
    else
      bn_apply_kernel<int64_t, kRes, kRelu><<<blocks_for(total), kThreads, 0, st>>>(
          y, x, residual, save_mean, save_invstd, weight, bias, C, HW, total);
  });
  KERNEL_CHECK();
}

void CudaBackend::batchnorm_backward(Format f, void* dx_, float* dweight, float* dbias,
                                     const void* dy_, const void* y_, const void* x_,
                                     const float* weight, const float* save_mean,
                                     const float* save_invstd, int64_t N, int64_t C, int64_t HW,
                                     bool training) {
  if (channels_last(f, "batchnorm_backward"))
    return batchnorm_backward_nhwc(f.elem, dx_, dweight, dbias, dy_, y_, x_, weight, save_mean,
                                   save_invstd, N, C, HW, training);
  auto* dx = static_cast<float*>(dx_);
  const auto* dy = static_cast<const float*>(dy_);
  const auto* y = static_cast<const float*>(y_);
  const auto* x = static_cast<const float*>(x_);
  // dx, dy, y, x: (N, C, HW); dweight, dbias, weight, save_*: (C)
  if (C <= 0 || N * HW <= 0) return;  // no elements: every sum is 0
  Context& cx = ctx();
  const cudaStream_t st = cx.stream;
  // Channels in chunks whose partial sums and two means fit in the scratch; the stream orders
  // a chunk's dx pass before the next chunk's reduction overwrites them.
  const int64_t M = N * HW, S = splits_for(C, M);
  for (int64_t c0 = 0; c0 < C; c0 += kChunkChannels) {
    const int64_t cnt = C - c0 < kChunkChannels ? C - c0 : kChunkChannels;
    double* a_part = reinterpret_cast<double*>(cx.scratch);  // (cnt, S)
    double* b_part = a_part + cnt * S;                        // (cnt, S)
    float* mstats = dx ? reinterpret_cast<float*>(b_part + cnt * S) : nullptr;  // (2, cnt)
    const dim3 grid(static_cast<unsigned>(S), static_cast<unsigned>(cnt));
    if (y)
      bn_backward_partial_kernel<true><<<grid, kStatThreads, 0, st>>>(
          a_part, b_part, dy, y, x, save_mean, save_invstd, N, C, HW, c0);
    else
      bn_backward_partial_kernel<false><<<grid, kStatThreads, 0, st>>>(
          a_part, b_part, dy, y, x, save_mean, save_invstd, N, C, HW, c0);
    KERNEL_CHECK();
    bn_backward_finish_kernel<<<blocks_for(cnt), kThreads, 0, st>>>(
        dweight, dbias, mstats, a_part, b_part, S, c0, cnt, M, training);
    KERNEL_CHECK();
    if (!dx) continue;
    with_flags(N * C * HW < kIndex32, y != nullptr, [&](auto small, auto rl) {
      constexpr bool kRelu = decltype(rl)::value;
      if constexpr (decltype(small)::value)
        bn_backward_dx_kernel<uint32_t, kRelu><<<blocks_for(N * cnt * HW), kThreads, 0, st>>>(
            dx, dy, y, x, weight, save_mean, save_invstd, mstats, uint32_t(N), uint32_t(C),
            uint32_t(HW), uint32_t(c0), uint32_t(cnt));
      else
        bn_backward_dx_kernel<int64_t, kRelu><<<blocks_for(N * cnt * HW), kThreads, 0, st>>>(
            dx, dy, y, x, weight, save_mean, save_invstd, mstats, N, C, HW, c0, cnt);
    });
    KERNEL_CHECK();
  }
}

}  // namespace mpicnn::gpu
