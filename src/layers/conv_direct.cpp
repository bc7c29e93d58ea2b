// Direct convolution, its plan: whether the kernels take a layer (supports, why_not,
// bf16_weight_grad_fits) and, for one that they take, the blocked layouts, live taps, stride
// phases, tiles and workspace. See conv_direct.h; the packing and the passes that walk these
// layouts are conv_direct_run.cpp. The float64 test build (real = double) has no direct kernels:
// fits() is false there, Conv2d stays on im2col, and the plan is left out of it.
#include "layers/conv_direct.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/check.h"
#include "layers/conv_direct_tiles.h"

namespace mpicnn {

namespace {

const direct::Kernels* kernels_of(DirectIsa isa) {
#if defined(MPICNN_F64) && MPICNN_F64
  (void)isa;
  return nullptr;
#else
  switch (isa) {
    case DirectIsa::kAvx512:
      return direct::avx512_kernels();
    case DirectIsa::kAvx2:
      return direct::avx2_kernels();
    case DirectIsa::kNone:
      return nullptr;
  }
  return nullptr;
#endif
}

// The bf16 kernels of the bf16 GEMM's path (core/gemm_bf16.h): the native ones, the same bits
// emulated in AVX-512F, or none (the reference path, or a CPU without AVX-512).
// (Not in the float64 build, which has no direct kernels.)
#if !defined(MPICNN_F64) || !MPICNN_F64
const direct::Kernels* bf16_kernels() {
  if (bf16_native()) return direct::avx512bf16_kernels();
  return bf16_avx512() ? direct::bf16_avx512f_kernels() : nullptr;
}
#endif

}  // namespace

bool DirectConv::supports(const ConvGeometry& g, int groups, bool bf16, DirectIsa isa) {
  (void)g;
  if (groups != 1 || kernels_of(isa) == nullptr) return false;
#if defined(MPICNN_F64) && MPICNN_F64
  return !bf16;
#else
  return !bf16 || (isa == DirectIsa::kAvx512 && bf16_kernels());
#endif
}

const char* DirectConv::why_not(const ConvGeometry& g, int groups, bool bf16,
                                const ExecConfig& cfg) {
  if (cfg.conv != ConvAlgorithm::kDirect) return "another algorithm asked for (MPICNN_CONV)";
  if (groups != 1) return "a grouped convolution";
  if (!supports(g, groups, bf16, cfg.isa)) {
    if (!supports(g, groups, false, cfg.isa)) return "no direct kernels for this CPU or build";
    return "no bf16 direct kernels here: they need AVX-512";
  }
#if defined(MPICNN_F64) && MPICNN_F64
  return nullptr;
#else
  // A 1x1 layer's input is already im2col's column matrix, which the bf16 GEMM reads where it
  // is; the bf16 kernels first repack it as channel pairs. At ResNet-50's 1x1 shapes the GEMMs
  // measured faster for forward and backward together (resnet50 training 2-3% faster end to
  // end), the kernels for forward alone (inference 4%): so in bf16 a 1x1 layer runs direct in
  // inference plans only (ExecConfig::inference), and a strided one (whose packing would convert
  // every pixel for a quarter of them) never (bench/conv_bench --bf16 1, bench/RESULTS.md).
  // The emulated copy (a CPU without AVX512-BF16) splits each weight pair it loads into two
  // floats, which a layer of few input channels pays for on every tap: at ResNet-18's 3-channel
  // stem it took 71 ms a forward against im2col's 44 (train_bench --profile 1), and with its
  // inputs packed split still 84-88 against 56-60 (conv_bench --bf16 1; the native copy is the
  // faster there), so such layers stay on im2col (bench/RESULTS.md).
  if (!bf16) return nullptr;
  const bool pointwise = g.kernel_h == 1 && g.kernel_w == 1 && g.pad_h == 0 && g.pad_w == 0;
  const bool strided = g.stride_h > 1 || g.stride_w > 1;
  if (pointwise && strided) return "bf16 1x1 strided: the GEMM reads the pixels it needs";
  if (pointwise && !cfg.inference) return "bf16 1x1 in training: the GEMMs measured faster";
  if (g.channels < 16 && !bf16_native())
    return "bf16 emulated, under 16 input channels: im2col measured faster";
  if (!cfg.conv_bf16_direct) return "bf16 convolutions kept on im2col (MPICNN_CONV_BF16)";
  return nullptr;
#endif
}

#if defined(MPICNN_F64) && MPICNN_F64
DirectConv::DirectConv(const ConvGeometry&, int64_t, int64_t, bool, DirectIsa) {
  FAIL("DirectConv: float32 only (the float64 build runs im2col)");
}
bool DirectConv::bf16_weight_grad_fits(const ConvGeometry&, DirectIsa) { return false; }
int64_t DirectConv::workspace_floats() const { return 0; }
void DirectConv::forward(real*, const real*, const real*, const real*, int64_t, real*) const {
  FAIL("DirectConv: float32 only");
}
void DirectConv::backward(real*, real*, const real*, const real*, const real*, int64_t,
                          real*) const {
  FAIL("DirectConv: float32 only");
}
#else

using direct::balanced_tile;
using direct::ceil_div;

namespace {

// Images whose packed input and output gradient backward holds at once: up to this many
// floats (16 MiB), at least one image.
constexpr int64_t kBackwardBudget = int64_t(4) << 20;

// Floor division and remainder for a possibly negative numerator.
int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// Taps along one axis of the input gradient's phase `ph`: output index i of the phase (input
// position ph + stride * i) reads output-gradient position i + c through kernel tap k.
struct AxisTap {
  int64_t k, c;
};
std::vector<AxisTap> phase_taps(int64_t ph, int64_t count, int64_t kernel, int64_t stride,
                                int64_t pad, int64_t dilation, int64_t out) {
  std::vector<AxisTap> taps;
  for (int64_t k = 0; k < kernel; ++k) {
    const int64_t num = ph + pad - k * dilation;
    if (num - floor_div(num, stride) * stride != 0) continue;
    const int64_t c = floor_div(num, stride);
    // live: some i in [0, count) reads a real position 0 <= i + c < out
    if (std::max<int64_t>(0, -c) <= std::min(count - 1, out - 1 - c)) taps.push_back({k, c});
  }
  return taps;
}

// Whether forward's tap k along one axis reads a real input position for some output index.
bool forward_live(int64_t k, int64_t in, int64_t out, int64_t stride, int64_t pad,
                  int64_t dilation) {
  for (int64_t o = 0; o < out; ++o) {
    const int64_t i = o * stride - pad + k * dilation;
    if (i >= 0 && i < in) return true;
  }
  return false;
}

// The one live tap along an axis when exactly one is live and it reads no padding for any
// output, at offset 0 (output o reads input o * stride), else -1.
int64_t single_tap(int64_t kernel, int64_t in, int64_t out, int64_t stride, int64_t pad,
                   int64_t dilation) {
  int64_t live = -1;
  for (int64_t k = 0; k < kernel; ++k) {
    if (!forward_live(k, in, out, stride, pad, dilation)) continue;
    if (live >= 0) return -1;
    live = k;
  }
  if (live < 0 || live * dilation != pad || (out - 1) * stride >= in) return -1;
  return live;
}

// The geometry the kernels run: a layer whose one live tap per axis reads no padding runs as
// 1x1 on the pixels that tap reads, (kh0, kw0) that tap; else `full` itself and (-1, -1).
ConvGeometry kernel_geometry(const ConvGeometry& full, int64_t& kh0, int64_t& kw0) {
  kh0 = single_tap(full.kernel_h, full.height, full.out_h, full.stride_h, full.pad_h, full.dilation_h);
  kw0 = single_tap(full.kernel_w, full.width, full.out_w, full.stride_w, full.pad_w, full.dilation_w);
  ConvGeometry g = full;
  if (kh0 < 0 || kw0 < 0 || full.taps() <= 1) {
    kh0 = kw0 = -1;
    return g;
  }
  g.kernel_h = g.kernel_w = 1;
  g.pad_h = g.pad_w = 0;
  g.dilation_h = g.dilation_w = 1;
  return g;
}

// Rows shorter than a quarter of a tile (AVX-512: 6 pixels) leave most accumulators idle:
// then images are interleaved per pixel in the packed copies and tiles run across images
// (DirectConv::batch_inner_). At 7x7 rows of 7 still measured faster (bench/RESULTS.md).
bool batch_inner(const ConvGeometry& g, const direct::Kernels& k) { return g.out_w * 4 < k.max_tile; }

}  // namespace

// The weight gradient in bf16 only for layers of stride 1 whose rows hold 8 pixels or more:
// the bf16 GEMM over im2col measured faster on 1x1 layers (whose input is already im2col's
// column matrix) and on rows of 7 (a pair in four half empty), and as fast on strided layers
// (whose pairs pack the whole input for a quarter of the pixels; bench/conv_bench --bf16 1,
// bench/RESULTS.md).
bool DirectConv::bf16_weight_grad_fits(const ConvGeometry& full, DirectIsa isa) {
  const direct::Kernels* k = kernels_of(isa);
  if (k == nullptr) return false;
  int64_t kh0, kw0;
  const ConvGeometry g = kernel_geometry(full, kh0, kw0);
  return !batch_inner(g, *k) && !g.is_pointwise() && g.stride_h == 1 && g.stride_w == 1 && g.out_w >= 8;
}

DirectConv::DirectConv(const ConvGeometry& full, int64_t out_channels, int64_t max_batch, bool bf16,
                       DirectIsa isa)
    : k_(kernels_of(isa)), g_(full), oc_(out_channels) {
  CHECK(k_, "DirectConv: no direct kernels for this CPU or build");
  CHECK(!bf16 || supports(full, 1, true, isa), "DirectConv: no bf16 direct kernels for this CPU (",
        "the avx512 kernels and the bf16 GEMM's native or AVX-512F path needed)");
  src_taps_ = full.taps(), src_kw_ = full.kernel_w;
  int64_t kh0, kw0;
  g_ = kernel_geometry(full, kh0, kw0);
  if (kh0 >= 0) kh0_ = kh0, kw0_ = kw0;
  const ConvGeometry& g = g_;
  const int64_t V = k_->vec;
  in_blocks_ = ceil_div(g.channels, V);
  out_blocks_ = ceil_div(oc_, V);
  const int64_t out_image = oc_ * g.out_plane();

  batch_inner_ = batch_inner(g, *k_);

  // Input gradient's stride phases: input pixels (ph + SH*i, pw + SW*j) are a stride-1
  // correlation of the output gradient with the phase's taps. Their reads fix the zero border
  // of the packed output gradient.
  std::vector<std::vector<AxisTap>> rows(size_t(g.stride_h)), cols(size_t(g.stride_w));
  std::vector<int64_t> nhs(size_t(g.stride_h)), nws(size_t(g.stride_w));
  int64_t top = 0, bottom = 0, left = 0, right = 0;
  for (int64_t ph = 0; ph < g.stride_h; ++ph) {
    const int64_t n = ph < g.height ? ceil_div(g.height - ph, g.stride_h) : 0;
    nhs[size_t(ph)] = n;
    rows[size_t(ph)] = phase_taps(ph, n, g.kernel_h, g.stride_h, g.pad_h, g.dilation_h, g.out_h);
    for (const AxisTap& t : rows[size_t(ph)]) {
      top = std::max(top, -t.c);
      bottom = std::max(bottom, n - 1 + t.c - (g.out_h - 1));
    }
  }
  for (int64_t pw = 0; pw < g.stride_w; ++pw) {
    const int64_t n = pw < g.width ? ceil_div(g.width - pw, g.stride_w) : 0;
    nws[size_t(pw)] = n;
    cols[size_t(pw)] = phase_taps(pw, n, g.kernel_w, g.stride_w, g.pad_w, g.dilation_w, g.out_w);
    for (const AxisTap& t : cols[size_t(pw)]) {
      left = std::max(left, -t.c);
      right = std::max(right, n - 1 + t.c - (g.out_w - 1));
    }
  }

  // Packed copies: the input with its zero padding, the output gradient with its border.
  const direct::BlockedImage in_img{g.channels, g.height, g.width, g.height + 2 * g.pad_h,
                                    g.width + 2 * g.pad_w, g.pad_h, g.pad_w, V};
  dout_img_ = {oc_, g.out_h, g.out_w, top + g.out_h + bottom, left + g.out_w + right,
               top, left, V};
  // Images packed at once (backward; forward too when batch_inner_): a rule on the geometry.
  const int64_t per_image = in_blocks_ * in_img.rows * in_img.cols * V +
                            out_blocks_ * dout_img_.rows * dout_img_.cols * V;
  chunk_ = std::clamp<int64_t>(kBackwardBudget / per_image, 1, max_batch);
  // How each pass reads: where it is (NCHW, lane step the plane) when no border is needed,
  // else the packed copy, image after image or images interleaved per pixel.
  // (Not with interleaved images: runs across NCHW images would read at strides of whole
  // images, often multiples of 4 KiB, which thrash the L1 sets.)
  const bool raw_dout = top == 0 && bottom == 0 && left == 0 && right == 0 && !batch_inner_;
  dpk_l_ = packed_layout(dout_img_, out_blocks_, 1);

  // Forward: in float32 (it also lays out the input the weight gradient reads), and in bf16 on
  // the pairs kernels, whose input is always a packed copy (of bf16 pairs).
  f32_ = plan_forward(k_, V, g.pad_h == 0 && g.pad_w == 0 && !batch_inner_);
  if (bf16) bf16_ = plan_forward(bf16_kernels(), 2 * V, false);
  const int64_t px = chunk_ * V;

  // Input gradient: one pass per phase with taps; pixels of a phase without taps get zero.
  // In float32 on dout where it is (raw) or its packed copy, or in bf16 on a copy packed as
  // pairs (the same border), with `block_channels` output-gradient channels a block.
  auto plan_data = [&](const direct::Kernels* k, bool raw, int64_t block_channels) {
    Data d;
    d.k = k;
    d.raw = raw;
    d.img = dout_img_;
    const int64_t blocks = ceil_div(oc_, block_channels);
    d.l = raw ? Layout{1, g.out_w, g.out_plane(), V * g.out_plane(), out_image}
              : packed_layout(d.img, blocks, k->lane_words);
    d.image_floats = raw ? 0 : blocks * d.img.rows * d.img.cols * V * d.img.words;
    for (int64_t ph = 0; ph < g.stride_h; ++ph) {
      for (int64_t pw = 0; pw < g.stride_w; ++pw) {
        const int64_t nh = nhs[size_t(ph)], nw = nws[size_t(pw)];
        if (nh == 0 || nw == 0) continue;
        if (rows[size_t(ph)].empty() || cols[size_t(pw)].empty()) {
          data_zero_first_ = true;
          continue;
        }
        Phase phase;
        for (const AxisTap& th : rows[size_t(ph)])
          for (const AxisTap& tw : cols[size_t(pw)]) {
            phase.taps.push_back(th.c * d.l.row + tw.c * d.l.pix);
            phase.ids.push_back(src_tap(th.k, tw.k));
          }
        direct::Pass& p = phase.pass;
        p.in_blocks = blocks;
        p.in_lanes_last = ceil_div(oc_ - (blocks - 1) * block_channels, block_channels / V);
        p.in_origin = raw ? 0 : top * d.l.row + left * d.l.pix;
        p.in_row_step = d.l.row;
        p.in_pix_step = d.l.pix;
        p.ntaps = int64_t(phase.taps.size());
        p.rows = nh;
        p.cols = nw;
        p.out_channels = g.channels;
        p.out_plane = g.in_plane();
        p.out_origin = ph * g.width + pw;
        p.out_row_step = g.stride_h * g.width;
        p.out_col_step = g.stride_w;
        phase.columns = nw;
        phase.step = {d.l.pix, g.stride_w * px};
        if (g.is_pointwise() && !batch_inner_) {
          // Input pixel p reads output-gradient pixel p (no border): the plane as one row.
          p.rows = 1, p.cols = g.in_plane();
          p.in_row_step = p.out_row_step = 0;
        }
        finish(*k, p, d.l, in_blocks_);
        phase.weight_offset = d.weight_floats;
        d.weight_floats += in_blocks_ * blocks * p.ntaps * V * V;
        d.phases.push_back(std::move(phase));
      }
    }
    return d;
  };
  data32_ = plan_data(k_, raw_dout, V);
  if (bf16) data16_ = plan_data(bf16_kernels(), false, 2 * V);

  // Weight gradient: forward's input and taps against the packed output gradient.
  wg_.in_blocks = in_blocks_;
  wg_.in_lanes_last = f32_.pass.in_lanes_last;
  wg_.in_block = f32_.l.block;
  wg_.in_lane_step = f32_.l.lane;
  wg_.in_row_step = g.stride_h * f32_.l.row;
  wg_.in_pix_step = g.stride_w * f32_.l.pix;
  wg_.in_image = f32_.l.image;
  wg_.ntaps = f32_.pass.ntaps;
  wg_.out_blocks = out_blocks_;
  wg_.out_block = dpk_l_.block;
  wg_.out_image = dpk_l_.image;
  wg_.out_origin = top * dpk_l_.row + left * dpk_l_.pix;
  wg_.out_row_step = dpk_l_.row;
  wg_.out_pix_step = dpk_l_.pix;
  wg_.rows = g.out_h;
  wg_.cols = g.out_w;
  // Units of two output blocks halve the loads per FMA; with interleaved images they measured
  // slower (each half pass reads the input's cache lines again), so one block there.
  wg_.blocks = batch_inner_ ? 1 : 2;
  // Units outside images when dw is larger than an image's packed data (and always with
  // interleaved images), else inside: a rule on the geometry alone (the two orders give
  // different bits, never different thread counts).
  wgrad_units_outer_ =
      batch_inner_ || out_blocks_ * in_blocks_ * int64_t(f32_.taps.size()) * V * V > per_image;

  // The weight gradient in bf16: the same units over pixel pairs. The input packed as forward's
  // float32 copy would be (V channels a block, its taps), a word a pixel and the one a stride to
  // its right, so that one step of two output pixels is 2 strides; the output gradient as pairs
  // of neighbouring pixels, an odd row's last pair ending in a zero (whose input partner the
  // packing zeroes too where it falls past the padded row). Where bf16_weight_grad_fits.
  if (bf16 && bf16_weight_grad_fits(full, isa)) {
    Wgrad16& w16 = wgrad16_;
    w16.in = plan_forward(bf16_kernels(), V, false);
    w16.dout_img = {oc_, g.out_h, g.out_w, g.out_h, ceil_div(g.out_w, 2), 0, 0, V};
    w16.dout_l = packed_layout(w16.dout_img, out_blocks_, 1);  // the vector operand
    direct::WeightGrad& wg = w16.g;
    wg = wg_;
    wg.in_lanes_last = w16.in.pass.in_lanes_last;
    wg.in_block = w16.in.l.block;
    wg.in_lane_step = w16.in.l.lane;
    wg.in_row_step = g.stride_h * w16.in.l.row;
    wg.in_pix_step = 2 * g.stride_w * w16.in.l.pix;
    wg.in_image = w16.in.l.image;
    wg.out_block = w16.dout_l.block;
    wg.out_image = w16.dout_l.image;
    wg.out_origin = 0;
    wg.out_row_step = w16.dout_l.row;
    wg.out_pix_step = w16.dout_l.pix;
    wg.cols = w16.dout_img.cols;
    // Units of four output blocks: 0.42 loads per vdpbf16ps where pairs need 0.63; 5-13%
    // faster on ResNet's stride-1 3x3 layers in bf16 (slower in float32, which keeps pairs).
    wg.blocks = 4;
  }
}

int64_t DirectConv::wgrad_in_floats() const {
  return bf16_weight_grad() ? wgrad16_.in.image_floats : f32_.image_floats;
}
int64_t DirectConv::wgrad_dout_floats() const {
  return bf16_weight_grad() ? packed_floats(wgrad16_.dout_img) : packed_floats(dout_img_);
}

// How a pass reads packed copies of b (sets b.pix and b.words): image after image, or
// interleaved per pixel with batch_inner_; `blocks` blocks of V floats (or V bf16 pairs, in
// `words` 32-bit words each: BlockedImage::words) a pixel.
DirectConv::Layout DirectConv::packed_layout(direct::BlockedImage& b, int64_t blocks,
                                             int64_t words) const {
  const int64_t V = k_->vec, images = batch_inner_ ? chunk_ : 1;
  b.words = words;
  b.pix = images * V * words;
  Layout l{b.pix, b.cols * b.pix, 1, b.rows * b.cols * b.pix, 0};
  l.image = batch_inner_ ? V * words : blocks * l.block;
  return l;
}

// A pass tiles a row of one image, or (batch_inner_) the images at one pixel column; then it
// stores whole vectors into an interleaved blocked buffer [blocks][plane][chunk][V] (px
// floats a pixel), which unpack() turns into NCHW, rather than scatter lanes across images.
void DirectConv::finish(const direct::Kernels& k, direct::Pass& p, const Layout& l,
                        int64_t out_blocks) const {
  const int64_t px = chunk_ * k_->vec;
  p.in_block = l.block;
  p.in_lane_step = l.lane;
  if (batch_inner_) {
    p.in_pix_step = l.image;
    p.cols = chunk_;
    p.out_blocked = true;
    p.out_plane *= px;
    p.out_origin *= px;
    p.out_row_step *= px;
    p.out_col_step = k_->vec;
  }
  p.ob = std::min<int64_t>(2, out_blocks);
  p.r = balanced_tile(p.cols, k.max_tile / p.ob);
}

// Forward on kernels k, whose input blocks hold `block_channels` channels (V floats, or V bf16
// pairs, k->lane_words 32-bit words each); raw: the input is read where it is (NCHW).
DirectConv::Forward DirectConv::plan_forward(const direct::Kernels* k, int64_t block_channels,
                                             bool raw) const {
  const ConvGeometry& g = g_;
  const int64_t V = k_->vec, blocks = ceil_div(g.channels, block_channels);
  Forward f;
  f.k = k;
  f.raw = raw;
  f.img = {g.channels, g.height, g.width, g.height + 2 * g.pad_h, g.width + 2 * g.pad_w,
           g.pad_h, g.pad_w, V};
  f.l = raw ? Layout{1, g.width, g.in_plane(), V * g.in_plane(), g.channels * g.in_plane()}
            : packed_layout(f.img, blocks, k->lane_words);
  f.image_floats = raw ? 0 : blocks * f.img.rows * f.img.cols * V * f.img.words;
  // Live taps only (a tap that reads only padding adds nothing: ResNet's 3x3 layers on a 1x1
  // map keep their centre tap).
  for (int64_t kh = 0; kh < g.kernel_h; ++kh) {
    if (!forward_live(kh, g.height, g.out_h, g.stride_h, g.pad_h, g.dilation_h)) continue;
    for (int64_t kw = 0; kw < g.kernel_w; ++kw) {
      if (!forward_live(kw, g.width, g.out_w, g.stride_w, g.pad_w, g.dilation_w)) continue;
      f.taps.push_back(kh * g.dilation_h * f.l.row + kw * g.dilation_w * f.l.pix);
      f.ids.push_back(src_tap(kh, kw));
    }
  }
  direct::Pass& p = f.pass;
  p.in_blocks = blocks;
  // Lanes of the last block: floats, or pairs (the last one's odd channel a zero).
  p.in_lanes_last = ceil_div(g.channels - (blocks - 1) * block_channels, block_channels / V);
  p.in_row_step = g.stride_h * f.l.row;
  p.in_pix_step = g.stride_w * f.l.pix;
  p.ntaps = int64_t(f.taps.size());
  p.rows = g.out_h;
  p.cols = g.out_w;
  p.out_channels = oc_;
  p.out_plane = g.out_plane();
  p.out_row_step = g.out_w;
  p.out_col_step = 1;
  f.step = {g.stride_w * f.l.pix, chunk_ * V};
  if (g.is_pointwise() && !batch_inner_) {
    // Output pixel p reads input pixel p (no padding, as is or packed without a border): the
    // plane as one row, no short tiles at row ends.
    p.rows = 1, p.cols = g.out_plane();
    p.in_row_step = p.out_row_step = 0;
  }
  finish(*k, p, f.l, out_blocks_);
  f.slots = raw || batch_inner_ ? 0 : std::max(1, omp_get_max_threads());
  return f;
}

int64_t DirectConv::packed_floats(const direct::BlockedImage& b) const {
  return ceil_div(b.channels, k_->vec) * b.rows * b.cols * k_->vec;
}

// Floats of forward's packed weights in plan f: [out block][in block][tap] blocks of V x V
// floats (or of V pairs x V bf16 pairs: the same bytes).
int64_t DirectConv::weight_floats(const Forward& f) const {
  return out_blocks_ * f.pass.in_blocks * f.pass.ntaps * k_->vec * k_->vec;
}

int64_t DirectConv::workspace_floats() const {
  const int64_t V = k_->vec;
  const int64_t wf = weight_floats(f32_);
  // Interleaved images: the blocked outputs of forward and of the input gradient too.
  const int64_t out_b = batch_inner_ ? chunk_ * out_blocks_ * g_.out_plane() * V : 0;
  const int64_t din_b = batch_inner_ ? chunk_ * in_blocks_ * g_.in_plane() * V : 0;
  const Forward& f = fwd();
  const Data& d = data();
  const int64_t fwd = weight_floats(f) + (batch_inner_ ? chunk_ : f.slots) * f.image_floats + out_b;
  // The bf16 input gradient reads its own packed copy of dout, next to the weight gradient's.
  const int64_t dout16 = &d == &data16_ ? d.image_floats : 0;
  const int64_t bwd =
      d.weight_floats + wf + chunk_ * (wgrad_in_floats() + wgrad_dout_floats() + dout16) + din_b;
  return std::max(fwd, bwd);
}

#endif  // MPICNN_F64

}  // namespace mpicnn
