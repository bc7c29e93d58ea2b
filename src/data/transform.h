// Transform, which turns one decoded image into the model's float (C, H, W) input (resize/crop,
// augmentation, normalize, channel conversion) in one fused pass, and its 8-bit halves. Not a
// decoder (image.h), not the resampler (resample.h), not the choice of recipe (preprocess.h),
// and not a loader: batching, threads and sharding live in the loader, which calls
// Transform::apply per sample.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

#include "data/image.h"
#include "data/preprocess.h"
#include "data/resample.h"

namespace mpicnn::data {

// ---- Transform -----------------------------------------------------------------------------

// Validated spec plus the per-channel lookup table uint8 -> normalized float. Immutable after
// construction, so one Transform serves every loader thread; scratch memory is per thread.
class Transform {
 public:
  explicit Transform(Preprocess spec);

  const Preprocess& spec() const { return spec_; }
  int channels() const { return spec_.channels; }
  int height() const { return spec_.height; }
  int width() const { return spec_.width; }
  std::size_t output_numel() const { return std::size_t(channels()) * height() * width(); }
  bool random() const;  // whether apply depends on (epoch, index)

  // The geometry for an image of this size; draws (if any) come from (seed, epoch, index) only,
  // so a sample looks the same whichever thread, worker or rank prepares it. `name` names the
  // sample in errors (an image that cannot give the output size); empty: "sample <index>".
  Placement place(int image_height, int image_width, uint64_t epoch, uint64_t index,
                  std::string_view name = {}) const;

  // out: (C, H, W) floats = normalize(resample(image)). Thread-safe; allocates nothing once a
  // thread has seen its largest image. `img` may have 1 or 3 channels (converted as PIL does).
  // Matches the loader's SampleFn: [&tf](float* o, const Image& im, uint64_t e, uint64_t id) {
  // tf.apply(o, im, e, id); }.
  void apply(float* out, const Image& img, uint64_t epoch, uint64_t index,
             std::string_view name = {}) const;
  // apply() with an explicit placement (tests, and callers that choose crops themselves).
  void render(float* out, const Image& img, const Placement& p) const;

  // apply() in two halves, for callers that resample and normalise in different places (the
  // evaluation pipeline's decode and normalize ranks): geometry() returns the 8-bit (H, W, C)
  // window apply() would normalise (channel conversion to a 1-channel model first, zeros
  // outside the image, flip applied; C stays 1 for gray images of a 3-channel model), and
  // normalize() turns such a window into the (C, H, W) floats. normalize(geometry(img)) equals
  // apply(img) bit for bit: PIL's resampling is 8-bit, so nothing is lost in between.
  Image geometry(const Image& img, uint64_t epoch, uint64_t index, std::string_view name = {}) const;
  void normalize(float* out, const Image& window) const;

  // apply() split for a consumer that normalises and mirrors whole batches itself (the GPU's
  // normalize_u8): writes into `out` the (H, W, channels()) 8-bit window apply() would
  // normalise, before the flip (gray replicated for a 3-channel model, zeros outside the
  // image), and returns whether apply() mirrors it. (float(v) / 255 - mean()[c]) / stddev()[c],
  // each step rounded to float and mirrored when it returned true, is apply()'s output bit
  // for bit.
  bool window(uint8_t* out, const Image& img, uint64_t epoch, uint64_t index,
              std::string_view name = {}) const;
  const std::vector<float>& mean() const { return mean_; }      // per channel (0 if none)
  const std::vector<float>& stddev() const { return stddev_; }  // per channel (1 if none)

 private:
  Preprocess spec_;
  std::vector<float> mean_, stddev_;
  std::vector<float> lut_;  // (channels, 256): ((v / 255) - mean) / stddev, rounded as torchvision does
};

}  // namespace mpicnn::data
