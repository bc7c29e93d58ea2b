// BatchNorm2d of the CUDA backend: batch statistics, running-stat update, normalisation and
// backward, with the math of src/layers/batchnorm.cpp (double accumulators, the same rounding
// points and the FMAs GCC forms there). Own kernels, deterministic; not cuDNN's batch norm.
#include "common.cuh"

namespace mpicnn::gpu {

namespace {

// Threads of the per-channel reduction blocks (a power of two for the tree reduce).
constexpr int kStatThreads = 512;
// Channels per backward pass: their mean(dy) and mean(dy * xhat) live in ctx().scratch.
constexpr int64_t kScratchChannels = int64_t(Context::kScratchBytes / (2 * sizeof(float)));

__device__ __forceinline__ int64_t global_index() {
  return int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_stride() { return int64_t(gridDim.x) * blockDim.x; }

// Calls f(offset) for this thread's share of channel c's M = N * HW elements, element j at
// (n * C + c) * HW + i with j = n * HW + i; threads take j = tid, tid + blockDim, ... The
// (n, i) cursor steps without a division per element.
template <typename F>
__device__ __forceinline__ void for_channel(int64_t c, int64_t N, int64_t C, int64_t HW, F f) {
  if (HW <= 0) return;
  const int64_t step = blockDim.x;
  const int64_t dn = step / HW, di = step % HW;
  int64_t n = threadIdx.x / HW, i = threadIdx.x % HW;
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

// One block per channel c: mean, then the biased variance around it (two passes, as the CPU),
// both in double; writes save_mean/save_invstd (C) and updates running_mean/var (C).
__global__ void __launch_bounds__(kStatThreads)
    bn_stats_kernel(float* save_mean, float* save_invstd, float* running_mean,
                    float* running_var, const float* x, int64_t N, int64_t C, int64_t HW,
                    float eps, float momentum) {
  __shared__ double buf[kStatThreads];
  const int64_t c = blockIdx.x;
  const int64_t M = N * HW;
  double s = 0;
  for_channel(c, N, C, HW, [&](int64_t k) { s += double(x[k]); });
  const double mu = block_sum(s, buf) / double(M);
  double ss = 0;
  for_channel(c, N, C, HW, [&](int64_t k) {
    const double t = double(x[k]) - mu;
    ss = fma(t, t, ss);  // GCC contracts the CPU's pss += t * t
  });
  const double var = block_sum(ss, buf) / double(M);  // biased: used to normalise
  if (threadIdx.x == 0) {
    save_mean[c] = float(mu);
    save_invstd[c] = float(1.0 / sqrt(var + double(eps)));
    // Running stats with the unbiased variance; a*b + c*d as GCC contracts it, fma(a, b, c*d).
    const double m = double(momentum), keep = 1.0 - m;
    running_mean[c] = float(fma(keep, double(running_mean[c]), m * mu));
    running_var[c] =
        float(fma(keep, double(running_var[c]), m * var * double(M) / double(M - 1)));
  }
}

// Eval mode: the running stats become save_mean/save_invstd (C), so backward reads one pair.
__global__ void bn_eval_stats_kernel(float* save_mean, float* save_invstd,
                                     const float* running_mean, const float* running_var,
                                     int64_t C, float eps) {
  for (int64_t c = global_index(); c < C; c += grid_stride()) {
    save_mean[c] = running_mean[c];
    save_invstd[c] = float(1.0 / sqrt(double(running_var[c]) + double(eps)));
  }
}

// y (N, C, HW) = x * scale + shift with scale = weight * invstd, shift = bias - mean * scale
// (both FMAs as GCC forms them on the CPU). y may alias x: one thread reads then writes.
__global__ void bn_apply_kernel(float* y, const float* x, const float* save_mean,
                                const float* save_invstd, const float* weight,
                                const float* bias, int64_t C, int64_t HW, int64_t total) {
  for (int64_t k = global_index(); k < total; k += grid_stride()) {
    const int64_t c = (k / HW) % C;
    const float scale = __fmul_rn(weight[c], save_invstd[c]);
    const float shift = fmaf(-save_mean[c], scale, bias[c]);
    y[k] = fmaf(x[k], scale, shift);
  }
}

// One block per channel c0 + blockIdx.x: sum(dy) and sum(dy * xhat) in double (dy * xhat
// rounded to float first, as on the CPU); dbias/dweight (C) '+=' them. With mstats, stores
// mean(dy) at mstats[j] and mean(dy * xhat) at mstats[cnt + j] (j = c - c0; training only,
// 0 in eval) for the dx pass.
__global__ void __launch_bounds__(kStatThreads)
    bn_backward_reduce_kernel(float* dweight, float* dbias, float* mstats, const float* dy,
                              const float* x, const float* save_mean, const float* save_invstd,
                              int64_t N, int64_t C, int64_t HW, int64_t c0, int64_t cnt,
                              bool training) {
  __shared__ double buf_a[kStatThreads];
  __shared__ double buf_b[kStatThreads];
  const int64_t c = c0 + blockIdx.x;
  const float mean = save_mean[c], invstd = save_invstd[c];
  double a = 0, b = 0;
  for_channel(c, N, C, HW, [&](int64_t k) {
    const float d = dy[k];
    const float xhat = __fmul_rn(__fsub_rn(x[k], mean), invstd);
    a += double(d);
    b += double(__fmul_rn(d, xhat));
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
    const double sdy = buf_a[0], sdyx = buf_b[0];
    dbias[c] = __fadd_rn(dbias[c], float(sdy));
    dweight[c] = __fadd_rn(dweight[c], float(sdyx));
    if (mstats) {
      const double M = double(N * HW);
      mstats[blockIdx.x] = training ? float(sdy / M) : 0.f;
      mstats[cnt + blockIdx.x] = training ? float(sdyx / M) : 0.f;
    }
  }
}

// dx (N, C, HW) for channels [c0, c0 + cnt) = weight * invstd * (dy - mdy - xhat * mdyx)
// ('='), the inner a - b*c as the FMA GCC makes of it. dx may alias dy: one thread reads then
// writes each element, and the reductions over dy finished in the previous kernel.
__global__ void bn_backward_dx_kernel(float* dx, const float* dy, const float* x,
                                      const float* weight, const float* save_mean,
                                      const float* save_invstd, const float* mstats, int64_t N,
                                      int64_t C, int64_t HW, int64_t c0, int64_t cnt) {
  const int64_t total = N * cnt * HW;
  for (int64_t e = global_index(); e < total; e += grid_stride()) {
    const int64_t i = e % HW, r = e / HW;
    const int64_t j = r % cnt, n = r / cnt;
    const int64_t c = c0 + j;
    const int64_t k = (n * C + c) * HW + i;
    const float mean = save_mean[c], invstd = save_invstd[c];
    const float kk = __fmul_rn(weight[c], invstd);
    const float mdy = mstats[j], mdyx = mstats[cnt + j];
    const float xhat = __fmul_rn(__fsub_rn(x[k], mean), invstd);
    dx[k] = __fmul_rn(kk, fmaf(-xhat, mdyx, __fsub_rn(dy[k], mdy)));
  }
}

}  // namespace

void CudaBackend::batchnorm_forward(float* y, float* save_mean, float* save_invstd,
                                    float* running_mean, float* running_var, const float* x,
                                    const float* weight, const float* bias, int64_t N,
                                    int64_t C, int64_t HW, float eps, float momentum,
                                    bool training) {
  // y, x: (N, C, HW); save_*, running_*, weight, bias: (C)
  if (C <= 0) return;
  const cudaStream_t st = ctx().stream;
  if (training) {
    CHECK(N * HW > 1, "batchnorm_forward: training needs more than one value per channel, got ",
          "N=", N, ", HW=", HW);
    CHECK(C <= int64_t(0x7fffffff), "batchnorm_forward: ", C, " channels exceed the grid");
    bn_stats_kernel<<<unsigned(C), kStatThreads, 0, st>>>(save_mean, save_invstd, running_mean,
                                                          running_var, x, N, C, HW, eps,
                                                          momentum);
    KERNEL_CHECK();
  } else {
    bn_eval_stats_kernel<<<blocks_for(C), kThreads, 0, st>>>(save_mean, save_invstd,
                                                             running_mean, running_var, C, eps);
    KERNEL_CHECK();
  }
  const int64_t total = N * C * HW;
  if (total == 0) return;
  bn_apply_kernel<<<blocks_for(total), kThreads, 0, st>>>(y, x, save_mean, save_invstd, weight,
                                                          bias, C, HW, total);
  KERNEL_CHECK();
}

void CudaBackend::batchnorm_backward(float* dx, float* dweight, float* dbias, const float* dy,
                                     const float* x, const float* weight,
                                     const float* save_mean, const float* save_invstd,
                                     int64_t N, int64_t C, int64_t HW, bool training) {
  // dx, dy, x: (N, C, HW); dweight, dbias, weight, save_*: (C)
  if (C <= 0 || N * HW <= 0) return;  // no elements: every sum is 0
  Context& cx = ctx();
  const cudaStream_t st = cx.stream;
  // Channels in chunks that fit their two means in the scratch; the stream orders a chunk's
  // dx pass before the next chunk's reduction overwrites them.
  float* mstats = dx ? cx.scratch : nullptr;
  CHECK(!dx || mstats, "batchnorm_backward: the device scratch is not allocated");
  for (int64_t c0 = 0; c0 < C; c0 += kScratchChannels) {
    const int64_t cnt = C - c0 < kScratchChannels ? C - c0 : kScratchChannels;
    bn_backward_reduce_kernel<<<unsigned(cnt), kStatThreads, 0, st>>>(
        dweight, dbias, mstats, dy, x, save_mean, save_invstd, N, C, HW, c0, cnt, training);
    KERNEL_CHECK();
    if (!dx) continue;
    bn_backward_dx_kernel<<<blocks_for(N * cnt * HW), kThreads, 0, st>>>(
        dx, dy, x, weight, save_mean, save_invstd, mstats, N, C, HW, c0, cnt);
    KERNEL_CHECK();
  }
}

}  // namespace mpicnn::gpu
