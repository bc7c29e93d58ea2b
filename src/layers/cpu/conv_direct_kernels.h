// The SIMD kernels of the direct convolution (layers/conv_direct.h), one set per instruction
// set, behind plain structs and function pointers: conv_direct_avx512.cpp and
// conv_direct_avx2.cpp compile the same templates (conv_direct_impl.h) with their own ISA
// flags, and conv_direct.cpp picks a set at run time by CPU features. Nothing here plans,
// allocates or threads: that is conv_direct.cpp's. The structs hold only plain values and
// pointers, so the ISA files emit no shared inline code a linker could mix up between them.
#pragma once
#include <cstdint>

namespace mpicnn::direct {

// A channel-blocked image [blocks][rows][cols][V], V channels per block, pixels pix floats
// apart (V; or chunk * V where the images of a chunk are interleaved per pixel): a zero border
// around the source plane (its pixel (0, 0) at (top, left)), zeros in the last block's unused
// lanes.
struct BlockedImage {
  int64_t channels = 0, height = 0, width = 0;  // of the NCHW source image
  int64_t rows = 0, cols = 0;                   // of the padded plane
  int64_t top = 0, left = 0;
  int64_t pix = 0;
  // 32-bit words a lane: 1; 2 in a bf16 copy that kernels broadcast from whose
  // Kernels::lane_words is 2: each pixel's V pairs then stored as their V odd floats, then
  // their V even ones (2V words a pixel and image).
  int64_t words = 1;
};

// One tiled pass: every output pixel (row, col) of the pass, for output channel c,
//   out[c * out_plane + out_origin + row * out_row_step + col * out_col_step] '='
//     bias[c] + sum over input blocks b, taps t, lanes l of
//       in[b * in_block + in_origin + row * in_row_step + col * in_pix_step + taps[t]
//          + l * in_lane_step]
//       * weights[((c / V) * in_blocks + b) * ntaps + t][l][c % V]
// where in is a BlockedImage (lane step 1) or, for a layer without padding, the NCHW image
// itself (lane step: its plane), and out one NCHW image; or, with out_blocked, a blocked one
// (out_plane: floats per block, c % V the lane, no bias: whole vectors stored). Forward is one
// pass; the input gradient one pass per stride phase (conv_direct.cpp). Tiles are r pixels of
// a row by ob output blocks.
struct Pass {
  int64_t in_blocks = 0, in_lanes_last = 0, in_block = 0;  // in_block: floats per block
  int64_t in_origin = 0, in_row_step = 0, in_pix_step = 0, in_lane_step = 1;  // floats
  const int64_t* taps = nullptr;                             // ntaps offsets, floats
  int64_t ntaps = 0;
  const float* weights = nullptr;  // [out_blocks][in_blocks][ntaps][V in][V out]
  int64_t rows = 0, cols = 0;      // output pixels of the pass
  int64_t out_channels = 0, out_plane = 0, out_origin = 0, out_row_step = 0, out_col_step = 0;
  bool out_blocked = false;
  int64_t ob = 1, r = 1;  // tile: output blocks, pixels
};

// The weight gradient of one unit (output block k, input block b, tap t) over images i:
//   dw[k][b][t][l][o] '+=' sum over i, rows, cols of
//     in[i * in_image + b * in_block + row * in_row_step + col * in_pix_step + taps[t]
//        + l * in_lane_step]
//     * dout[i * out_image + k * out_block + out_origin + row * out_row_step
//            + col * out_pix_step + o]
// in the forward input's layout (as Pass's), dout in the output gradient's BlockedImage. Each
// unit is one thread's at a time, so the sum runs in image order whatever the thread count.
struct WeightGrad {
  int64_t in_blocks = 0, in_lanes_last = 0, in_block = 0, in_row_step = 0, in_pix_step = 0;
  int64_t in_lane_step = 1;
  int64_t in_image = 0, out_image = 0;  // floats per packed image
  const int64_t* taps = nullptr;
  int64_t ntaps = 0;
  int64_t out_blocks = 0, out_block = 0, out_origin = 0, out_row_step = 0, out_pix_step = 0;
  int64_t rows = 0, cols = 0;  // the forward output's plane
  int64_t blocks = 1;  // output blocks per unit: 1, 2 or 4 (2 and 4 with AVX-512 only)
};

// The bf16 sets ("avx512bf16", conv_direct_avx512bf16.cpp; "avx512bf16-emulated",
// conv_direct_bf16_avx512f.cpp, the same bits on CPUs without AVX512-BF16) read their inputs and
// weights as bf16 pairs: an input block is 2V channels, V pairs, a "float" of in and weights
// above one pair (lanes l count pairs, offsets 32-bit words), each lane's product the pair's
// two products summed; their pack_image rounds to such pairs. Their weight gradient pairs
// pixels instead of channels: in and dout packed by pack_pixel_pairs, each word two pixels of
// one channel (a block V channels, V words a pixel, as in float32), so that "a pixel" of
// WeightGrad above is a pair of output pixels and each product sums the pair's two; dw stays
// float32. The emulated set's `in` copies (the operand it broadcasts) hold each pair as its two
// floats (lane_words 2: 2V words a pixel, offsets in those words); weights and the weight
// gradient's dout stay pairs.
struct Kernels {
  const char* name;  // "avx512", "avx2", "avx512bf16", "avx512bf16-emulated"
  int vec;           // V: floats per vector, output channels per block
  int max_tile;      // the most accumulators of a tile (ob * r)
  // 32-bit words a lane of the packed copies the kernels broadcast from (Pass's in, the weight
  // gradient's in; BlockedImage::words): 1, or 2 for the emulated bf16 kernels, whose
  // broadcast then needs no split of its pair (the copy holds the two floats).
  int lane_words;
  // dst (BlockedImage) '=' src (channels, height, width), zeros included.
  void (*pack_image)(float* dst, const float* src, const BlockedImage& b);
  // The pass's tiles of rows [row0, row1) and output blocks [blk0, blk1) into out (one image).
  void (*pass_rows)(float* out, const float* in, const Pass& p, const float* bias, int64_t row0,
                    int64_t row1, int64_t blk0, int64_t blk1);
  // Unit u of dw (WeightGrad::blocks output blocks, then an input block and
  // a tap or, for a last block of few lanes, a group of taps), over `images` consecutive
  // images.
  void (*weight_grad)(float* dw, const float* in, const float* dout, const WeightGrad& g,
                      int64_t unit, int64_t images);
  int64_t (*weight_grad_units)(const WeightGrad& g);  // how many units dw has
  // bf16 set only (else null): dst (a BlockedImage of V channels a block, b.pix words a pixel)
  // '=' word (row, col, lane l) holding channel l's source pixels (row - top, x) and
  // (row - top, x + partner), x = col * col_step - left, rounded to bf16 (the first in the low
  // half), a pixel outside the source image a zero. col_step is 1, or 2 with partner 1 and
  // left 0 (pairs of neighbours).
  void (*pack_pixel_pairs)(float* dst, const float* src, const BlockedImage& b, int64_t col_step,
                           int64_t partner);
};

// The kernels for this CPU's instruction set, null where the CPU lacks it.
const Kernels* avx512_kernels();
const Kernels* avx2_kernels();
const Kernels* avx512bf16_kernels();    // call only on a CPU with AVX512-BF16
const Kernels* bf16_avx512f_kernels();  // the same bits emulated: on a CPU with AVX-512F/BW/VL

}  // namespace mpicnn::direct
