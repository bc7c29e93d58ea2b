// Softmax cross-entropy with label smoothing on the GPU: the math of
// src/layers/softmax_xent.cpp (max-shifted log-sum-exp, double accumulation), one block per
// row, fixed-order reductions so the loss is deterministic. Not the label range check (the
// caller does that on host) and no other losses.
#include "common.cuh"

namespace mpicnn::gpu {

namespace {

// Fixed-order tree over the block's kThreads values in shared memory (same bits every run).
// Ends with a barrier, so the caller may read buf[0] and reuse buf afterwards.
template <typename T, typename Op>
__device__ T block_reduce(T* buf, T v, Op op) {
  buf[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (int(threadIdx.x) < s) buf[threadIdx.x] = op(buf[threadIdx.x], buf[threadIdx.x + s]);
    __syncthreads();
  }
  const T r = buf[0];
  __syncthreads();
  return r;
}

// One block of kThreads threads per row: probs (N, C) and row_loss (N) doubles.
__global__ void softmax_xent_forward_kernel(double* row_loss, float* probs, const float* logits,
                                            const int32_t* targets, int64_t C, float eps) {
  __shared__ float fbuf[kThreads];
  __shared__ double dbuf[kThreads];
  const int64_t row = blockIdx.x;
  const float* zr = logits + row * C;  // (C)
  float* pr = probs + row * C;         // (C)

  // The CPU's running std::max from zr[0] ignores a NaN after the first element and keeps
  // one in the first; fmaxf ignores NaN too, so only a NaN zr[0] needs its own case.
  float local_mx = -INFINITY;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) local_mx = fmaxf(local_mx, zr[c]);
  float mx = block_reduce(fbuf, local_mx, [](float a, float b) { return fmaxf(a, b); });
  if (isnan(zr[0])) mx = zr[0];
  const double dmx = double(mx);

  double sum = 0, sum_z = 0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const double shifted = __dsub_rn(double(zr[c]), dmx);
    const double e = exp(shifted);
    pr[c] = float(e);  // the CPU divides this float-rounded value by the sum
    // _rn: no contraction with the last product inside exp.
    sum = __dadd_rn(sum, e);
    sum_z = __dadd_rn(sum_z, shifted);
  }
  const auto dadd = [](double a, double b) { return __dadd_rn(a, b); };
  sum = block_reduce(dbuf, sum, dadd);
  sum_z = block_reduce(dbuf, sum_z, dadd);

  // Each thread rescales the entries it wrote itself.
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
    pr[c] = float(__ddiv_rn(double(pr[c]), sum));

  if (threadIdx.x == 0) {
    const double lse = log(sum);  // log-sum-exp of the shifted logits
    // Unfused. (The CPU's loss may be contracted by g++: the two agree within rounding.)
    const double nll = __dsub_rn(lse, __dsub_rn(double(zr[targets[row]]), dmx));
    const double smooth = __dsub_rn(lse, __ddiv_rn(sum_z, double(C)));  // mean of -log p
    const double e = double(eps);
    row_loss[row] = __dadd_rn(__dmul_rn(__dsub_rn(1.0, e), nll), __dmul_rn(e, smooth));
  }
}

// dlogits (N, C) = k * (p - off), minus k * (1 - eps) more at the target: the CPU's two
// float steps (subtract off, multiply by k; then the target's subtraction), unfused.
__global__ void softmax_xent_backward_kernel(float* dlogits, const float* probs,
                                             const int32_t* targets, int64_t N, int64_t C,
                                             float k, float off, float k_target) {
  const int64_t n_all = N * C;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n_all;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i / C, c = i % C;
    float d = __fmul_rn(k, __fsub_rn(probs[i], off));
    if (c == int64_t(targets[n])) d = __fsub_rn(d, k_target);
    dlogits[i] = d;
  }
}

}  // namespace

void CudaBackend::softmax_xent_forward(float* probs, double* row_loss, const float* logits,
                                       const int32_t* targets, int64_t N, int64_t C,
                                       float label_smoothing) {
  CHECK(N >= 1 && N <= INT32_MAX && C >= 1, "softmax_xent_forward: bad shape ", N, " x ", C);
  softmax_xent_forward_kernel<<<unsigned(N), kThreads, 0, ctx().stream>>>(
      row_loss, probs, logits, targets, C, label_smoothing);
  KERNEL_CHECK();
}

void CudaBackend::softmax_xent_backward(float* dlogits, const float* probs,
                                        const int32_t* targets, int64_t N, int64_t C,
                                        float label_smoothing, float scale) {
  if (N <= 0 || C <= 0) return;
  // Host float arithmetic as SoftmaxCrossEntropy::backward rounds it.
  const float k = scale / float(N), off = label_smoothing / float(C);
  const float k_target = k * (1.f - label_smoothing);
  softmax_xent_backward_kernel<<<blocks_for(N * C), kThreads, 0, ctx().stream>>>(
      dlogits, probs, targets, N, C, k, off, k_target);
  KERNEL_CHECK();
}

}  // namespace mpicnn::gpu
