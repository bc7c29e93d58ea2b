// Test fixtures: torchvision-style recipes with explicit sizes, for tests of Transform that
// compare against references generated with those sizes. Not the engine's defaults: those are
// data::default_preprocess (preprocess.h), which ./train and ./pipeline_eval use.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "data/preprocess.h"

namespace mpicnn::testing {

// Resize(resize) + CenterCrop(size) + ToTensor + Normalize(ImageNet; a 1-channel model gets
// the engine's 1-channel statistics of ImageNet, data::kind_normalization).
inline data::Preprocess imagenet_eval(int size = 224, int resize = 256, int channels = 3) {
  data::Preprocess p;
  p.geometry = data::Geometry::ResizeCenterCrop;
  p.channels = channels;
  p.height = p.width = size;
  p.resize = resize;
  data::Normalization n = data::kind_normalization("imagefolder", channels);
  p.mean = std::move(n.mean);
  p.stddev = std::move(n.stddev);
  return p;
}

// RandomResizedCrop(size) + RandomHorizontalFlip + ToTensor + Normalize(ImageNet).
inline data::Preprocess imagenet_train(uint64_t seed, int size = 224, int channels = 3) {
  data::Preprocess p = imagenet_eval(size, 0, channels);
  p.geometry = data::Geometry::RandomResizedCrop;
  p.hflip = true;
  p.seed = seed;
  return p;
}

// RandomCrop(size, padding) + RandomHorizontalFlip + ToTensor + Normalize (CIFAR-10 stats).
inline data::Preprocess cifar_train(uint64_t seed, int size = 32, int padding = 4, int channels = 3) {
  data::Preprocess p;
  p.geometry = data::Geometry::PadRandomCrop;
  p.channels = channels;
  p.height = p.width = size;
  p.padding = padding;
  p.hflip = true;
  p.seed = seed;
  data::Normalization n = data::kind_normalization("cifar10", channels);
  p.mean = std::move(n.mean);
  p.stddev = std::move(n.stddev);
  return p;
}

// ToTensor + Normalize on images that already have the model's size.
inline data::Preprocess normalize_only(int height, int width, int channels, std::vector<float> mean,
                                       std::vector<float> stddev) {
  data::Preprocess p;
  p.geometry = data::Geometry::None;
  p.channels = channels;
  p.height = height, p.width = width;
  p.mean = std::move(mean);
  p.stddev = std::move(stddev);
  return p;
}

}  // namespace mpicnn::testing
