// LARS step: per parameter tensor, its two norms (double sums), then one vectorised loop.
#include "optim/lars.h"

#include <cmath>

namespace mpicnn {

LARS::LARS(ParamStore& store, const LarsOptions& o) : Optimizer(store, o.lr, "LARS"), opt_(o) {
  CHECK(store.device() == Device::CPU,
        "LARS: runs on the CPU only for now (use --optimizer sgd on the GPU)");
  CHECK(std::isfinite(o.momentum) && o.momentum >= 0 && o.momentum < 1, "LARS: invalid momentum ",
        o.momentum, " (must be in [0, 1))");
  CHECK(std::isfinite(o.weight_decay) && o.weight_decay >= 0, "LARS: invalid weight decay ",
        o.weight_decay, " (must be >= 0)");
  CHECK(std::isfinite(o.eta) && o.eta > 0, "LARS: invalid trust coefficient ", o.eta,
        " (must be > 0)");
  CHECK(std::isfinite(o.eps) && o.eps >= 0, "LARS: invalid epsilon ", o.eps, " (must be >= 0)");
  CHECK(!o.nesterov || o.momentum > 0, "LARS: Nesterov momentum requires a momentum > 0");
  for (const StateEntry& e : store.entries())
    if (e.kind == StateKind::Param && !e.frozen)
      entries_.push_back({e.offset, e.offset + e.shape.numel(), e.decay, e.lr_mult});
  buf_ = add_state_slab("momentum_buffer");
}

std::vector<std::pair<std::string, double>> LARS::options() const {
  return {{"momentum", opt_.momentum},
          {"weight_decay", opt_.weight_decay},
          {"eta", opt_.eta},
          {"eps", opt_.eps},
          {"nesterov", opt_.nesterov ? 1.0 : 0.0}};
}

void LARS::step() {
  real* p = store_.values().data();
  const real* g = store_.grads().data();
  real* buf = buf_.data();
  const double wd = opt_.weight_decay;
  const real mom = real(opt_.momentum);
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t k = 0; k < entries_.size(); ++k) {
    const Entry& e = entries_[k];
    double trust = 1, decay = 0;
    if (e.adapt) {
      double w2 = 0, g2 = 0;
      for (int64_t i = e.begin; i < e.end; ++i) {
        w2 += double(p[i]) * p[i];
        g2 += double(g[i]) * g[i];
      }
      const double wn = std::sqrt(w2), gn = std::sqrt(g2);
      if (wn > 0 && gn > 0) trust = opt_.eta * wn / (gn + wd * wn + opt_.eps);
      decay = wd;
    }
    const real scaled_lr = real(lr_ * e.lr_mult * trust), d = real(decay);
#pragma omp simd
    for (int64_t i = e.begin; i < e.end; ++i) {
      const real step = scaled_lr * (g[i] + d * p[i]);
      buf[i] = mom * buf[i] + step;
      p[i] -= opt_.nesterov ? step + mom * buf[i] : buf[i];
    }
  }
  ++steps_;
}

}  // namespace mpicnn
