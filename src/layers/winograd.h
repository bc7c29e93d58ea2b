// Winograd F(2x2, 3x3) convolution on the CPU for 3x3, stride-1, undilated, ungrouped layers
// (Lavin & Gray 2016): each 2x2 output tile costs 16 multiplies per channel pair instead of
// 36, as 16 GEMMs (K x C) * (C x tiles) between an input and an output transform. Conv2d uses
// it for forward and, with the weights rotated and transposed, for the input gradient (the
// transposed convolution of a stride-1 3x3 layer is itself one, padded 2 - p); its weight
// gradient stays im2col + GEMM. Not for other shapes: Conv2d::plan decides (winograd_fits).
#pragma once
#include <cstdint>

#include "core/real.h"
#include "layers/im2col.h"

namespace mpicnn {

// Whether Winograd F(2x2,3x3) computes this geometry (3x3, stride 1, dilation 1, padding at
// most 2 on each side, so the transposed convolution exists too), with `groups` groups.
bool winograd_fits(const ConvGeometry& g, int groups);

// U (16, K, C) = G w G^T per (k, c) from w (K, C, 3, 3); with `transposed`, the weights of the
// transposed convolution: U (16, C, K) from w (K, C, 3, 3) rotated by 180 degrees.
void winograd_weights(real* U, const real* w, int64_t K, int64_t C, bool transposed);

class WinogradConv {
 public:
  WinogradConv() = default;
  // in_channels C, out_channels K, input H x W, padding (pad_h, pad_w), batch up to N: chooses
  // how many images go through one set of 16 GEMMs (chunk) within `budget` floats.
  WinogradConv(int64_t C, int64_t K, int64_t H, int64_t W, int64_t pad_h, int64_t pad_w,
               int64_t N, int64_t budget);
  // Floats of workspace forward needs: U, then V (16, C, tiles), then M (16, K, tiles).
  int64_t workspace_floats() const { return 16 * (K_ * C_ + (C_ + K_) * chunk_ * tiles_); }
  int64_t out_h() const { return OH_; }
  int64_t out_w() const { return OW_; }

  // y (N, K, OH, OW) '=' conv(x (N, C, H, W), w) + bias (K, or null), for N up to the planned
  // batch; U is winograd_weights(w, transposed=false), at the start of `ws`.
  void forward(real* y, const real* x, const real* bias, int64_t N, real* ws) const;

 private:
  int64_t C_ = 0, K_ = 0, H_ = 0, W_ = 0, ph_ = 0, pw_ = 0, OH_ = 0, OW_ = 0;
  int64_t th_ = 0, tw_ = 0, tiles_ = 0;  // tiles per image: th_ x tw_ of 2x2 outputs
  int64_t chunk_ = 1;                    // images per set of GEMMs
};

}  // namespace mpicnn
