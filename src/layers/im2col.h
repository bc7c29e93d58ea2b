// im2col / col2im for Conv2d on CPU: unfold a chunk of images into the column matrix that
// turns a convolution into a GEMM, and fold column gradients back onto the images.
// Not a convolution: the GEMMs, groups and bias live in conv2d.cpp.
#pragma once
#include <cstdint>

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

  int64_t rows() const { return channels * kernel_h * kernel_w; }  // of the column matrix
  int64_t out_plane() const { return out_h * out_w; }
  int64_t in_plane() const { return height * width; }
  // The input already is the column matrix (per image): no unfolding needed.
  bool is_pointwise() const {
    return kernel_h == 1 && kernel_w == 1 && stride_h == 1 && stride_w == 1 && pad_h == 0 &&
           pad_w == 0;
  }
};

// col (C*KH*KW, batch*OH*OW) '=': row (c, kh, kw), column (b, oh, ow); padding reads as 0.
// Image b's columns are the contiguous range [b*OH*OW, (b+1)*OH*OW) of every row, so one
// GEMM covers the whole chunk.
// in (batch, C, H, W)
void im2col(float* col, const float* in, const ConvGeometry& g, int64_t batch);

// din (batch, C, H, W) '=': each input pixel gets the sum of the column entries it was
// copied to by im2col (entries that came from padding are dropped).
// col (C*KH*KW, batch*OH*OW), laid out as im2col writes it.
void col2im(float* din, const float* col, const ConvGeometry& g, int64_t batch);

}  // namespace mpicnn
