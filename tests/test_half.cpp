// fp16 and bf16 conversions (core/half.h): known values, rounding to even, specials, and every
// 16-bit pattern; fp16 also against the CPU's own F16C converter. The gradient compression's
// array casts (dist/compress.h) against them.
#ifdef __F16C__
#include <immintrin.h>
#endif

#include <bit>
#include <cmath>
#include <cstdint>

#include "core/half.h"
#include "core/rng.h"
#include "dist/compress.h"
#include "testing.h"

using namespace mpicnn;

namespace {
uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }
bool same_float(float a, float b) { return bits(a) == bits(b) || (std::isnan(a) && std::isnan(b)); }
}  // namespace

TEST_CASE("fp16 conversion: known values, rounding to even, specials") {
  const float sub = std::ldexp(1.0f, -24);  // smallest fp16 subnormal
  CHECK(float_to_half(1.0f) == 0x3C00);
  CHECK(float_to_half(-2.5f) == 0xC100);
  CHECK(float_to_half(65504.0f) == 0x7BFF);
  CHECK(float_to_half(65519.99f) == 0x7BFF);  // below the midpoint to 65536
  CHECK(float_to_half(65520.0f) == 0x7C00);   // the midpoint rounds to even: infinity
  CHECK(float_to_half(sub) == 0x0001);
  CHECK(float_to_half(std::ldexp(1.0f, -25)) == 0x0000);         // tie between 0 and 1 -> 0
  CHECK(float_to_half(std::nextafter(std::ldexp(1.0f, -25), 1.f)) == 0x0001);
  CHECK(float_to_half(3 * std::ldexp(1.0f, -25)) == 0x0002);     // tie between 1 and 2 -> 2
  CHECK(float_to_half(5 * std::ldexp(1.0f, -25)) == 0x0002);     // tie between 2 and 3 -> 2
  CHECK(float_to_half(1023 * sub) == 0x03FF);                    // largest subnormal
  CHECK(float_to_half(std::ldexp(1.0f, -14)) == 0x0400);         // smallest normal
  CHECK(float_to_half(1 + std::ldexp(1.0f, -11)) == 0x3C00);     // tie -> even mantissa
  CHECK(float_to_half(1 + 3 * std::ldexp(1.0f, -11)) == 0x3C02); // tie -> even mantissa
  CHECK(float_to_half(-0.0f) == 0x8000);
  CHECK(float_to_half(INFINITY) == 0x7C00);
  CHECK(float_to_half(-INFINITY) == 0xFC00);
  CHECK(float_to_half(1e-30f) == 0x0000);
  for (uint32_t nan : {0x7FC00000u, 0x7F800001u, 0xFF800001u, 0x7FFFFFFFu}) {
    const uint16_t h = float_to_half(std::bit_cast<float>(nan));
    CHECK(((h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0));  // still a NaN, never infinity
  }
  CHECK(half_to_float(0x0001) == sub);
  CHECK(half_to_float(0x7BFF) == 65504.0f);
  CHECK(half_to_float(0xC100) == -2.5f);
  CHECK(std::isinf(half_to_float(0x7C00)));
  CHECK(std::isnan(half_to_float(0x7E00)));
  CHECK(std::isnan(half_to_float(0x7C01)));
  CHECK(bits(half_to_float(0x8000)) == 0x80000000u);
  // Every fp16 value survives half -> float -> half.
  int mismatches = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = half_to_float(uint16_t(h));
    const uint16_t back = float_to_half(f);
    if (std::isnan(f) ? !((back & 0x7C00) == 0x7C00 && (back & 0x3FF)) : back != h) ++mismatches;
  }
  CHECK(mismatches == 0);
#ifdef __F16C__
  // The CPU's own converter as a second reference, on a spread of bit patterns.
  mismatches = 0;
  for (uint64_t x = 0; x < (uint64_t(1) << 32); x += 4099) {
    const float f = std::bit_cast<float>(uint32_t(x));
    const uint16_t hw = uint16_t(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
    if (!std::isnan(f) && float_to_half(f) != hw) ++mismatches;
    if (!same_float(half_to_float(uint16_t(x)), _cvtsh_ss(uint16_t(x)))) ++mismatches;
  }
  CHECK(mismatches == 0);
#endif
}

TEST_CASE("bf16 conversion: known values, rounding to even, specials") {
  CHECK(float_to_bf16(1.0f) == 0x3F80);
  CHECK(float_to_bf16(-2.5f) == 0xC020);
  CHECK(float_to_bf16(1 + std::ldexp(1.0f, -8)) == 0x3F80);      // tie -> even
  CHECK(float_to_bf16(1 + 3 * std::ldexp(1.0f, -8)) == 0x3F82);  // tie -> even
  CHECK(float_to_bf16(std::nextafter(1 + std::ldexp(1.0f, -8), 2.f)) == 0x3F81);
  CHECK(float_to_bf16(std::numeric_limits<float>::max()) == 0x7F80);  // rounds up to infinity
  CHECK(float_to_bf16(INFINITY) == 0x7F80);
  CHECK(float_to_bf16(-INFINITY) == 0xFF80);
  CHECK(float_to_bf16(std::bit_cast<float>(0x00008000u)) == 0x0000);  // subnormal tie -> even
  CHECK(float_to_bf16(std::bit_cast<float>(0x00018000u)) == 0x0002);
  CHECK(float_to_bf16(-0.0f) == 0x8000);
  for (uint32_t nan : {0x7FC00000u, 0x7F800001u, 0xFF800001u, 0x7FFFFFFFu}) {
    const uint16_t b = float_to_bf16(std::bit_cast<float>(nan));
    CHECK(std::isnan(bf16_to_float(b)));  // a low-payload NaN must not truncate to infinity
  }
  CHECK(bf16_to_float(0x3F80) == 1.0f);
  CHECK(bf16_to_float(0xC020) == -2.5f);
  int mismatches = 0;
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = bf16_to_float(uint16_t(b));
    if (bits(f) != b << 16) ++mismatches;
    if (!std::isnan(f) && float_to_bf16(f) != b) ++mismatches;
  }
  CHECK(mismatches == 0);
}

// --grad-compression's casts: element for element the scalar conversions (rounded to even),
// every 16-bit value back and forth exactly, and the error of a round trip within half an ulp.
TEST_CASE("grad compression: fp16 and bf16 array casts round trip") {
  using dist::GradCompression;
  std::vector<float> x;
  const Rng rng(5, "grad compression test");
  for (uint64_t i = 0; i < 4096; ++i)
    x.push_back(rng.normal(2 * i) * std::ldexp(1.0f, int(rng.uniform(2 * i + 1) * 40) - 30));
  for (float v : {0.0f, -0.0f, 65504.0f, 65520.0f, -1e9f, 1e-9f, std::ldexp(1.0f, -24), INFINITY, -INFINITY, NAN})
    x.push_back(v);
  const int64_t n = int64_t(x.size());
  for (GradCompression c : {GradCompression::Fp16, GradCompression::Bf16}) {
    CAPTURE(dist::to_string(c));
    const bool fp16 = c == GradCompression::Fp16;
    std::vector<uint16_t> h(x.size());
    std::vector<float> back(x.size());
    dist::compress(c, x.data(), h.data(), n);
    dist::decompress(c, h.data(), back.data(), n);
    int64_t mismatches = 0, off = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      mismatches += h[i] != (fp16 ? float_to_half(x[i]) : float_to_bf16(x[i]));
      mismatches += !same_float(back[i], fp16 ? half_to_float(h[i]) : bf16_to_float(h[i]));
      // Round to nearest: within half an ulp of the format (2^-11, 2^-8 relative) for normal
      // values in range; fp16's subnormals within half the smallest step (2^-25).
      const double a = std::fabs(double(x[i]));
      if (std::isfinite(x[i]) && (!fp16 || a < 65504))
        off += std::fabs(double(back[i]) - x[i]) > std::max(a * std::ldexp(1.0, fp16 ? -11 : -8), fp16 ? std::ldexp(1.0, -25) : 0.0);
    }
    CHECK(mismatches == 0);
    CHECK(off == 0);
    // Every 16-bit pattern survives decompress -> compress (NaNs stay NaN).
    std::vector<uint16_t> all(65536), again(65536);
    std::vector<float> f(65536);
    for (int i = 0; i < 65536; ++i) all[size_t(i)] = uint16_t(i);
    dist::decompress(c, all.data(), f.data(), 65536);
    dist::compress(c, f.data(), again.data(), 65536);
    int64_t changed = 0;
    for (int i = 0; i < 65536; ++i) changed += !(all[size_t(i)] == again[size_t(i)] || std::isnan(f[size_t(i)]));
    CHECK(changed == 0);
  }
  CHECK(dist::parse_grad_compression("bf16", "--grad-compression") == GradCompression::Bf16);
  testing::expect_error([] { dist::parse_grad_compression("int8", "--grad-compression"); },
               "--grad-compression: 'int8' is not a gradient compression (none, fp16 or bf16)");
}
