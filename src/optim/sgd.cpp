// SGD step: one OpenMP pass over the parameter slab's chunks, one vectorised loop per chunk.
#include "optim/sgd.h"

#include <cmath>
#include "core/mutant.h"

namespace mpicnn {

SGD::SGD(ParamStore& store, const SgdOptions& o) : Optimizer(store, o.lr, "SGD"), opt_(o) {
  CHECK(std::isfinite(o.momentum) && o.momentum >= 0, "SGD: invalid momentum ", o.momentum,
        " (must be >= 0)");
  CHECK(std::isfinite(o.dampening) && o.dampening >= 0, "SGD: invalid dampening ", o.dampening,
        " (must be >= 0)");
  CHECK(std::isfinite(o.weight_decay) && o.weight_decay >= 0, "SGD: invalid weight decay ",
        o.weight_decay, " (must be >= 0)");
  CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0),
        "SGD: Nesterov momentum requires a momentum > 0 and zero dampening (got momentum ",
        o.momentum, ", dampening ", o.dampening, ")");
  build_chunks(o.exclude_bn_bias);
  if (o.momentum != 0) buf_ = add_state_slab("momentum_buffer");
}

std::vector<std::pair<std::string, double>> SGD::options() const {
  return {{"momentum", opt_.momentum},
          {"dampening", opt_.dampening},
          {"weight_decay", opt_.weight_decay},
          {"nesterov", opt_.nesterov ? 1.0 : 0.0},
          {"exclude_bn_bias", opt_.exclude_bn_bias ? 1.0 : 0.0}};
}

namespace {

enum Momentum { kNone, kFirst, kLater };

// torch's ops map to: d_p.add(p, alpha=wd) -> fma(p, wd, g); buf.mul_(m).add_(d_p, alpha=1-damp)
// -> fma(d, keep, buf*m); d_p.add(buf, alpha=m) -> fma(buf, m, d); p.add_(d_p, alpha=-lr) ->
// fma(d, -lr, p). Its AVX2 kernels fuse each add-with-alpha (vec::fmadd); our build keeps
// plain `a*b + c` unfused (src/optim is built with -ffp-contract=off), so fusion is spelled out.
template <bool kDecay, Momentum kMom, bool kNesterov>
void sgd_run(real* __restrict p, const real* __restrict g, real* __restrict buf, int64_t n,
             real wd, real mom, real keep, real neg_lr) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    real d = g[i];
    if constexpr (kDecay) d = std::fma(p[i], wd, d);
    if constexpr (kMom == kFirst) buf[i] = d;
    if constexpr (kMom == kLater) buf[i] = std::fma(d, keep, buf[i] * mom);
    if constexpr (kMom != kNone)
      d = kNesterov ? (MUTANT(6) ? std::fma(d, mom, buf[i]) : std::fma(buf[i], mom, d)) : buf[i];
    p[i] = std::fma(d, neg_lr, p[i]);
  }
}

using SgdRun = void (*)(real*, const real*, real*, int64_t, real, real, real, real);

template <bool kDecay>
SgdRun pick(Momentum m, bool nesterov) {
  if (m == kNone) return sgd_run<kDecay, kNone, false>;
  if (m == kFirst) return nesterov ? sgd_run<kDecay, kFirst, true> : sgd_run<kDecay, kFirst, false>;
  return nesterov ? sgd_run<kDecay, kLater, true> : sgd_run<kDecay, kLater, false>;
}

}  // namespace

void SGD::step() {
  for (const ChunkGroup& grp : groups_) step_group(grp);
  ++steps_;
}

void SGD::step_group(const ChunkGroup& grp) {
  const Momentum m = opt_.momentum == 0 ? kNone : steps_ == 0 ? kFirst : kLater;
  // Scalars are rounded to real where torch rounds them: each is a Python float that the
  // float32 kernel casts, (1 - dampening) and -lr computed in double first (a group's lr is
  // lr * lr_mult, as a torch param group's would be).
  const SgdRun with_decay = pick<true>(m, opt_.nesterov);
  const SgdRun without_decay = pick<false>(m, opt_.nesterov);
  const real wd = real(opt_.weight_decay), mom = real(opt_.momentum);
  const real keep = real(1.0 - opt_.dampening), neg_lr = real(-(lr_ * grp.lr_mult));
  const bool any_decay = opt_.weight_decay != 0;  // torch skips the add when wd is 0
  if (store_.device() == Device::CUDA) {
    const gpu::SgdScalars sc{float(wd), float(mom), float(keep), float(neg_lr), int(m),
                             opt_.nesterov, any_decay, float(grad_scale_)};
    gpu::backend().sgd_step(store_.values().data(), buf_.defined() ? buf_.data() : nullptr,
                            store_.grads().data(), gpu_chunks(grp), grp.last - grp.first,
                            kChunkFloats, sc);
    return;
  }
  real* p = store_.values().data();
  const real* g = store_.grads().data();
  real* buf = buf_.defined() ? buf_.data() : nullptr;
#pragma omp parallel for schedule(static)
  for (int64_t k = grp.first; k < grp.last; ++k) {
    const Chunk& c = chunks_[size_t(k)];
    const SgdRun run = c.decay && any_decay ? with_decay : without_decay;
    run(p + c.begin, g + c.begin, buf ? buf + c.begin : nullptr, c.end - c.begin, wd, mom, keep,
        neg_lr);
  }
}

}  // namespace mpicnn
