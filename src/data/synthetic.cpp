// Synthetic class-patterned images generated from (seed, split, index).
// Not stored anywhere: read(i) recomputes the pixels each time.
#include "data/synthetic.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/rng.h"

namespace mpicnn::data {

SyntheticDataset::SyntheticDataset(const SyntheticSpec& spec, const std::string& split) : spec_(spec) {
  CHECK(split == "train" || split == "test" || split == "val", "synthetic: unknown split '", split,
        "' (train or test)");
  split_ = split == "train" ? "train" : "test";
  size_ = split_ == "train" ? spec.train_size : spec.test_size;
  CHECK(size_ > 0, "synthetic: the ", split_, " split has no samples");
  CHECK(spec.classes >= 1 && spec.classes <= 100000, "synthetic: classes must be >= 1, got ", spec.classes);
  CHECK(spec.channels == 1 || spec.channels == 3, "synthetic: channels must be 1 or 3, got ", spec.channels);
  CHECK(spec.height > 0 && spec.width > 0 && spec.height <= 4096 && spec.width <= 4096,
        "synthetic: image size ", spec.height, "x", spec.width, " out of range");
  sample_stream_ = stream_id("synthetic.sample." + split_);
  const Rng cls(spec.seed, "synthetic.class");
  const int K = spec.classes, C = spec.channels;
  color_.resize(size_t(K) * C);
  fx_.resize(size_t(K));
  fy_.resize(size_t(K));
  for (int k = 0; k < K; ++k) {
    for (int c = 0; c < C; ++c) color_[size_t(k) * C + c] = cls.uniform(uint64_t(k) * 16 + c, -1.f, 1.f);
    fx_[size_t(k)] = 1 + int(cls.below(uint64_t(k) * 16 + 8, 4));
    fy_[size_t(k)] = int(cls.below(uint64_t(k) * 16 + 9, 4));
    names_.push_back("class" + std::to_string(k));
  }
}

int SyntheticDataset::label(size_t i) const {
  CHECK(i < size_, "synthetic: sample ", i, " out of range (", size_, " samples)");
  return int(Rng(spec_.seed, sample_stream_ ^ 1).below(i, uint64_t(spec_.classes)));
}

std::string SyntheticDataset::source(size_t i) const { return "synthetic-" + split_ + "#" + std::to_string(i); }

std::vector<uint8_t> SyntheticDataset::read(size_t i) const {
  const int k = label(i), H = spec_.height, W = spec_.width, C = spec_.channels;
  const size_t n = size_t(H) * W * C;
  std::vector<uint8_t> px(n);
  // One Philox block per 4 pixels: index = (i, block); the phase takes its own stream.
  const float phase = Rng(spec_.seed, sample_stream_ ^ 2).uniform(i, 0.f, 6.2831853f);
  const size_t blocks = (n + 3) / 4;
  const float* color = color_.data() + size_t(k) * C;
  const float fx = 6.2831853f * float(fx_[size_t(k)]) / float(W), fy = 6.2831853f * float(fy_[size_t(k)]) / float(H);
  size_t p = 0;
  for (size_t b = 0; b < blocks; ++b) {
    const auto w = philox4x32(spec_.seed, sample_stream_, uint64_t(i) * blocks + b);
    for (int j = 0; j < 4 && p < n; ++j, ++p) {
      const size_t pix = p / size_t(C);
      const int c = int(p % size_t(C)), y = int(pix / size_t(W)), x = int(pix % size_t(W));
      const float u = float(w[size_t(j)] >> 8) * (2.0f / 16777216.0f) - 1.0f;  // [-1, 1)
      const float v = 128.f + 48.f * color[c] + 48.f * std::sin(fx * float(x) + fy * float(y) + phase) + 40.f * u;
      px[p] = uint8_t(std::clamp(std::lround(v), 0L, 255L));
    }
  }
  return px;
}

Image SyntheticDataset::decode(std::span<const uint8_t> bytes, size_t i, int channels) const {
  return image_from_pixels(bytes, spec_.height, spec_.width, spec_.channels, channels, source(i));
}

std::string SyntheticDataset::describe() const {
  return "synthetic " + split_ + ": " + std::to_string(size_) + " samples, " + std::to_string(spec_.classes) +
         " classes, " + std::to_string(spec_.channels) + "x" + std::to_string(spec_.height) + "x" +
         std::to_string(spec_.width) + " (seed " + std::to_string(spec_.seed) + ")";
}

}  // namespace mpicnn::data
