// Transform: the per-sample pipeline (placement and its random draws, channel conversion,
// resampling through resample(), flip, normalisation by lookup table) and its 8-bit halves.
// Not the resampling maths (resample.cpp) nor the choice of recipe (preprocess.cpp).
#include "data/transform.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <ostream>
#include <tuple>

#include "core/check.h"
#include "core/rng.h"

namespace mpicnn::data {

// ---- Transform ---------------------------------------------------------------------------------

namespace {
// Augmentation draws: stream per epoch, 64 indices per sample (RandomResizedCrop uses 40).
const uint64_t kAugmentStream = stream_id("data.augment");
constexpr uint64_t kDrawsPerSample = 64, kFlipDraw = 63;

// Streams a sample's name into an error message, or "sample <index>" when it has none; only
// formatted when a check fails.
struct SampleName {
  std::string_view name;
  uint64_t index;
};
std::ostream& operator<<(std::ostream& os, const SampleName& s) {
  return s.name.empty() ? os << "sample " << s.index : os << s.name;
}
}  // namespace

Transform::Transform(Preprocess spec) : spec_(std::move(spec)) {
  const Preprocess& s = spec_;
  CHECK(s.channels == 1 || s.channels == 3, "preprocessing: channels must be 1 or 3, got ", s.channels);
  CHECK(s.height > 0 && s.width > 0, "preprocessing: output size ", s.height, "x", s.width,
        " (give a crop or image size)");
  CHECK(s.resize >= 0, "preprocessing: resize ", s.resize, " is negative");
  CHECK(s.padding >= 0, "preprocessing: padding ", s.padding, " is negative");
  CHECK(s.geometry == Geometry::ResizeCenterCrop || s.resize == 0,
        "preprocessing: resize of the shorter side needs a center crop (else the output size "
        "depends on each image)");
  CHECK(s.geometry == Geometry::PadRandomCrop || s.padding == 0,
        "preprocessing: padding applies to the random crop only");
  if (s.geometry == Geometry::RandomResizedCrop) {
    CHECK(s.scale_min > 0 && s.scale_min <= s.scale_max, "preprocessing: random resized crop scale (",
          s.scale_min, ", ", s.scale_max, ") must satisfy 0 < min <= max");
    CHECK(s.ratio_min > 0 && s.ratio_min <= s.ratio_max, "preprocessing: random resized crop ratio (",
          s.ratio_min, ", ", s.ratio_max, ") must satisfy 0 < min <= max");
  }
  auto per_channel = [&](const std::vector<float>& v, const char* what, float none) {
    CHECK(v.empty() || v.size() == 1 || int(v.size()) == s.channels, "preprocessing: ", what, " has ",
          v.size(), " values; the model takes ", s.channels, " channel(s)");
    std::vector<float> out(size_t(s.channels), none);
    for (int c = 0; c < s.channels && !v.empty(); ++c) out[size_t(c)] = v.size() == 1 ? v[0] : v[size_t(c)];
    return out;
  };
  mean_ = per_channel(s.mean, "mean", 0.f);
  stddev_ = per_channel(s.stddev, "std", 1.f);
  const std::vector<float>& mean = mean_;
  const std::vector<float>& sd = stddev_;
  lut_.resize(size_t(s.channels) * 256);
  for (int c = 0; c < s.channels; ++c) {
    CHECK(std::isfinite(mean[size_t(c)]) && std::isfinite(sd[size_t(c)]) && sd[size_t(c)] != 0.f,
          "preprocessing: channel ", c, " has mean ", mean[size_t(c)], " and std ", sd[size_t(c)],
          " (std must be non-zero)");
    // torchvision: ToTensor's x / 255, then Normalize's (x - mean) / std, each rounded to float.
    for (int v = 0; v < 256; ++v)
      lut_[size_t(c) * 256 + size_t(v)] = (float(v) / 255.0f - mean[size_t(c)]) / sd[size_t(c)];
  }
}

bool Transform::random() const {
  return spec_.hflip || spec_.geometry == Geometry::RandomResizedCrop ||
         spec_.geometry == Geometry::PadRandomCrop;
}

Placement Transform::place(int h, int w, uint64_t epoch, uint64_t index, std::string_view sample) const {
  const Preprocess& s = spec_;
  const SampleName name{sample, index};
  CHECK(h > 0 && w > 0, name, ": empty image (", h, "x", w, ")");
  const Rng rng(s.seed, kAugmentStream + epoch);
  const uint64_t base = index * kDrawsPerSample;
  Placement p;
  p.src_height = p.resized_height = h;
  p.src_width = p.resized_width = w;
  switch (s.geometry) {
    case Geometry::None:
      CHECK(h == s.height && w == s.width, name, ": image is ", h, "x", w, ", expected ", s.height, "x",
            s.width, " (no resize or crop is configured)");
      break;
    case Geometry::Resize:
      p.resized_height = s.height, p.resized_width = s.width;
      break;
    case Geometry::ResizeCenterCrop:
      if (s.resize > 0) std::tie(p.resized_height, p.resized_width) = resized_shorter_size(h, w, s.resize);
      std::tie(p.top, p.left) = center_crop_origin(p.resized_height, p.resized_width, s.height, s.width);
      break;
    case Geometry::RandomResizedCrop: {
      // torchvision 0.14 RandomResizedCrop.get_params: 10 tries, then a central crop.
      const double area = double(h) * w;
      const double log_lo = std::log(s.ratio_min), log_hi = std::log(s.ratio_max);
      bool found = false;
      for (uint64_t a = 0; a < 10 && !found; ++a) {
        const uint64_t d = base + 4 * a;
        const double target = area * (s.scale_min + (s.scale_max - s.scale_min) * rng.uniform(d));
        const double aspect = std::exp(log_lo + (log_hi - log_lo) * rng.uniform(d + 1));
        const int cw = int(std::nearbyint(std::sqrt(target * aspect)));  // Python round: half even
        const int ch = int(std::nearbyint(std::sqrt(target / aspect)));
        if (0 < cw && cw <= w && 0 < ch && ch <= h) {
          p.src_top = int(rng.below(d + 2, uint64_t(h - ch + 1)));
          p.src_left = int(rng.below(d + 3, uint64_t(w - cw + 1)));
          p.src_height = ch, p.src_width = cw;
          found = true;
        }
      }
      if (!found) {
        const double in_ratio = double(w) / double(h);
        int cw = w, ch = h;
        if (in_ratio < s.ratio_min)
          ch = std::max(1, int(std::nearbyint(cw / s.ratio_min)));
        else if (in_ratio > s.ratio_max)
          cw = std::max(1, int(std::nearbyint(ch * s.ratio_max)));
        p.src_top = (h - ch) / 2, p.src_left = (w - cw) / 2;
        p.src_height = ch, p.src_width = cw;
      }
      p.resized_height = s.height, p.resized_width = s.width;
      break;
    }
    case Geometry::PadRandomCrop: {
      const int ph = h + 2 * s.padding, pw = w + 2 * s.padding;
      CHECK(ph >= s.height && pw >= s.width, name, ": image is ", h, "x", w, "; with padding ", s.padding,
            " it is smaller than the ", s.height, "x", s.width, " crop");
      p.top = int(rng.below(base, uint64_t(ph - s.height + 1))) - s.padding;
      p.left = int(rng.below(base + 1, uint64_t(pw - s.width + 1))) - s.padding;
      break;
    }
  }
  p.flip = s.hflip && rng.uniform(base + kFlipDraw) < 0.5f;
  return p;
}

namespace {
// Writes one row segment into the (C, H, W) output through the lookup table: channel c of
// input pixel i (interleaved: line[i * CI + c], planar: line[c * n + i]) goes to plane c,
// column x + i (mirrored when flipping). CI = 1 and CO = 3 replicates gray.
template <int CI, int CO, bool FLIP>
void write_row(float* out, const float* lut, int height, int width, int y, int x, int n,
               const uint8_t* line, bool planar) {
  const std::size_t plane = std::size_t(height) * width;
  for (int c = 0; c < CO; ++c) {
    const float* t = lut + c * 256;
    float* o = out + c * plane + std::size_t(y) * width + (FLIP ? width - 1 - x : x);
    const uint8_t* l = line + (CI == 1 ? 0 : planar ? c * n : c);
    constexpr int d = FLIP ? -1 : 1;
    if (planar || CI == 1)  // compile-time strides in both loops
      for (int i = 0; i < n; ++i) o[d * i] = t[l[i]];
    else
      for (int i = 0; i < n; ++i) o[d * i] = t[l[i * CI]];
  }
}
}  // namespace

void Transform::render(float* out, const Image& img, const Placement& p) const {
  const int H = spec_.height, W = spec_.width, C = spec_.channels;
  check_placement(img, p, H, W);
  CHECK(img.channels == C || img.channels == 1, "render: a ", img.channels,
        "-channel image for a ", C, "-channel model (convert it first)");
  // Zeros (before normalization) everywhere the window leaves the resized region; the resample
  // overwrites the rest. Cheap next to the resample, and simpler than tracking the border.
  const std::size_t plane = std::size_t(H) * W;
  const bool full =
      p.top >= 0 && p.left >= 0 && p.top + H <= p.resized_height && p.left + W <= p.resized_width;
  if (!full)
    for (int c = 0; c < C; ++c) std::fill(out + c * plane, out + (c + 1) * plane, lut_[size_t(c) * 256]);
  const float* lut = lut_.data();
  auto run = [&](auto write) {
    resample(img, p, H, W, [&](int y, int x, int n, const uint8_t* line, bool planar) {
      write(out, lut, H, W, y, x, n, line, planar);
    });
  };
  if (img.channels == 1 && C == 1)
    p.flip ? run(write_row<1, 1, true>) : run(write_row<1, 1, false>);
  else if (img.channels == 1)
    p.flip ? run(write_row<1, 3, true>) : run(write_row<1, 3, false>);
  else
    p.flip ? run(write_row<3, 3, true>) : run(write_row<3, 3, false>);
}

namespace {
// The image apply() places: `img`, or its luma for a 1-channel model (PIL converts to L before
// any resize; luma does not commute with resampling), in per-thread scratch.
const Image& model_channels(const Image& img, int channels, uint64_t index, std::string_view name) {
  CHECK(img.channels == 1 || img.channels == 3, SampleName{name, index}, ": image has ", img.channels,
        " channels");
  if (img.channels == 3 && channels == 1) {
    thread_local Image gray;  // grown to the largest image, then reused
    convert_channels(gray, img, 1);
    return gray;
  }
  return img;
}
}  // namespace

void Transform::apply(float* out, const Image& img, uint64_t epoch, uint64_t index,
                      std::string_view name) const {
  const Image& src = model_channels(img, spec_.channels, index, name);
  render(out, src, place(src.height, src.width, epoch, index, name));
}

Image Transform::geometry(const Image& img, uint64_t epoch, uint64_t index, std::string_view name) const {
  const Image& src = model_channels(img, spec_.channels, index, name);
  const Placement p = place(src.height, src.width, epoch, index, name);
  Image out = resample_image(src, p, spec_.height, spec_.width);
  if (p.flip) {
    const int C = out.channels;
    for (int y = 0; y < out.height; ++y) {
      uint8_t* r = out.row(y);
      for (int a = 0, b = out.width - 1; a < b; ++a, --b)
        for (int c = 0; c < C; ++c) std::swap(r[a * C + c], r[b * C + c]);
    }
  }
  return out;
}

bool Transform::window(uint8_t* out, const Image& img, uint64_t epoch, uint64_t index,
                       std::string_view name) const {
  const Image& src = model_channels(img, spec_.channels, index, name);
  const Placement p = place(src.height, src.width, epoch, index, name);
  const int H = spec_.height, W = spec_.width, C = spec_.channels, CI = src.channels;
  check_placement(src, p, H, W);
  if (p.top < 0 || p.left < 0 || p.top + H > p.resized_height || p.left + W > p.resized_width)
    std::memset(out, 0, std::size_t(H) * W * C);  // the window leaves the resized region
  resample(src, p, H, W, [&](int y, int x, int n, const uint8_t* line, bool planar) {
    uint8_t* o = out + (std::size_t(y) * W + x) * C;
    if (CI == C && (!planar || C == 1)) {
      std::memcpy(o, line, std::size_t(n) * C);
      return;
    }
    for (int i = 0; i < n; ++i)
      for (int c = 0; c < C; ++c) o[i * C + c] = line[CI == 1 ? i : planar ? c * n + i : i * CI + c];
  });
  return p.flip;
}

void Transform::normalize(float* out, const Image& window) const {
  CHECK(window.height == spec_.height && window.width == spec_.width, "normalize: a ", window.height,
        "x", window.width, " window for a ", spec_.height, "x", spec_.width, " model input");
  render(out, window, whole(window));
}

}  // namespace mpicnn::data
