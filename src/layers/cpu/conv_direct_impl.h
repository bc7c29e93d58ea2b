// The direct convolution's kernels as templates over one instruction set, included once by
// conv_direct_avx512.cpp and once by conv_direct_avx2.cpp, each of which first defines
// MPICNN_DIRECT_NS (this copy's namespace) and the struct Isa (vector type, V, loads, FMA).
// Every name here lives in that namespace or an anonymous one, so the copies never meet at
// link time. What the kernels compute is in conv_direct_kernels.h.
// Two more copies, conv_direct_avx512bf16.cpp (native) and conv_direct_bf16_avx512f.cpp
// (emulated), define MPICNN_DIRECT_PAIRS: their Isa's "float" vectors hold bf16 pairs and its
// fma is a vdpbf16ps step, so the passes' tiles below read 32-bit pairs where the others read
// floats (lanes are pairs), and the weight gradient's loops read pixel pairs
// (conv_direct_kernels.h); their packing is conv_direct_pairs.h's. Each kernel's sums run
// between Isa::begin_sums and Isa::end_sums (the emulated copy's DAZ and flush).
#include <cstring>
#include <utility>

#include "layers/cpu/conv_direct_kernels.h"

namespace mpicnn::direct::MPICNN_DIRECT_NS {
namespace {

constexpr int V = Isa::V;
using Vec = typename Isa::Vec;

inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

#ifndef MPICNN_DIRECT_PAIRS
void pack_image(float* dst, const float* src, const BlockedImage& b) {
  const int64_t blocks = (b.channels + V - 1) / V, plane = b.height * b.width;
  const int64_t pix = b.pix, right = b.left + b.width;
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t lanes = min64(V, b.channels - blk * V);
    const float* s = src + blk * V * plane;
    for (int64_t row = 0; row < b.rows; ++row) {
      float* d = dst + (blk * b.rows + row) * b.cols * pix;
      const int64_t h = row - b.top;
      if (h < 0 || h >= b.height) {
        for (int64_t col = 0; col < b.cols; ++col) Isa::store(d + col * pix, Isa::zero());
        continue;
      }
      for (int64_t col = 0; col < b.left; ++col) Isa::store(d + col * pix, Isa::zero());
      for (int64_t col = right; col < b.cols; ++col) Isa::store(d + col * pix, Isa::zero());
      float* dp = d + b.left * pix;
      const float* sp = s + h * b.width;
      if (lanes == V) {  // V x V tiles transposed in registers, then the row's tail
        int64_t x = 0;
        for (; x + V <= b.width; x += V) Isa::transpose(dp + x * pix, pix, sp + x, plane);
        for (; x < b.width; ++x)
          for (int l = 0; l < V; ++l) dp[x * pix + l] = sp[l * plane + x];
      } else {
        for (int64_t x = 0; x < b.width; ++x) {
          Isa::store(dp + x * pix, Isa::zero());
          for (int64_t l = 0; l < lanes; ++l) dp[x * pix + l] = sp[l * plane + x];
        }
      }
    }
  }
}
#endif  // MPICNN_DIRECT_PAIRS

// One tile: R output pixels of a row by OB output blocks, summed over every input block, tap
// and lane, into acc_out [OB][R][V]. Each weight vector is loaded once per tile and used R
// times; each input value is broadcast once and used OB times.
template <int OB, int R>
void tile(float* acc_out, const float* in, const Pass& p, const float* w) {
  Vec acc[OB][R];
  for (int o = 0; o < OB; ++o)
    for (int r = 0; r < R; ++r) acc[o][r] = Isa::zero();
  const unsigned csr = Isa::begin_sums(acc);
  const int64_t pix = p.in_pix_step, lane = p.in_lane_step;
  const int64_t w_ob = p.in_blocks * p.ntaps * V * V;
  for (int64_t b = 0; b < p.in_blocks; ++b) {
    const int64_t lanes = b == p.in_blocks - 1 ? p.in_lanes_last : V;
    const float* ib = in + b * p.in_block;
    const float* wb = w + b * p.ntaps * V * V;
    for (int64_t t = 0; t < p.ntaps; ++t) {
      const float* ip = ib + p.taps[t];
      const float* wp = wb + t * V * V;
      for (int64_t l = 0; l < lanes; ++l) {
        typename Isa::Operand wv[OB];
        for (int o = 0; o < OB; ++o) wv[o] = Isa::operand(wp + o * w_ob + l * V);
        const float* xl = ip + l * lane;
        for (int r = 0; r < R; ++r) {
          const auto x = Isa::bcast(xl + r * pix);
          for (int o = 0; o < OB; ++o) acc[o][r] = Isa::fma(x, wv[o], acc[o][r]);
        }
      }
    }
  }
  Isa::end_sums(acc, csr);
  for (int o = 0; o < OB; ++o)
    for (int r = 0; r < R; ++r) Isa::store(acc_out + (o * R + r) * V, acc[o][r]);
}

// Function tables indexed by a runtime count (plain arrays in a local struct: no std::array
// members that the two ISA copies could share).
template <class Fn, int N>
struct Table {
  Fn f[N];
};
using TileFn = void (*)(float*, const float*, const Pass&, const float*);
template <int OB, int... R>
constexpr Table<TileFn, sizeof...(R)> tile_table(std::integer_sequence<int, R...>) {
  return {{&tile<OB, R + 1>...}};
}
constexpr auto kTiles1 = tile_table<1>(std::make_integer_sequence<int, Isa::kMaxTile>{});
constexpr auto kTiles2 = tile_table<2>(std::make_integer_sequence<int, Isa::kMaxTile / 2>{});

// The tiles of output row `row`, output blocks [g, g + ob), into out with bias.
// Stores lanes [0, lanes) of tile block acc [r][V] (r pixels of V channels; V rows readable)
// as channel rows of r contiguous pixels: V x V transposes, then each channel's pixels in one
// masked store, plus its bias.
inline void store_rows(float* out, int64_t plane, const float* acc, int64_t r, int64_t lanes,
                       const float* bias) {
  alignas(64) float t[V * V];
  for (int64_t r0 = 0; r0 < r; r0 += V) {
    const int n = int(min64(V, r - r0));
    Isa::transpose(t, V, acc + r0 * V, V);  // t[j][i]: pixel r0 + i of channel j
    for (int64_t j = 0; j < lanes; ++j) {
      Vec v = Isa::load(t + j * V);
      if (bias) v = Isa::add(v, Isa::splat(bias[j]));
      Isa::store_first(out + j * plane + r0, v, n);
    }
  }
}

inline void row_group(float* out, const float* in, const Pass& p, const float* bias, int64_t row,
                      int64_t g, int64_t ob) {
  // A tile's accumulators, and V rows of slack that store_rows' transposes read past the end.
  alignas(64) float acc[(Isa::kMaxTile + V) * V];
  const float* w = p.weights + g * p.in_blocks * p.ntaps * V * V;
  const float* in_row = in + p.in_origin + row * p.in_row_step;
  float* out_row = out + p.out_origin + row * p.out_row_step;
  for (int64_t c0 = 0; c0 < p.cols; c0 += p.r) {
    const int64_t r = min64(p.r, p.cols - c0);
    const TileFn fn = ob == 2 ? kTiles2.f[r - 1] : kTiles1.f[r - 1];
    fn(acc, in_row + c0 * p.in_pix_step, p, w);
    float* o_base = out_row + c0 * p.out_col_step;
    if (p.out_blocked) {
      for (int64_t o = 0; o < ob; ++o)
        for (int64_t i = 0; i < r; ++i)
          Isa::store(o_base + (g + o) * p.out_plane + i * p.out_col_step,
                     Isa::load(acc + (o * r + i) * V));
      continue;
    }
    if (p.out_col_step == 1) {  // contiguous pixels: transposed vector stores
      for (int64_t o = 0; o < ob; ++o) {
        const int64_t c0 = (g + o) * V;
        store_rows(o_base + c0 * p.out_plane, p.out_plane, acc + o * r * V, r,
                   min64(V, p.out_channels - c0), bias ? bias + c0 : nullptr);
      }
      continue;
    }
    for (int64_t o = 0; o < ob; ++o) {
      const int64_t lanes = min64(V, p.out_channels - (g + o) * V);
      for (int64_t l = 0; l < lanes; ++l) {
        const int64_t c = (g + o) * V + l;
        const float bv = bias ? bias[c] : 0.f;
        float* d = o_base + c * p.out_plane;
        const float* s = acc + o * r * V + l;
        for (int64_t i = 0; i < r; ++i) d[i * p.out_col_step] = s[i * V] + bv;
      }
    }
  }
}

void pass_rows(float* out, const float* in, const Pass& p, const float* bias, int64_t row0,
               int64_t row1, int64_t blk0, int64_t blk1) {
  // Weights larger than the image: sweep the rows under one group of weights (held in cache),
  // else sweep the groups under one row of input.
  const bool groups_outer = p.in_blocks * p.ntaps * V * V * (blk1 - blk0) > p.in_blocks * p.in_block;
  if (groups_outer) {
    for (int64_t g = blk0; g < blk1; g += p.ob)
      for (int64_t row = row0; row < row1; ++row)
        row_group(out, in, p, bias, row, g, min64(p.ob, blk1 - g));
  } else {
    for (int64_t row = row0; row < row1; ++row)
      for (int64_t g = blk0; g < blk1; g += p.ob)
        row_group(out, in, p, bias, row, g, min64(p.ob, blk1 - g));
  }
}

// Taps per weight-gradient unit for J input lanes: one when J chains of FMAs hide the FMA
// latency; with fewer lanes (a first layer's 1-3 input channels) a unit takes several taps,
// which share each output-gradient load and read neighbouring inputs.
constexpr int taps_per_unit(int J) { return J >= 8 ? 1 : Isa::kMaxTile / J; }

// J input lanes of TG taps of one weight-gradient unit over `images` images: acc[t][j] holds
// dw[t][j][0..V) through every pixel of every image, in order (so the bits do not depend on
// how taps are grouped). dws[t] is where tap t's J x V floats live, offs[t] its input offset.
// kPacked: the input is a packed copy, lanes adjacent (the broadcasts' addresses then fold
// into the instructions); else NCHW, lanes a plane apart.
template <int J, bool kPacked>
void wgrad(float* const* dws, const int64_t* offs, const float* in, const float* dout,
           const WeightGrad& g, int64_t images) {
  constexpr int TG = taps_per_unit(J);
  Vec acc[TG][J];
  for (int t = 0; t < TG; ++t)
    for (int j = 0; j < J; ++j) acc[t][j] = Isa::load(dws[t] + j * V);
  const unsigned csr = Isa::begin_sums(acc);
  const int64_t lane = kPacked ? 1 : g.in_lane_step;
  for (int64_t i = 0; i < images; ++i) {
    const float* in_i = in + i * g.in_image;
    const float* dout_i = dout + i * g.out_image + g.out_origin;
    for (int64_t row = 0; row < g.rows; ++row) {
      const float* ip = in_i + row * g.in_row_step;
      const float* op = dout_i + row * g.out_row_step;
      for (int64_t col = 0; col < g.cols; ++col) {
        const auto d = Isa::operand(op + col * g.out_pix_step);
        const float* x = ip + col * g.in_pix_step;
        for (int t = 0; t < TG; ++t)
          for (int j = 0; j < J; ++j)
            acc[t][j] = Isa::fma(Isa::bcast(x + offs[t] + j * lane), d, acc[t][j]);
      }
    }
  }
  Isa::end_sums(acc, csr);
  for (int t = 0; t < TG; ++t)
    for (int j = 0; j < J; ++j) Isa::store(dws[t] + j * V, acc[t][j]);
}

// Two output blocks of one full input block and tap (AVX-512): each half of the input lanes in
// turn, 2 x V/2 accumulators, so a pixel costs two output-gradient loads and V/2 broadcasts for
// V FMAs, where wgrad<V> loads V + 1 values. Each dw element still sums its pixels in order:
// the same bits as wgrad<V>.
template <bool kPacked>
void wgrad_pair(float* dw0, float* dw1, const float* in, const float* dout0, const float* dout1,
                const WeightGrad& g, int64_t images) {
  constexpr int H = V / 2;
  const int64_t lane = kPacked ? 1 : g.in_lane_step;
  for (int half = 0; half < 2; ++half) {
    Vec acc[2][H];
    for (int j = 0; j < H; ++j) {
      acc[0][j] = Isa::load(dw0 + (half * H + j) * V);
      acc[1][j] = Isa::load(dw1 + (half * H + j) * V);
    }
    const unsigned csr = Isa::begin_sums(acc);
    const float* in_h = in + half * H * lane;
    for (int64_t i = 0; i < images; ++i) {
      const float* in_i = in_h + i * g.in_image;
      const int64_t o_i = i * g.out_image + g.out_origin;
      for (int64_t row = 0; row < g.rows; ++row) {
        const float* ip = in_i + row * g.in_row_step;
        const float* op0 = dout0 + o_i + row * g.out_row_step;
        const float* op1 = dout1 + o_i + row * g.out_row_step;
        for (int64_t col = 0; col < g.cols; ++col) {
          const auto d0 = Isa::operand(op0 + col * g.out_pix_step);
          const auto d1 = Isa::operand(op1 + col * g.out_pix_step);
          const float* x = ip + col * g.in_pix_step;
          for (int j = 0; j < H; ++j) {
            const auto xv = Isa::bcast(x + j * lane);
            acc[0][j] = Isa::fma(xv, d0, acc[0][j]);
            acc[1][j] = Isa::fma(xv, d1, acc[1][j]);
          }
        }
      }
    }
    Isa::end_sums(acc, csr);
    for (int j = 0; j < H; ++j) {
      Isa::store(dw0 + (half * H + j) * V, acc[0][j]);
      Isa::store(dw1 + (half * H + j) * V, acc[1][j]);
    }
  }
}

// Four output blocks of one full input block and tap (AVX-512): the input lanes in groups of
// J (Isa::kQuadLanes: 6, 6, 4; the emulated bf16 copy 4 x 4), 4 x J accumulators, so a pixel
// costs four output-gradient loads and J broadcasts for 4J FMAs (wgrad_pair: 2 loads and V/2
// broadcasts for V). Each dw element still sums its pixels in order: the same bits as
// wgrad_pair and wgrad<V>, whatever J.
template <bool kPacked, int J>
void wgrad_quad_lanes(float* const* dws, const float* in, const float* const* douts,
                      const WeightGrad& g, int64_t images, int l0) {
  const int64_t lane = kPacked ? 1 : g.in_lane_step;
  Vec acc[4][J];
  for (int k = 0; k < 4; ++k)
    for (int j = 0; j < J; ++j) acc[k][j] = Isa::load(dws[k] + (l0 + j) * V);
  const unsigned csr = Isa::begin_sums(acc);
  const float* in_l = in + l0 * lane;
  for (int64_t i = 0; i < images; ++i) {
    const float* in_i = in_l + i * g.in_image;
    const int64_t o_i = i * g.out_image + g.out_origin;
    for (int64_t row = 0; row < g.rows; ++row) {
      const float* ip = in_i + row * g.in_row_step;
      const int64_t o_r = o_i + row * g.out_row_step;
      for (int64_t col = 0; col < g.cols; ++col) {
        typename Isa::Operand d[4];
        for (int k = 0; k < 4; ++k) d[k] = Isa::operand(douts[k] + o_r + col * g.out_pix_step);
        const float* x = ip + col * g.in_pix_step;
        for (int j = 0; j < J; ++j) {
          const auto xv = Isa::bcast(x + j * lane);
          for (int k = 0; k < 4; ++k) acc[k][j] = Isa::fma(xv, d[k], acc[k][j]);
        }
      }
    }
  }
  Isa::end_sums(acc, csr);
  for (int k = 0; k < 4; ++k)
    for (int j = 0; j < J; ++j) Isa::store(dws[k] + (l0 + j) * V, acc[k][j]);
}

template <bool kPacked>
void wgrad_quad(float* const* dws, const float* in, const float* const* douts,
                const WeightGrad& g, int64_t images) {
  int l0 = 0;
  constexpr int J = Isa::kQuadLanes;
  for (; l0 + J <= V; l0 += J) wgrad_quad_lanes<kPacked, J>(dws, in, douts, g, images, l0);
  if constexpr (V % J != 0) wgrad_quad_lanes<kPacked, V % J>(dws, in, douts, g, images, l0);
}

using WgradFn = void (*)(float* const*, const int64_t*, const float*, const float*,
                         const WeightGrad&, int64_t);
template <bool kPacked, int... J>
constexpr Table<WgradFn, sizeof...(J)> wgrad_table(std::integer_sequence<int, J...>) {
  return {{&wgrad<J + 1, kPacked>...}};
}
constexpr auto kWgradsPacked = wgrad_table<true>(std::make_integer_sequence<int, V>{});
constexpr auto kWgradsNchw = wgrad_table<false>(std::make_integer_sequence<int, V>{});

// Output blocks per unit: the planner's two (wgrad_pair) or four (wgrad_quad; a last group of
// two or three: wgrad_pair, then one) with AVX-512, else one (AVX2's 16 registers hold no
// pair).
int64_t blocks_per_unit(const WeightGrad& g) { return V == 16 ? g.blocks : 1; }

// Units of each group of output blocks: every tap of each full input block, then the last
// block's taps in groups of taps_per_unit.
int64_t units_per_group(const WeightGrad& g) {
  const int64_t tg = taps_per_unit(int(g.in_lanes_last));
  return (g.in_blocks - 1) * g.ntaps + (g.ntaps + tg - 1) / tg;
}

int64_t weight_grad_units(const WeightGrad& g) {
  const int64_t per = blocks_per_unit(g);
  return (g.out_blocks + per - 1) / per * units_per_group(g);
}

void weight_grad(float* dw, const float* in, const float* dout, const WeightGrad& g,
                 int64_t unit, int64_t images) {
  const int64_t per = blocks_per_unit(g);
  const int64_t per_group = units_per_group(g), k0 = unit / per_group * per;
  const int64_t rest = unit % per_group, full = (g.in_blocks - 1) * g.ntaps;
  const int64_t b = rest < full ? rest / g.ntaps : g.in_blocks - 1;
  const int64_t J = b == g.in_blocks - 1 ? g.in_lanes_last : V;
  const int64_t tg = taps_per_unit(int(J));
  const int64_t t0 = rest < full ? rest % g.ntaps : (rest - full) * tg;
  const float* in_b = in + b * g.in_block;
  const bool packed = g.in_lane_step == 1;
  const int64_t k1 = min64(k0 + per, g.out_blocks);
  // Full input blocks: four output blocks at once, else pairs; then one at a time.
  int64_t k = k0;
  auto unit_dw = [&](int64_t kb) { return dw + ((kb * g.in_blocks + b) * g.ntaps + t0) * V * V; };
  if (J == V && k1 - k == 4) {  // (only with blocks = 4)
    float* dws[4];
    const float* douts[4];
    for (int q = 0; q < 4; ++q) {
      dws[q] = unit_dw(k + q);
      douts[q] = dout + (k + q) * g.out_block;
    }
    (packed ? &wgrad_quad<true> : &wgrad_quad<false>)(dws, in_b + g.taps[t0], douts, g, images);
    k += 4;
  }
  for (; J == V && k + 2 <= k1; k += 2)
    (packed ? &wgrad_pair<true> : &wgrad_pair<false>)(unit_dw(k), unit_dw(k + 1),
                                                      in_b + g.taps[t0], dout + k * g.out_block,
                                                      dout + (k + 1) * g.out_block, g, images);
  const WgradFn fn = packed ? kWgradsPacked.f[J - 1] : kWgradsNchw.f[J - 1];
  for (; k < k1; ++k) {
    float* base = dw + (k * g.in_blocks + b) * g.ntaps * V * V;
    // A last group short of taps computes its missing ones into scratch (tap 0's inputs).
    alignas(64) float scratch[Isa::kMaxTile * V] = {};
    float* dws[Isa::kMaxTile];
    int64_t offs[Isa::kMaxTile];
    for (int64_t t = 0; t < tg; ++t) {
      const bool live = t0 + t < g.ntaps;
      dws[t] = live ? base + (t0 + t) * V * V : scratch;
      offs[t] = live ? g.taps[t0 + t] : g.taps[0];
    }
    fn(dws, offs, in_b, dout + k * g.out_block, g, images);
  }
}

}  // namespace

#ifndef MPICNN_DIRECT_PAIRS
const Kernels kKernels = {Isa::kName, V,           Isa::kMaxTile,      1,      &pack_image,
                          &pass_rows, &weight_grad, &weight_grad_units, nullptr};
#endif

}  // namespace mpicnn::direct::MPICNN_DIRECT_NS
