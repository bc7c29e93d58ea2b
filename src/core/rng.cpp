// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11).
// The 128-bit counter is (index, stream); the 64-bit key is the seed.
#include "core/rng.h"

#include <cmath>

namespace mpicnn {

// The ten rounds on counter (c0, c1, c2, c3) and key (k0, k1), in place. Without ASan's checks,
// as philox_words below, into which it must inline (it reads and writes only its arguments).
__attribute__((no_sanitize("address"))) static inline void philox_rounds(
    uint32_t& c0, uint32_t& c1, uint32_t& c2, uint32_t& c3, uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t(0xD2511F53u) * c0, p1 = uint64_t(0xCD9E8D57u) * c2;  // hi:lo
    uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0, n1 = uint32_t(p1), n2 = uint32_t(p0 >> 32) ^ c3 ^ k1,
             n3 = uint32_t(p0);
    c0 = n0; c1 = n1; c2 = n2; c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
}

std::array<uint32_t, 4> philox4x32(uint64_t seed, uint64_t stream, uint64_t index) {
  uint32_t c0 = uint32_t(index), c1 = uint32_t(index >> 32);
  uint32_t c2 = uint32_t(stream), c3 = uint32_t(stream >> 32);
  philox_rounds(c0, c1, c2, c3, uint32_t(seed), uint32_t(seed >> 32));
  return {c0, c1, c2, c3};
}

uint64_t stream_id(const std::string& name) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : name) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return h;
}

// Box-Muller on a block's first two words; u1 in (0, 1] so log never sees 0.
static inline float box_muller(uint32_t w0, uint32_t w1) {
  double u1 = (double(w0) + 1.0) / 4294967296.0;
  double u2 = double(w1) / 4294967296.0;
  return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

float Rng::normal(uint64_t index) const {
  auto w = philox4x32(seed_, stream_, index);
  return box_muller(w[0], w[1]);
}

// The first two words of the blocks of counters first, ..., first + m - 1, side by side: one
// lane's rounds do not depend on another's, so the compiler runs them in vector lanes (a call
// per draw was most of a model's initialisation). Left out of ASan's checks (it writes only the
// two arrays of m words it is given): its checks on every round kept the loop scalar.
__attribute__((no_sanitize("address"))) static void philox_words(uint64_t seed, uint64_t stream,
                                                                 uint64_t first, int64_t m,
                                                                 uint32_t* w0, uint32_t* w1) {
  const uint32_t s0 = uint32_t(stream), s1 = uint32_t(stream >> 32);
  const uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int64_t i = 0; i < m; ++i) {
    const uint64_t index = first + uint64_t(i);
    uint32_t c0 = uint32_t(index), c1 = uint32_t(index >> 32), c2 = s0, c3 = s1;
    philox_rounds(c0, c1, c2, c3, k0, k1);
    w0[i] = c0;
    w1[i] = c1;
  }
}

// fn(i, draw(w0, w1)) for every counter i < n, in chunks of 64 counters, in parallel: every
// value is a function of its counter alone.
template <class Draw, class Fn>
static void draw_all(uint64_t seed, uint64_t stream, int64_t n, Draw draw, Fn fn) {
  constexpr int64_t kBlock = 64;
#pragma omp parallel for schedule(static)
  for (int64_t at = 0; at < n; at += kBlock) {
    uint32_t w0[kBlock], w1[kBlock];
    const int64_t m = n - at < kBlock ? n - at : kBlock;
    philox_words(seed, stream, uint64_t(at), m, w0, w1);
    for (int64_t i = 0; i < m; ++i) fn(at + i, draw(w0[i], w1[i]));
  }
}

template <class T>
void fill_uniform(const Rng& rng, T* out, int64_t n, float lo, float hi) {
  draw_all(rng.seed(), rng.stream(), n, [](uint32_t w0, uint32_t) { return Rng::uniform_of(w0); },
           [&](int64_t i, float u) { out[i] = lo + (hi - lo) * u; });
}

template <class T>
void fill_normal(const Rng& rng, T* out, int64_t n, T mean, T std) {
  // log and cos stay libm's scalar calls, so every value is normal()'s.
  draw_all(rng.seed(), rng.stream(), n, [](uint32_t w0, uint32_t w1) { return box_muller(w0, w1); },
           [&](int64_t i, float z) { out[i] = mean + std * z; });
}

template void fill_uniform<float>(const Rng&, float*, int64_t, float, float);
template void fill_uniform<double>(const Rng&, double*, int64_t, float, float);
template void fill_normal<float>(const Rng&, float*, int64_t, float, float);
template void fill_normal<double>(const Rng&, double*, int64_t, double, double);

uint64_t Rng::below(uint64_t index, uint64_t n) const {
  auto w = philox4x32(seed_, stream_, index);
  uint64_t r = (uint64_t(w[2]) << 32) | w[3];
  return r % n;
}

}  // namespace mpicnn
