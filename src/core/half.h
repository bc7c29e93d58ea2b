// Scalar conversions between float32 and the two 16-bit float formats, IEEE binary16 (fp16)
// and bfloat16, with round-to-nearest-even, subnormals, infinities and NaN handled exactly.
// Not a half type with arithmetic and not a vectorised converter: storage and I/O use these.
#pragma once
#include <bit>
#include <cstdint>

namespace mpicnn {

// fp16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. Magnitudes >= 65520 (halfway past
// 65504, the largest finite half) round to infinity, as in IEEE and PyTorch.
constexpr uint16_t float_to_half(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7FFFFFFFu;
  // NaN: keep the top payload bits and force the quiet bit so the result stays a NaN.
  if (ax > 0x7F800000u) return uint16_t(sign | 0x7E00u | ((ax >> 13) & 0x3FFu));
  if (ax >= 0x477FF000u) return uint16_t(sign | 0x7C00u);  // >= 65520.0f, or inf
  if (ax < 0x38800000u) {                                  // below 2^-14: half subnormal or 0
    const uint32_t e = ax >> 23;
    if (e < 102) return sign;  // below 2^-25 (half the smallest subnormal): rounds to zero
    // value = m * 2^(e-150); in units of the smallest subnormal 2^-24 that is m >> (126-e).
    const uint32_t m = (ax & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14..24
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (r & 1u))) ++r;  // may carry into 2^-14: fine
    return uint16_t(sign | r);
  }
  // Normal: rebias the exponent (127 -> 15) and drop 13 mantissa bits; a carry out of the
  // mantissa correctly bumps the exponent.
  const uint32_t base = ax - 0x38000000u;
  uint32_t h = base >> 13;
  const uint32_t rem = base & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return uint16_t(sign | h);
}

constexpr float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  // inf / NaN; a signalling NaN comes back quiet, as the F16C instruction does.
  if (e == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | (m << 13) | (m ? 0x400000u : 0));
  if (e == 0) {  // zero or subnormal: m * 2^-24, exact in float
    const float v = float(m) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return std::bit_cast<float>(sign | ((e + 112) << 23) | (m << 13));
}

// bf16: the top 16 bits of a float32, rounded to nearest even. Overflow rounds to infinity
// through the carry; NaN keeps its sign and top payload with the quiet bit set (a plain
// rounding could carry a NaN's payload into an infinity).
constexpr uint16_t float_to_bf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((x >> 16) | 0x0040u);
  return uint16_t((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

constexpr float bf16_to_float(uint16_t b) { return std::bit_cast<float>(uint32_t(b) << 16); }

}  // namespace mpicnn
