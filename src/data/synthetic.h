// Synthetic images for tests and benchmarks: sample i of (seed, split) is computed on demand
// from counter-based random draws, so nothing is stored and any rank can produce any sample.
// Not realistic data: each class has its own mean colour and stripe pattern, plus noise, so
// that a model can learn it (and a training test can check that it did).
#pragma once
#include <string>

#include "data/dataset.h"

namespace mpicnn::data {

class SyntheticDataset : public Dataset {
 public:
  // split "train" (spec.train_size samples) or "test"/"val" (spec.test_size); the two splits
  // draw different samples from the same class patterns. channels 1 or 3.
  SyntheticDataset(const SyntheticSpec& spec, const std::string& split);

  size_t size() const override { return size_; }
  int label(size_t i) const override;
  const std::vector<std::string>& class_names() const override { return names_; }
  std::string source(size_t i) const override;
  int channels() const override { return spec_.channels; }
  int height() const override { return spec_.height; }
  int width() const override { return spec_.width; }
  std::vector<uint8_t> read(size_t i) const override;  // (H, W, C) pixels
  Image decode(std::span<const uint8_t> bytes, size_t i, int channels) const override;
  std::string describe() const override;

 private:
  SyntheticSpec spec_;
  std::string split_;
  size_t size_ = 0;
  uint64_t sample_stream_ = 0;
  std::vector<std::string> names_;
  std::vector<float> color_;  // (K, C) class mean colour in [-1, 1]
  std::vector<int> fx_, fy_;  // (K) stripe frequencies
};

}  // namespace mpicnn::data
