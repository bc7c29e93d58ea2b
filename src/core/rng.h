// Counter-based random numbers (Philox4x32-10, as in cuRAND and PyTorch's CUDA generator).
// A draw is a pure function of (seed, stream, index): no hidden state, so results never
// depend on how many threads or ranks ask, or in which order. Not a cryptographic RNG.
#pragma once
#include <array>
#include <cstdint>
#include <string>

namespace mpicnn {

// Four 32-bit random words for counter `index` on (seed, stream).
std::array<uint32_t, 4> philox4x32(uint64_t seed, uint64_t stream, uint64_t index);

// 64-bit FNV-1a, to derive a stream id from a name ("layer1.0.conv1.weight").
uint64_t stream_id(const std::string& name);

// Stateless draws addressed by index. Each index consumes one Philox block.
class Rng {
 public:
  Rng(uint64_t seed, uint64_t stream) : seed_(seed), stream_(stream) {}
  Rng(uint64_t seed, const std::string& stream_name) : Rng(seed, stream_id(stream_name)) {}

  uint32_t bits(uint64_t index) const { return philox4x32(seed_, stream_, index)[0]; }
  // Uniform in [0, 1) with 24 random bits (every value exactly representable in float).
  float uniform(uint64_t index) const { return uniform_of(bits(index)); }
  // Uniform in [lo, hi).
  float uniform(uint64_t index, float lo, float hi) const {
    return lo + (hi - lo) * uniform(index);
  }
  // Standard normal (Box-Muller on one block).
  float normal(uint64_t index) const;
  // uniform()'s value of a block's first word.
  static float uniform_of(uint32_t w) { return float(w >> 8) * (1.0f / 16777216.0f); }
  // Uniform integer in [0, n), n > 0 (64-bit draw, negligible bias for n < 2^32).
  uint64_t below(uint64_t index, uint64_t n) const;

  uint64_t seed() const { return seed_; }
  uint64_t stream() const { return stream_; }

 private:
  uint64_t seed_, stream_;
};

// out[i] = rng.uniform(i, lo, hi) and mean + std * rng.normal(i) for i < n: the same values at
// a fraction of the cost (blocks of draws in vector lanes, chunks in parallel). T: float, double.
template <class T>
void fill_uniform(const Rng& rng, T* out, int64_t n, float lo, float hi);
template <class T>
void fill_normal(const Rng& rng, T* out, int64_t n, T mean, T std);

}  // namespace mpicnn
