// im2col / col2im for Conv2d on CPU: unfold a chunk of images into the column matrix that
// turns a convolution into a GEMM, and fold column gradients back onto the images.
// Not a convolution: the GEMMs, groups and bias live in conv2d.cpp.
#pragma once
#include <cstdint>
#include <vector>

#include "core/real.h"

namespace mpicnn {

// Geometry of one convolution (all groups together), PyTorch semantics: zero padding,
// out = floor((in + 2*pad - dilation*(kernel-1) - 1) / stride) + 1.
struct ConvGeometry {
  int64_t channels = 0, height = 0, width = 0;  // input planes
  int64_t kernel_h = 1, kernel_w = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t out_h = 0, out_w = 0;

  int64_t taps() const { return kernel_h * kernel_w; }
  int64_t rows() const { return channels * taps(); }  // of the full column matrix
  int64_t out_plane() const { return out_h * out_w; }
  int64_t in_plane() const { return height * width; }
  // The input already is the column matrix (per image): no unfolding needed.
  bool is_pointwise() const {
    return kernel_h == 1 && kernel_w == 1 && stride_h == 1 && stride_w == 1 && pad_h == 0 &&
           pad_w == 0;
  }
};

// How one geometry is unfolded, decided once by Conv2d::plan():
// - live taps: a kernel tap whose every read falls in the padding contributes only zeros, so
//   its rows are left out of the column matrix (and the weights' matching columns out of the
//   GEMM). A 3x3, pad-1 convolution over a 1x1 map (ResNet's last stage at 32x32 input) keeps
//   1 tap of 9 and does a ninth of the work.
// - small planes: when an output plane has few pixels, per-row range arithmetic costs more
//   than the copying, so a table of source offsets (one per live tap and output pixel, -1 for
//   padding) drives a plain gather/scatter instead.
class ColumnPlan {
 public:
  ColumnPlan() = default;
  explicit ColumnPlan(const ConvGeometry& g);

  const ConvGeometry& geometry() const { return g_; }
  // Tap indices (kh * KW + kw) that read at least one input pixel, ascending.
  const std::vector<int32_t>& live_taps() const { return taps_; }
  bool all_taps_live() const { return int64_t(taps_.size()) == g_.taps(); }
  // Rows of the column matrix: (channel, live tap), channel-major.
  int64_t rows() const { return g_.channels * int64_t(taps_.size()); }
  bool uses_table() const { return !index_.empty(); }

  // col (C*T, batch*OH*OW) '=' with T live taps: row (c, t), column (b, oh, ow); padding reads
  // as 0. Image b's columns are the range [b*OH*OW, (b+1)*OH*OW) of every row, so one GEMM
  // covers the whole chunk.
  // in (batch, C, H, W)
  void im2col(real* col, const real* in, int64_t batch) const;
  // din (batch, C, H, W) '=': each input pixel gets the sum of the column entries it was
  // copied to by im2col (entries that came from padding are dropped).
  // col (C*T, batch*OH*OW), laid out as im2col writes it.
  void col2im(real* din, const real* col, int64_t batch) const;

 private:
  ConvGeometry g_;
  std::vector<int32_t> taps_;
  std::vector<int32_t> index_;  // (T, OH*OW): offset in the input plane, -1 = padding
};

}  // namespace mpicnn
