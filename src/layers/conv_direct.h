// Direct convolution on channel-blocked layouts for Conv2d on the CPU (float only, groups 1):
// each image is repacked to [C/V][H+2p][W+2p][V] (V = 16 with AVX-512, 8 with AVX2) inside
// the layer (a layer without padding reads NCHW as it is), and register-blocked kernels
// (layers/cpu/) compute tiles of output pixels x 16 or 32 output channels straight from it,
// without a column matrix. Tensors between layers stay
// NCHW. One kernel family runs all three passes: forward; the input gradient as a forward
// pass per stride phase over the output gradient with the weights transposed and rotated; the
// weight gradient per (output block, input block, tap), summed over images in image order, so
// every thread count gives the same bits. Not for grouped convolutions (Conv2d keeps im2col),
// nor the float64 test build (real = double), where fits() is false.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "layers/cpu/conv_direct_kernels.h"
#include "core/real.h"
#include "layers/im2col.h"

namespace mpicnn {

// Which instruction set the direct kernels use, process-wide: the best this CPU has, unless
// MPICNN_CONV_ISA=avx2|avx512 (or set_direct_isa) says otherwise. kNone: a CPU without AVX2
// and FMA (or the float64 test build), where Conv2d stays on im2col.
enum class DirectIsa { kNone, kAvx2, kAvx512 };
DirectIsa direct_isa();
// Selects an instruction set; one this CPU lacks is an Error naming it.
void set_direct_isa(DirectIsa isa);
DirectIsa best_direct_isa();                          // of this CPU
DirectIsa parse_direct_isa(const std::string& name);  // "avx2", "avx512", else an Error
const char* direct_isa_name(DirectIsa isa);

class DirectConv {
 public:
  DirectConv() = default;
  // Whether the direct kernels compute this geometry with `groups` groups on this CPU.
  static bool fits(const ConvGeometry& g, int groups);
  // Plans geometry g with out_channels outputs for batches of up to max_batch images, with the
  // instruction set selected now.
  DirectConv(const ConvGeometry& g, int64_t out_channels, int64_t max_batch);
  bool planned() const { return k_ != nullptr; }
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
  struct Phase {                // one stride phase of the input gradient
    direct::Pass pass;          // taps and weights filled in at call time
    std::vector<int64_t> taps;  // offsets in the packed output gradient
    std::vector<int32_t> ids;   // kh * KW + kw of each tap
    int64_t weight_offset = 0;  // floats into the packed transposed weights
  };
  int64_t image_floats(const direct::BlockedImage& b) const;
  int64_t packed_in() const;  // floats of one packed input image (0 when raw_in_)
  void pack_forward_weights(float* wf, const float* w) const;
  void pack_data_weights(float* wd, const float* w) const;
  // Runs pass p over n images: images in parallel, or within the image when n < threads.
  void run_pass(float* out, int64_t out_image, const float* in, int64_t in_image,
                const direct::Pass& p, const float* bias, int64_t n) const;

  const direct::Kernels* k_ = nullptr;
  ConvGeometry g_;
  int64_t oc_ = 0, in_blocks_ = 0, out_blocks_ = 0;
  direct::BlockedImage in_img_, dout_img_;  // the forward input; the output gradient
  bool raw_in_ = false;    // no padding: forward and the weight gradient read the input as is
  bool raw_dout_ = false;  // the input gradient reads the output gradient as is
  std::vector<int64_t> taps_;                // forward's live taps: offsets in in_img_
  std::vector<int32_t> tap_ids_;             // and their kh * KW + kw
  direct::Pass fwd_;
  std::vector<Phase> phases_;
  bool data_zero_first_ = false;  // some input-gradient pixel gets no tap: din starts at 0
  int64_t data_weight_floats_ = 0;
  direct::WeightGrad wg_;
  int64_t chunk_ = 1;  // images packed at once in backward
  bool wgrad_units_outer_ = false;  // weight gradient: units outside images, or inside
  int slots_ = 1;      // forward's packed images: one per thread at plan time
};

}  // namespace mpicnn
