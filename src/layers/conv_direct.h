// Direct convolution on channel-blocked layouts for Conv2d on the CPU (groups 1):
// each image is repacked to [C/V][H+2p][W+2p][V] (V = 16 with AVX-512, 8 with AVX2) inside
// the layer (a layer without padding reads NCHW as it is), and register-blocked kernels
// (layers/cpu/) compute tiles of output pixels x 16 or 32 output channels straight from it,
// without a column matrix. Tensors between layers stay
// NCHW. One kernel family runs all three passes: forward; the input gradient as a forward
// pass per stride phase over the output gradient with the weights transposed and rotated; the
// weight gradient per (output block, input block, tap), summed over images in image order, so
// every thread count gives the same bits. Not for grouped convolutions (Conv2d keeps im2col),
// nor the float64 test build (real = double), where fits() is false.
// In bf16 (Conv2d planned in Precision::kBf16, on a CPU with AVX512-BF16) forward runs the
// same passes on the bf16 kernels (layers/cpu/conv_direct_avx512bf16.cpp): the input packed as
// bf16 pairs, 32 channels a block ([C/32][H+2p][W+2p][16 pairs][2]), the weights as
// [out block][pair block][tap][16 pairs][16 out][2], both rounded to nearest even exactly as
// core/gemm_bf16's bf16_round, products summed in float32 by vdpbf16ps, bias and output float32
// NCHW: the im2col bf16 path's terms, summed in another order. The input gradient likewise:
// its phases on the output gradient packed as bf16 pairs and the transposed weights rounded.
// The weight gradient in bf16 pairs pixels instead of channels (vdpbf16ps sums over its
// reduction, the pixels): the input packed [C/16][H+2p][W+2p][16] with each word a pixel and
// the one a stride to its right, the output gradient [OC/16][OH][OW/2][16] with each word two
// neighbouring pixels, both rounded to bf16 as above, and the float32 kernels' loops run over
// pairs of output pixels into float32 dw. Only for stride 1, not 1x1, and rows of 8 pixels or
// more (where it measured faster): elsewhere bf16_weight_grad() is false and Conv2d takes the
// weight gradient from im2col's bf16 GEMMs.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/exec.h"
#include "core/gemm_bf16.h"
#include "core/real.h"
#include "layers/cpu/conv_direct_kernels.h"
#include "layers/im2col.h"

namespace mpicnn {

class DirectConv {
 public:
  DirectConv() = default;
  // Whether the direct kernels can compute this geometry with `groups` groups on this CPU
  // and build with instruction set `isa` (groups 1, kernels for it); with bf16, also forward in
  // bf16: the AVX-512 kernels and a bf16 path with AVX-512 kernels (core/gemm_bf16.h's
  // bf16_avx512: native, or emulated on AVX-512F; not MPICNN_BF16=reference).
  static bool supports(const ConvGeometry& g, int groups, bool bf16, DirectIsa isa);
  // Whether Conv2d takes them under cfg: supports(g, groups, bf16, cfg.isa), and with bf16
  // cfg.conv_bf16_direct and where they measured faster than im2col's bf16 GEMMs: no 1x1
  // layer but, in an inference plan, an unstrided one; on the emulated path, 16 input
  // channels or more.
  static bool fits(const ConvGeometry& g, int groups, bool bf16, const ExecConfig& cfg) {
    return why_not(g, groups, bf16, cfg) == nullptr;
  }
  // Why Conv2d does not take them under cfg (cfg.conv another algorithm included), in a few
  // words for --explain-plan; nullptr when it does.
  static const char* why_not(const ConvGeometry& g, int groups, bool bf16, const ExecConfig& cfg);
  // Whether a plan in bf16 on isa's kernels computes the weight gradient in bf16 too
  // (bf16_weight_grad(): stride 1, not 1x1, rows of 8 pixels or more, as the kernels run the
  // geometry).
  static bool bf16_weight_grad_fits(const ConvGeometry& g, DirectIsa isa);
  // Plans geometry g with out_channels outputs for batches of up to max_batch images, on the
  // kernels of instruction set isa; forward and the input gradient in bf16 when bf16
  // (supports(g, 1, true, isa) must hold).
  DirectConv(const ConvGeometry& g, int64_t out_channels, int64_t max_batch, bool bf16,
             DirectIsa isa);
  bool planned() const { return k_ != nullptr; }
  // Whether backward computes the weight gradient in bf16 (planned with bf16; stride 1, not
  // 1x1, rows of 8+); with bf16 planned and not this, backward must be given no gw.
  bool bf16_weight_grad() const { return wgrad16_.in.k != nullptr; }
  const char* isa() const { return k_ ? k_->name : "none"; }
  // Floats of workspace forward and backward need (one buffer, the caller's).
  int64_t workspace_floats() const;

  // out (n, OC, OH, OW) '=' conv(in (n, IC, H, W), w (OC, IC, KH, KW)) + bias (OC, or null).
  void forward(real* out, const real* in, const real* w, const real* bias, int64_t n,
               real* ws) const;
  // din (n, IC, H, W) '=' the input gradient (skipped when null); gw (OC, IC, KH, KW) '+=' the
  // weight gradient (skipped when null), from dout (n, OC, OH, OW).
  void backward(real* din, real* gw, const real* dout, const real* in, const real* w,
                int64_t n, real* ws) const;

 private:
  // How a pass reads a set of images: floats between the pixels of a row, rows, lanes (1 in a
  // packed copy, the plane in NCHW), channel blocks and images.
  struct Layout {
    int64_t pix = 0, row = 0, lane = 0, block = 0, image = 0;
  };
  // Runs of a pass: run i reads in + i * in and writes out + i * out.
  struct Step {
    int64_t in = 0, out = 0;
  };
  struct Phase {                // one stride phase of the input gradient
    direct::Pass pass;          // taps and weights filled in at call time
    std::vector<int64_t> taps;  // offsets in the output gradient's layout
    std::vector<int32_t> ids;   // kh * KW + kw of each tap
    int64_t weight_offset = 0;  // floats into the packed transposed weights
    int64_t columns = 0;        // the phase's pixel columns (runs, with interleaved images)
    Step step;                  // from one pixel column to the next
  };
  // How forward reads its input and runs, on one kernel set.
  struct Forward {
    const direct::Kernels* k = nullptr;  // null: not planned
    direct::BlockedImage img;            // the packed input
    Layout l;                            // how forward reads its input
    bool raw = false;                    // no padding: the input read as is (NCHW)
    int64_t image_floats = 0;            // of one packed input image (0 when raw)
    std::vector<int64_t> taps;           // live taps: offsets in l
    std::vector<int32_t> ids;            // and their taps in the layer's weights (src_tap)
    direct::Pass pass;                   // taps and weights filled in at call time
    Step step;                           // from one output column to the next (batch_inner_)
    int slots = 1;  // packed images: one per thread at plan time (0: none needed)
  };
  // How the input gradient reads the output gradient and runs its phases, on one kernel set.
  struct Data {
    const direct::Kernels* k = nullptr;  // null: not planned
    direct::BlockedImage img;            // the packed output gradient (with its border)
    Layout l;                            // how the phases read it
    bool raw = false;                    // no border needed: dout read as is (NCHW)
    int64_t image_floats = 0;            // of one packed image (0 when raw)
    std::vector<Phase> phases;
    int64_t weight_floats = 0;  // of the packed transposed weights of every phase
  };
  Forward plan_forward(const direct::Kernels* k, int64_t block_channels, bool raw) const;
  Layout packed_layout(direct::BlockedImage& b, int64_t blocks, int64_t words) const;
  void finish(const direct::Kernels& k, direct::Pass& p, const Layout& l,
              int64_t out_blocks) const;
  const Forward& fwd() const { return bf16_.k ? bf16_ : f32_; }  // the plan forward runs
  const Data& data() const { return data16_.k ? data16_ : data32_; }  // and the input gradient
  int64_t weight_floats(const Forward& f) const;
  int64_t packed_floats(const direct::BlockedImage& b) const;  // one image
  void pack_forward_weights(float* wf, const float* w) const;
  const bf16_t* rounded_weights(const float* w) const;  // this thread's buffer
  void pack_pair_weights(float* dst, const bf16_t* wq, int64_t out_blocks, int64_t pair_blocks,
                         const std::vector<int32_t>& ids, bool transposed) const;
  void pack_data_weights(float* wd, const float* w) const;
  void pack(const direct::Kernels& k, float* dst, const float* src, int64_t src_image,
            const direct::BlockedImage& img, const Layout& l, int64_t c0, int64_t B) const;
  void run_pass(const direct::Kernels& k, float* out, const float* in, const direct::Pass& p,
                const float* bias, int64_t count, Step step) const;
  void unpack(float* out, const float* b, int64_t channels, int64_t plane, int64_t B,
              const float* bias) const;

  const direct::Kernels* k_ = nullptr;
  // The geometry planned: the layer's own, or, when one tap alone reads real input and never
  // padding (ResNet's 3x3 pad-1 layers on a 1x1 map: the centre), a 1x1 convolution without
  // padding. Weight element (oc, ic, kh, kw) of g_ is w[(oc * IC + ic) * src_taps_ +
  // (kh + kh0_) * src_kw_ + kw + kw0_] of the layer's weights.
  ConvGeometry g_;
  int64_t src_taps_ = 1, src_kw_ = 1, kh0_ = 0, kw0_ = 0;
  int32_t src_tap(int64_t kh, int64_t kw) const {
    return int32_t((kh + kh0_) * src_kw_ + kw + kw0_);
  }
  int64_t oc_ = 0, in_blocks_ = 0, out_blocks_ = 0;
  // Rows shorter than half a tile: the packed copies interleave the images of a chunk per
  // pixel ([blocks][rows][cols][chunk][V]) and tiles run across images at one pixel.
  bool batch_inner_ = false;
  int64_t chunk_ = 1;               // images packed at once
  direct::BlockedImage dout_img_;  // packed output gradient (the weight gradient's, float32)
  Layout dpk_l_;                   // its packing
  // Forward in float32; its input layout and taps are also the weight gradient's.
  Forward f32_;
  Forward bf16_;  // forward in bf16, when planned so (then forward runs it, not f32_)
  Data data32_;   // the input gradient in float32
  Data data16_;   // and in bf16, when planned so (then backward runs it)
  bool data_zero_first_ = false;  // some input-gradient pixel gets no tap: din starts at 0
  direct::WeightGrad wg_;
  bool wgrad_units_outer_ = false;  // weight gradient: units outside images, or inside
  // The weight gradient in bf16, when planned so (then backward runs it, not wg_): `in` lays
  // out forward's input as pixel pairs (its img, l and taps; V channels a block), dout_img and
  // dout_l the output gradient's pixel pairs (OW/2 pairs a row, no border).
  struct Wgrad16 {
    Forward in;
    direct::BlockedImage dout_img;
    Layout dout_l;
    direct::WeightGrad g;
  };
  Wgrad16 wgrad16_;
  const direct::WeightGrad& wgrad() const { return bf16_weight_grad() ? wgrad16_.g : wg_; }
  // Floats of one image's packed input and output gradient for the weight gradient.
  int64_t wgrad_in_floats() const;
  int64_t wgrad_dout_floats() const;
};

}  // namespace mpicnn
