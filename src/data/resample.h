// PIL-exact 8-bit geometry: bilinear resize, crops, torchvision's Resize / CenterCrop rounding,
// and resample(), which resamples only the window a crop keeps and hands its rows to a sink.
// Not normalisation, channel conversion or random draws: those are Transform's (transform.h).
#pragma once
#include <cstdint>
#include <type_traits>
#include <utility>

#include "data/image.h"

namespace mpicnn::data {

// ---- 8-bit geometry, bit-exact with PIL 9.4 / torchvision 0.14 on PIL images ----------------

// PIL's Image.resize((width, height), Image.BILINEAR): separable convolution whose support grows
// with the downscale factor (antialiasing), 22-bit fixed-point coefficients, horizontal pass
// then vertical pass, each rounded and clipped to 8 bits as PIL does.
Image resize(const Image& in, int height, int width);

// torchvision 0.14 Resize(size) output size: the shorter side becomes `size`, the longer
// int(size * long / short). Returns (height, width).
std::pair<int, int> resized_shorter_size(int height, int width, int size);
Image resize_shorter(const Image& in, int size);

// Rows [top, top + height) and columns [left, left + width); pixels outside the image are 0
// (PIL's crop, and torchvision's pad-with-zeros).
Image crop(const Image& in, int top, int left, int height, int width);

// torchvision's CenterCrop window origin: top = int(round((H - h) / 2.0)) with Python's
// half-to-even round, or, when the crop is larger, the zero padding torchvision adds first.
// Returns (top, left); negative values mean the window starts above/left of the image.
std::pair<int, int> center_crop_origin(int height, int width, int crop_height, int crop_width);
Image center_crop(const Image& in, int crop_height, int crop_width);

// ---- resampling a window ---------------------------------------------------------------------

// Where one sample's pixels come from: the region of the (channel-converted) image that is
// resampled, its size after resampling, and the output window inside that resampled region.
struct Placement {
  int src_top = 0, src_left = 0, src_height = 0, src_width = 0;  // inside the image
  int resized_height = 0, resized_width = 0;  // equal to src_* when there is no resize
  int top = 0, left = 0;                      // output window origin; may reach outside (zeros)
  bool flip = false;
};

// The whole image, not resized.
Placement whole(const Image& in);

// Receiver of resample()'s rows: sink(out_row, out_col0, ncols, row_bytes, planar). A reference
// to a callable (no copy, no allocation), valid for the call it is passed to.
class RowSink {
 public:
  template <class F>
  RowSink(F&& f)  // NOLINT: implicit, so a lambda can be passed directly
      : obj_(static_cast<const void*>(&f)), call_([](const void* o, int y, int x, int n, const uint8_t* line,
                                                     bool planar) {
          (*static_cast<std::remove_reference_t<F>*>(const_cast<void*>(o)))(y, x, n, line, planar);
        }) {}
  void operator()(int y, int x, int n, const uint8_t* line, bool planar) const {
    call_(obj_, y, x, n, line, planar);
  }

 private:
  const void* obj_;
  void (*call_)(const void*, int, int, int, const uint8_t*, bool);
};

// Resamples the region p.src_* of `img` to p.resized_* and hands the rows of the output window
// (height x width at p.top, p.left) that overlap the resized region to `sink`: ncols * C bytes,
// interleaved (c fastest) or planar (ncols bytes per channel, after a horizontal pass). Rows and
// columns it never mentions lie outside the resized region (zeros). Only that overlap is
// computed: PIL's passes are separable and each output depends only on its own taps, so this is
// bit-exact with a full resize followed by a crop. Thread-safe; allocates nothing once a thread
// has seen its largest image (per-thread scratch). p.flip is the caller's to apply.
void resample(const Image& img, const Placement& p, int height, int width, RowSink sink);

// Errors for an image or placement resample() cannot take (a bad buffer, a region outside the
// image, empty sizes).
void check_placement(const Image& img, const Placement& p, int height, int width);

// 8-bit output of the placement (no flip), zeros outside the resized region.
Image resample_image(const Image& img, const Placement& p, int height, int width);

}  // namespace mpicnn::data
