// The bf16 copies of the direct convolution's kernels (conv_direct_avx512bf16.cpp, native;
// conv_direct_bf16_avx512f.cpp, emulated in AVX-512F): their packing into bf16 pairs, written
// once over Isa::Rounding (core/cpu/bf16_avx512.h's NativeRounding or bf16_avx512f.h's
// EmulatedRounding: the same bits), and their Kernels. Included by each after
// conv_direct_impl.h, once per copy, into the copy's namespace (MPICNN_DIRECT_NS).
#include "core/cpu/avx512_lanes.h"

namespace mpicnn::direct::MPICNN_DIRECT_NS {
namespace {

// One pixel's V pairs stored at d as b lays them out: as they are, or (b.words 2) their V odd
// floats, then their V even ones.
void store_pixel(float* d, __m512i pairs, const BlockedImage& b) {
  if (b.words == 1) {
    _mm512_storeu_si512(d, pairs);
    return;
  }
  _mm512_storeu_ps(d, bf16k::odd_of(pairs));
  _mm512_storeu_ps(d + V, bf16k::even_of(pairs));
}

// Row `row` of block blk of the BlockedImage b in dst, or null for a row outside the source
// image, which is then stored as zeros.
float* packed_row(float* dst, const BlockedImage& b, int64_t blk, int64_t row) {
  float* d = dst + (blk * b.rows + row) * b.cols * b.pix;
  const int64_t h = row - b.top;
  if (h >= 0 && h < b.height) return d;
  for (int64_t col = 0; col < b.cols; ++col)
    store_pixel(d + col * b.pix, _mm512_setzero_si512(), b);
  return nullptr;
}

// dst (a BlockedImage of pairs: b.pix words a pixel) '=' src (channels, height, width) rounded
// to bf16, zeros included: per row, 16 pixels x 32 channels at a time, each channel pair's 16
// pixels rounded and interleaved into 16 words, then transposed to one block of 16 pairs per
// pixel.
void pack_pairs(float* dst, const float* src, const BlockedImage& b) {
  constexpr int64_t kChannels = 2 * V;  // per block
  const int64_t blocks = (b.channels + kChannels - 1) / kChannels, plane = b.height * b.width;
  const int64_t pix = b.pix, right = b.left + b.width;
  const __m512i zero = _mm512_setzero_si512();
  for (int64_t blk = 0; blk < blocks; ++blk) {
    for (int64_t row = 0; row < b.rows; ++row) {
      float* d = packed_row(dst, b, blk, row);
      if (!d) continue;
      const int64_t h = row - b.top;
      for (int64_t col = 0; col < b.left; ++col) store_pixel(d + col * pix, zero, b);
      for (int64_t col = right; col < b.cols; ++col) store_pixel(d + col * pix, zero, b);
      float* dp = d + b.left * pix;
      for (int64_t x0 = 0; x0 < b.width; x0 += V) {
        const int n = int(min64(V, b.width - x0));
        const __mmask16 m = bf16k::first_lanes(n);
        __m512i r[V];
        for (int l = 0; l < V; ++l) {
          const int64_t c = blk * kChannels + 2 * l;
          const float* s = src + c * plane + h * b.width + x0;
          const __m512 even = c < b.channels ? _mm512_maskz_loadu_ps(m, s) : _mm512_setzero_ps();
          const __m512 odd =
              c + 1 < b.channels ? _mm512_maskz_loadu_ps(m, s + plane) : _mm512_setzero_ps();
          r[l] = Isa::Rounding::round_pairs(even, odd);  // word x: pair l of pixel x0 + x
        }
        bf16k::transpose16(r);  // r[x]: the 16 pairs of pixel x0 + x
        for (int x = 0; x < n; ++x) store_pixel(dp + (x0 + x) * pix, r[x], b);
      }
    }
  }
}

// The weight gradient's pixel pairs (Kernels::pack_pixel_pairs): per row, 16 positions x 16
// channels at a time, each channel's two pixels of every position rounded into one word (with
// col_step 2 and partner 1 the pairs are neighbours: 32 floats in a row, rounded in order;
// else two loads, partner floats apart), then transposed to one block of 16 channels per
// position.
void pack_pixel_pairs(float* dst, const float* src, const BlockedImage& b, int64_t col_step,
                      int64_t partner) {
  const int64_t blocks = (b.channels + V - 1) / V, plane = b.height * b.width, pix = b.pix;
  const bool neighbours = col_step == 2;  // then partner 1, left 0 (conv_direct_kernels.h)
  const __m512i zero = _mm512_setzero_si512();
  const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  // Lanes x of the 16 source pixels x0 + x (x0 may be negative) inside [0, width).
  auto inside = [&](int64_t x0) {
    const __m512i x = _mm512_add_epi32(lane, _mm512_set1_epi32(int(x0)));
    return __mmask16(_mm512_cmpge_epi32_mask(x, zero) &
                     _mm512_cmplt_epi32_mask(x, _mm512_set1_epi32(int(b.width))));
  };
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t lanes = min64(V, b.channels - blk * V);
    for (int64_t row = 0; row < b.rows; ++row) {
      float* d = packed_row(dst, b, blk, row);
      if (!d) continue;
      const int64_t h = row - b.top;
      const float* s = src + blk * V * plane + h * b.width;
      for (int64_t c0 = 0; c0 < b.cols; c0 += V) {
        const int n = int(min64(V, b.cols - c0));
        const int64_t x0 = c0 * col_step - b.left;
        __m512i r[V];
        if (neighbours) {
          for (int64_t l = 0; l < lanes; ++l)
            r[l] = Isa::Rounding::round_32(s + l * plane + x0, int(b.width - x0));
        } else {
          const __mmask16 m0 = inside(x0), m1 = inside(x0 + partner);
          for (int64_t l = 0; l < lanes; ++l) {
            const float* sl = s + l * plane + x0;
            r[l] = Isa::Rounding::round_pairs(_mm512_maskz_loadu_ps(m0, sl),
                                      _mm512_maskz_loadu_ps(m1, sl + partner));
          }
        }
        for (int64_t l = lanes; l < V; ++l) r[l] = zero;
        bf16k::transpose16(r);  // r[x]: the 16 channels' pairs at position c0 + x
        for (int x = 0; x < n; ++x) store_pixel(d + (c0 + x) * pix, r[x], b);
      }
    }
  }
}

}  // namespace

const Kernels kKernels = {Isa::kName, V,           Isa::kMaxTile,      Isa::kLaneWords, &pack_pairs,
                          &pass_rows, &weight_grad, &weight_grad_units, &pack_pixel_pairs};

}  // namespace mpicnn::direct::MPICNN_DIRECT_NS
