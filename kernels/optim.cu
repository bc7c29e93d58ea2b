// Fused optimizer steps on the GPU: SGD (momentum, dampening, Nesterov, weight decay) and
// AdamW (amsgrad), one launch over the whole parameter slab, bit-identical to
// src/optim/sgd.cpp and adamw.cpp. Not the scalars (the host optimizers round those) and not
// gradient clipping or loss-scale bookkeeping.
#include "common.cuh"

namespace mpicnn::gpu {

namespace {

// Each block covers kThreads * kItems consecutive floats of one chunk; threads stride by
// kThreads inside that piece so every load and store coalesces.
constexpr int kItems = 4;
constexpr int64_t kPiece = int64_t(kThreads) * kItems;

// nvcc contracts a*b + c into an FMA unless told otherwise, while the CPU code (src/optim, built
// with -ffp-contract=off) fuses exactly where it writes std::fma. So every product and
// sum below is an explicit _rn intrinsic, fmaf appears exactly where the CPU has std::fma,
// and division and sqrt are the IEEE-rounded ones.

// `blocks_per_chunk` pieces per chunk, virtual block vb -> (chunk vb / bpc, piece vb % bpc);
// the grid strides over virtual blocks in case there are more than it launched. Elements
// outside [begin, end) of a chunk are never touched.
__global__ void sgd_kernel(float* params, float* buf, const float* grads, const SlabChunk* chunks,
                           int64_t nchunks, int64_t blocks_per_chunk, SgdScalars s) {
  const int64_t total = nchunks * blocks_per_chunk;
  for (int64_t vb = blockIdx.x; vb < total; vb += gridDim.x) {
    const SlabChunk ch = chunks[vb / blocks_per_chunk];
    const int64_t start = ch.begin + (vb % blocks_per_chunk) * kPiece;
    const bool decay = ch.decay && s.any_decay;  // torch skips the add when wd is 0
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      const int64_t i = start + int64_t(j) * kThreads + threadIdx.x;
      if (i >= ch.end) break;
      float d = grads[i];
      if (s.grad_scale != 1.f) d = __fmul_rn(d, s.grad_scale);
      float p = params[i];
      if (decay) d = fmaf(p, s.weight_decay, d);
      if (s.momentum_mode != 0) {
        float b;
        if (s.momentum_mode == 1)
          b = d;
        else
          b = fmaf(d, s.keep, __fmul_rn(buf[i], s.momentum));
        buf[i] = b;
        d = s.nesterov ? fmaf(b, s.momentum, d) : b;
      }
      params[i] = fmaf(d, s.neg_lr, p);
    }
  }
}

__global__ void adamw_kernel(float* params, float* m, float* v, float* vmax, const float* grads,
                             const SlabChunk* chunks, int64_t nchunks, int64_t blocks_per_chunk,
                             AdamScalars s) {
  const int64_t total = nchunks * blocks_per_chunk;
  for (int64_t vb = blockIdx.x; vb < total; vb += gridDim.x) {
    const SlabChunk ch = chunks[vb / blocks_per_chunk];
    const int64_t start = ch.begin + (vb % blocks_per_chunk) * kPiece;
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      const int64_t i = start + int64_t(j) * kThreads + threadIdx.x;
      if (i >= ch.end) break;
      float pi = params[i];
      // torch multiplies by 1 - lr*0 = 1 without decay: the same as skipping it.
      if (ch.decay) pi = __fmul_rn(pi, s.decay_mul);
      float gi = grads[i];
      if (s.grad_scale != 1.f) gi = __fmul_rn(gi, s.grad_scale);
      const float mi = fmaf(gi, s.keep1, __fmul_rn(m[i], s.b1));
      float vi = fmaf(__fmul_rn(s.keep2, gi), gi, __fmul_rn(v[i], s.b2));
      m[i] = mi;
      v[i] = vi;
      if (s.amsgrad) {
        const float old = vmax[i];
        vi = !(vi <= old) ? vi : old;  // torch.maximum: a NaN wins
        vmax[i] = vi;
      }
      const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), s.bc2_sqrt), s.eps);
      params[i] = __fadd_rn(pi, __fdiv_rn(__fmul_rn(s.neg_step, mi), denom));
    }
  }
}

// Blocks per chunk and the launched grid (capped; the kernels stride over the rest).
struct OptimGrid {
  int64_t blocks_per_chunk;
  unsigned grid;
};
OptimGrid optim_grid(int64_t nchunks, int64_t max_chunk) {
  const int64_t bpc = (max_chunk + kPiece - 1) / kPiece;
  const int64_t total = nchunks * (bpc < 1 ? 1 : bpc);
  const int64_t cap = int64_t(1) << 20;
  return {bpc < 1 ? 1 : bpc, unsigned(total < cap ? total : cap)};
}

}  // namespace

void CudaBackend::sgd_step(float* params, float* buf, const float* grads, const SlabChunk* chunks,
                           int64_t nchunks, int64_t max_chunk, const SgdScalars& s) {
  if (nchunks <= 0 || max_chunk <= 0) return;
  CHECK(s.momentum_mode == 0 || buf, "sgd_step: momentum mode ", s.momentum_mode,
        " without a momentum buffer");
  const OptimGrid g = optim_grid(nchunks, max_chunk);
  sgd_kernel<<<g.grid, kThreads, 0, ctx().stream>>>(params, buf, grads, chunks, nchunks,
                                                    g.blocks_per_chunk, s);
  KERNEL_CHECK();
}

void CudaBackend::adamw_step(float* params, float* m, float* v, float* vmax, const float* grads,
                             const SlabChunk* chunks, int64_t nchunks, int64_t max_chunk,
                             const AdamScalars& s) {
  if (nchunks <= 0 || max_chunk <= 0) return;
  CHECK(!s.amsgrad || vmax, "adamw_step: amsgrad without a max_exp_avg_sq buffer");
  const OptimGrid g = optim_grid(nchunks, max_chunk);
  adamw_kernel<<<g.grid, kThreads, 0, ctx().stream>>>(params, m, v, vmax, grads, chunks, nchunks,
                                                      g.blocks_per_chunk, s);
  KERNEL_CHECK();
}

}  // namespace mpicnn::gpu
