// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11).
// The 128-bit counter is (index, stream); the 64-bit key is the seed.
#include "core/rng.h"

#include <cmath>

namespace mpicnn {

static inline void mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  uint64_t p = uint64_t(a) * b;
  hi = uint32_t(p >> 32);
  lo = uint32_t(p);
}

std::array<uint32_t, 4> philox4x32(uint64_t seed, uint64_t stream, uint64_t index) {
  uint32_t c0 = uint32_t(index), c1 = uint32_t(index >> 32);
  uint32_t c2 = uint32_t(stream), c3 = uint32_t(stream >> 32);
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(0xD2511F53u, c0, hi0, lo0);
    mulhilo(0xCD9E8D57u, c2, hi1, lo1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0; c1 = n1; c2 = n2; c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
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

float Rng::normal(uint64_t index) const {
  auto w = philox4x32(seed_, stream_, index);
  // u1 in (0, 1] so log never sees 0.
  double u1 = (double(w[0]) + 1.0) / 4294967296.0;
  double u2 = double(w[1]) / 4294967296.0;
  return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

uint64_t Rng::below(uint64_t index, uint64_t n) const {
  auto w = philox4x32(seed_, stream_, index);
  uint64_t r = (uint64_t(w[2]) << 32) | w[3];
  return r % n;
}

}  // namespace mpicnn
