// Image preprocessing: PIL-exact bilinear resize and crops on 8-bit images, and Transform, which
// turns one decoded image into the model's float (C, H, W) input (resize/crop, augmentation,
// normalize, channel conversion) in one fused pass. Not a decoder (image.h) and not a loader:
// batching, threads and sharding live in the loader, which calls Transform::apply per sample.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

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

// ---- preprocessing spec ------------------------------------------------------------------------

enum class Geometry {
  None,               // the image must already be height x width (error naming the sample if not)
  Resize,             // resize to exactly height x width (fixed-size datasets)
  ResizeCenterCrop,   // optional Resize(resize) of the shorter side, then CenterCrop(height, width)
  RandomResizedCrop,  // torchvision RandomResizedCrop(scale, ratio) to height x width
  PadRandomCrop,      // RandomCrop(height, width, padding) with zero padding (CIFAR style)
};

// "none", "resize", "resize-center-crop", "random-resized-crop", "pad-random-crop"; parse is the
// inverse (an Error naming `what` and the accepted names otherwise).
const char* geometry_name(Geometry g);
Geometry parse_geometry(const std::string& name, const std::string& what);

struct Preprocess {
  Geometry geometry = Geometry::None;
  int channels = 3;             // the model's in_channels: 1 (PIL luma) or 3 (gray replicated)
  int height = 0, width = 0;    // output (H, W)
  int resize = 0;               // ResizeCenterCrop: shorter side; 0 = crop only
  int padding = 0;              // PadRandomCrop: zeros added on every side before the crop
  double scale_min = 0.08, scale_max = 1.0;          // RandomResizedCrop area fraction
  double ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;  // RandomResizedCrop aspect (log-uniform)
  bool hflip = false;           // horizontal flip with p = 0.5, after the crop
  std::vector<float> mean, stddev;  // 1 or `channels` values; empty = 0 / 1 (plain x / 255)
  uint64_t seed = 0;            // augmentation draws: f(seed, epoch, sample index)
};

// Constants of the standard recipes.
inline constexpr std::array<float, 3> kImageNetMean{0.485f, 0.456f, 0.406f};
inline constexpr std::array<float, 3> kImageNetStd{0.229f, 0.224f, 0.225f};
inline constexpr std::array<float, 3> kCifar10Mean{0.4914f, 0.4822f, 0.4465f};
inline constexpr std::array<float, 3> kCifar10Std{0.2470f, 0.2435f, 0.2616f};
inline constexpr float kFashionMnistMean = 0.2860f, kFashionMnistStd = 0.3530f;

// Resize(resize) + CenterCrop(size) + ToTensor + Normalize(ImageNet).
Preprocess imagenet_eval(int size = 224, int resize = 256, int channels = 3);
// RandomResizedCrop(size) + RandomHorizontalFlip + ToTensor + Normalize(ImageNet).
Preprocess imagenet_train(uint64_t seed, int size = 224, int channels = 3);
// RandomCrop(size, padding) + RandomHorizontalFlip + ToTensor + Normalize (CIFAR-10 stats).
Preprocess cifar_train(uint64_t seed, int size = 32, int padding = 4, int channels = 3);
// ToTensor + Normalize on images that already have the model's size (Fashion-MNIST, CIFAR eval).
Preprocess normalize_only(int height, int width, int channels, std::vector<float> mean,
                          std::vector<float> stddev);

// ---- Transform -----------------------------------------------------------------------------

// Where one sample's pixels come from: the region of the (channel-converted) image that is
// resampled, its size after resampling, and the output window inside that resampled region.
struct Placement {
  int src_top = 0, src_left = 0, src_height = 0, src_width = 0;  // inside the image
  int resized_height = 0, resized_width = 0;  // equal to src_* when there is no resize
  int top = 0, left = 0;                      // output window origin; may reach outside (zeros)
  bool flip = false;
};

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
