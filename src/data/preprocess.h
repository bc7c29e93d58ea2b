// What preprocessing a sample gets: the spec Transform runs (Geometry, Preprocess), the names
// checkpoints and plans store it under, each dataset kind's normalisation statistics, and
// default_preprocess, the one place ./train and ./pipeline_eval take their default recipes
// from. Not the pixel work itself: that is Transform (transform.h) and the resampler (resample.h).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace mpicnn::data {

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

// ---- statistics -------------------------------------------------------------------------------

inline constexpr std::array<float, 3> kImageNetMean{0.485f, 0.456f, 0.406f};
inline constexpr std::array<float, 3> kImageNetStd{0.229f, 0.224f, 0.225f};
inline constexpr std::array<float, 3> kCifar10Mean{0.4914f, 0.4822f, 0.4465f};
inline constexpr std::array<float, 3> kCifar10Std{0.2470f, 0.2435f, 0.2616f};
inline constexpr float kFashionMnistMean = 0.2860f, kFashionMnistStd = 0.3530f;
inline constexpr float kMnistMean = 0.1307f, kMnistStd = 0.3081f;

struct Normalization {
  std::vector<float> mean, stddev;  // 1 value (any model) or 3 (a 3-channel model)
};

// The normalisation a dataset kind (data/registry.h; not "auto") is trained with, for a model
// of `channels` channels. Kinds with RGB statistics give a 1-channel model the luma of them
// (see the .cpp).
Normalization kind_normalization(const std::string& kind, int channels);

// ---- the default recipes ----------------------------------------------------------------------

// torchvision's eval rule for images of varying size: Resize(crop * 256 / 224) of the shorter
// side, then CenterCrop(crop) (256 for 224).
int eval_resize(int crop);

// What the default preprocessing is decided from: the dataset, the model, the user's choices.
struct PreprocessQuery {
  std::string kind;             // the dataset's kind, as for kind_normalization
  int channels = 3;             // the model's input channels, 1 or 3
  int data_height = 0, data_width = 0;  // the dataset's fixed image size; 0 = sizes vary (files)
  int image_size = 0;           // model input side asked for; 0 = the data's own size when fixed,
                                // else default_size
  int default_size = 224;       // the model's default input side (ModelSpec::default_size)
  std::vector<float> mean, stddev;  // user's normalisation; empty = kind_normalization's
  std::string augment = "none";  // training geometry: none, flip, crop-flip, imagenet
  uint64_t seed = 0;            // augmentation draws
};

// The model's input and the preprocessing of training and evaluation.
struct InputPreprocess {
  int channels = 3, height = 0, width = 0;  // the model's input (C, H, W)
  Preprocess train, eval;
};

// Fixed-size data is used at its own size (Geometry::None) or resized to image_size
// (Geometry::Resize); images of varying size get eval_resize + center crop. Training takes the
// eval geometry plus the augmentation: flip, crop-flip (pad by side / 8 and random crop at the
// data's own size) or imagenet (RandomResizedCrop + flip). Errors name --augment for augmentation
// the data cannot take.
InputPreprocess default_preprocess(const PreprocessQuery& q);

}  // namespace mpicnn::data
