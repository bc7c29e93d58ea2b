// torch.nn.init distributions on counter-based draws.
#include "models/init.h"

#include <cmath>

#include "core/rng.h"

namespace mpicnn::init {

static int64_t receptive(const Tensor& w) {
  int64_t r = 1;
  for (int i = 2; i < w.dim(); ++i) r *= w.size(i);
  return r;
}

int64_t fan_in(const Tensor& w) {
  CHECK(w.dim() >= 2, "fan_in needs a weight with >= 2 dims, got ", w.shape().str());
  return w.size(1) * receptive(w);
}

int64_t fan_out(const Tensor& w) {
  CHECK(w.dim() >= 2, "fan_out needs a weight with >= 2 dims, got ", w.shape().str());
  return w.size(0) * receptive(w);
}

void constant(Tensor& t, real v) { t.fill(v); }

// Draws are counter-based, so values do not depend on the thread count.
void uniform(Tensor& t, uint64_t seed, const std::string& name, real lo, real hi) {
  fill_uniform(Rng(seed, name), t.data(), t.numel(), float(lo), float(hi));
}

void normal(Tensor& t, uint64_t seed, const std::string& name, real mean, real std) {
  fill_normal(Rng(seed, name), t.data(), t.numel(), mean, std);
}

void trunc_normal(Tensor& t, uint64_t seed, const std::string& name, real mean, real std, real a,
                  real b) {
  // Redraws terminate quickly unless [a, b] holds almost no mass; refuse such bounds up front.
  CHECK(std > 0 && a < b && a < mean + 3 * std && b > mean - 3 * std, "trunc_normal ", name,
        ": bounds [", a, ", ", b, "] leave too little of normal(", mean, ", ", std, ")");
  const Rng rng(seed, name);
  real* d = t.data();
  const int64_t n = t.numel();
  fill_normal(rng, d, n, mean, std);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i)
    for (uint64_t k = 1; d[i] < a || d[i] > b; ++k)
      d[i] = mean + std * rng.normal(uint64_t(i) + k * uint64_t(n));
}

void kaiming_normal_relu(Tensor& t, uint64_t seed, const std::string& name, bool fan_out_mode) {
  const double fan = double(fan_out_mode ? fan_out(t) : fan_in(t));
  normal(t, seed, name, 0.f, real(std::sqrt(2.0 / fan)));
}

void kaiming_uniform_relu(Tensor& t, uint64_t seed, const std::string& name) {
  const real bound = real(std::sqrt(6.0 / double(fan_in(t))));
  uniform(t, seed, name, -bound, bound);
}

}  // namespace mpicnn::init
