// AdamW step: one OpenMP pass over the parameter slab's chunks, one vectorised loop per chunk.
#include "optim/adamw.h"

#include <cmath>
#include "core/mutant.h"

namespace mpicnn {

AdamW::AdamW(ParamStore& store, const AdamWOptions& o) : Optimizer(store, o.lr, "AdamW"), opt_(o) {
  CHECK(std::isfinite(o.eps) && o.eps >= 0, "AdamW: invalid eps ", o.eps, " (must be >= 0)");
  CHECK(o.beta1 >= 0 && o.beta1 < 1, "AdamW: invalid beta1 ", o.beta1, " (must be in [0, 1))");
  CHECK(o.beta2 >= 0 && o.beta2 < 1, "AdamW: invalid beta2 ", o.beta2, " (must be in [0, 1))");
  CHECK(std::isfinite(o.weight_decay) && o.weight_decay >= 0, "AdamW: invalid weight decay ",
        o.weight_decay, " (must be >= 0)");
  build_chunks(o.exclude_bn_bias);
  m_ = add_state_slab("exp_avg");
  v_ = add_state_slab("exp_avg_sq");
  if (o.amsgrad) vmax_ = add_state_slab("max_exp_avg_sq");
}

std::vector<std::pair<std::string, double>> AdamW::options() const {
  return {{"beta1", opt_.beta1},
          {"beta2", opt_.beta2},
          {"eps", opt_.eps},
          {"weight_decay", opt_.weight_decay},
          {"amsgrad", opt_.amsgrad ? 1.0 : 0.0},
          {"exclude_bn_bias", opt_.exclude_bn_bias ? 1.0 : 0.0}};
}

namespace {

struct AdamScalars {
  real decay_mul;  // 1 - lr*wd
  real b1, keep1;  // beta1, 1 - beta1
  real b2, keep2;  // beta2, 1 - beta2
  real bc2_sqrt;   // sqrt(1 - beta2^t)
  real eps;
  real neg_step;   // -lr / (1 - beta1^t)
};

// torch's ops map to: exp_avg.mul_(b1).add_(g, alpha=1-b1) -> fma(g, keep1, m*b1) (add with
// alpha is vec::fmadd); exp_avg_sq.mul_(b2).addcmul_(g, g, value=1-b2) -> fma(keep2*g, g, v*b2)
// (its kernel writes self + value*t1*t2, which torch's compiler contracts: matching that made
// us bit-identical); (sqrt(v) / bc2_sqrt).add_(eps); p.addcdiv_(m, denom, value=-step) ->
// p + (-step*m)/denom. src/optim is built with -ffp-contract=off (the Makefile; g++ contracts
// C++ by default), so every fusion is spelled out and nothing else is fused.
// With -fno-math-errno GCC vectorises this loop (sqrt may otherwise set errno, a branch it
// will not vectorise); without it, the loop runs scalar and still one pass.
template <bool kDecay, bool kAmsgrad>
void adamw_run(real* __restrict p, const real* __restrict g, real* __restrict m,
               real* __restrict v, real* __restrict vmax, int64_t n, const AdamScalars s) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    real pi = p[i];
    if constexpr (kDecay) pi = pi * s.decay_mul;
    const real gi = g[i];
    const real mi = std::fma(gi, s.keep1, m[i] * s.b1);
    real vi = std::fma(s.keep2 * gi, gi, v[i] * s.b2);
    m[i] = mi;
    v[i] = vi;
    if constexpr (kAmsgrad) {
      vi = !(vi <= vmax[i]) ? vi : vmax[i];  // torch.maximum: a NaN wins
      vmax[i] = vi;
    }
    const real denom = std::sqrt(vi) / s.bc2_sqrt + s.eps;
    p[i] = pi + s.neg_step * mi / denom;
  }
}

using AdamRun = void (*)(real*, const real*, real*, real*, real*, int64_t, AdamScalars);

}  // namespace

void AdamW::step() {
  ++steps_;  // torch increments state['step'] before using it
  for (const ChunkGroup& grp : groups_) step_group(grp);
}

void AdamW::step_group(const ChunkGroup& grp) {
  // Doubles as torch computes them in Python, rounded to float where its kernels take them;
  // a group's lr is lr * lr_mult, as a torch param group's would be.
  const double t = double(steps_), lr = lr_ * grp.lr_mult;
  const double bc1 = MUTANT(4) ? 1.0 : 1 - std::pow(opt_.beta1, t);
  const double bc2 = MUTANT(4) ? 1.0 : 1 - std::pow(opt_.beta2, t);
  const AdamScalars s{real(1 - lr * opt_.weight_decay),
                      real(opt_.beta1), real(1 - opt_.beta1),
                      real(opt_.beta2), real(1 - opt_.beta2),
                      real(std::sqrt(bc2)), real(opt_.eps), real(-(lr / bc1))};
  if (store_.device() == Device::CUDA) {
    const gpu::AdamScalars sc{float(s.decay_mul), float(s.b1),       float(s.keep1),
                              float(s.b2),        float(s.keep2),    float(s.bc2_sqrt),
                              float(s.eps),       float(s.neg_step), opt_.amsgrad,
                              float(grad_scale_)};
    gpu::backend().adamw_step(store_.values().data(), m_.data(), v_.data(),
                              vmax_.defined() ? vmax_.data() : nullptr, store_.grads().data(),
                              gpu_chunks(grp), grp.last - grp.first, kChunkFloats, sc);
    return;
  }
  const AdamRun with_decay = opt_.amsgrad ? adamw_run<true, true> : adamw_run<true, false>;
  const AdamRun without_decay = opt_.amsgrad ? adamw_run<false, true> : adamw_run<false, false>;
  real* p = store_.values().data();
  const real* g = store_.grads().data();
  real* vmax = vmax_.defined() ? vmax_.data() : nullptr;
#pragma omp parallel for schedule(static)
  for (int64_t k = grp.first; k < grp.last; ++k) {
    const Chunk& c = chunks_[size_t(k)];
    // torch multiplies by 1 - lr*0 = 1 for groups without decay: the same as skipping it.
    const AdamRun run = c.decay ? with_decay : without_decay;
    run(p + c.begin, g + c.begin, m_.data() + c.begin, v_.data() + c.begin,
        vmax ? vmax + c.begin : nullptr, c.end - c.begin, s);
  }
}

}  // namespace mpicnn
