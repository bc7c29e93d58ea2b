// Preprocessing specs by name and by default: geometry names, each dataset kind's statistics
// (with the one rule for 1-channel models) and default_preprocess, which ./train and
// ./pipeline_eval both call. Not pixel work: see transform.cpp and resample.cpp.
#include "data/preprocess.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/check.h"
#include "data/registry.h"

namespace mpicnn::data {

namespace {
constexpr std::pair<Geometry, const char*> kGeometryNames[] = {
    {Geometry::None, "none"},
    {Geometry::Resize, "resize"},
    {Geometry::ResizeCenterCrop, "resize-center-crop"},
    {Geometry::RandomResizedCrop, "random-resized-crop"},
    {Geometry::PadRandomCrop, "pad-random-crop"},
};

// ITU-R 601-2 luma weights: what PIL's convert("L") computes (in 16-bit fixed point, image.cpp)
// and hence what the loader feeds a 1-channel model from an RGB image.
constexpr std::array<double, 3> kLuma{0.299, 0.587, 0.114};
}  // namespace

const char* geometry_name(Geometry g) {
  for (const auto& [geo, name] : kGeometryNames)
    if (geo == g) return name;
  FAIL("geometry_name: unknown geometry ", int(g));
}

Geometry parse_geometry(const std::string& name, const std::string& what) {
  std::string known;
  for (const auto& [geo, n] : kGeometryNames) {
    if (name == n) return geo;
    known += known.empty() ? n : std::string(", ") + n;
  }
  FAIL(what, ": unknown geometry '", name, "' (", known, ")");
}

Normalization kind_normalization(const std::string& kind, int channels) {
  CHECK(channels == 1 || channels == 3, "preprocessing: channels must be 1 or 3, got ", channels);
  auto rgb = [&](const std::array<float, 3>& mean, const std::array<float, 3>& stddev) {
    if (channels == 3) return Normalization{{mean.begin(), mean.end()}, {stddev.begin(), stddev.end()}};
    // A 1-channel model sees L = 0.299 R + 0.587 G + 0.114 B of each RGB pixel (the channel
    // conversion comes before everything else, as PIL's). The mean of L is exactly that
    // weighted sum of the channel means (linearity). std(L) is the same weighted sum of the
    // channel stds when the channels are perfectly correlated, and never more than it
    // otherwise; natural images' RGB channels correlate at about 0.9, which puts it within a
    // few percent. The red channel alone, or the plain average, weighs the channels unlike L.
    double m = 0, s = 0;
    for (int c = 0; c < 3; ++c) m += kLuma[size_t(c)] * mean[size_t(c)], s += kLuma[size_t(c)] * stddev[size_t(c)];
    return Normalization{{float(m)}, {float(s)}};
  };
  const DatasetKind* k = find_dataset_kind(kind);
  CHECK(k && !k->mean.empty(), "preprocessing: no default normalisation for dataset kind '",
        kind, "'");
  // Gray datasets keep their own measured statistics (replicated over 3 channels if need be).
  if (k->mean.size() == 1) return {k->mean, k->stddev};
  return rgb({k->mean[0], k->mean[1], k->mean[2]}, {k->stddev[0], k->stddev[1], k->stddev[2]});
}

int eval_resize(int crop) { return int(std::lround(crop * 256.0 / 224.0)); }

InputPreprocess default_preprocess(const PreprocessQuery& q) {
  const bool fixed = q.data_height > 0 && q.data_width > 0;
  InputPreprocess p;
  p.channels = q.channels;
  if (q.image_size > 0)
    p.height = p.width = q.image_size;
  else if (fixed)
    p.height = q.data_height, p.width = q.data_width;
  else
    p.height = p.width = q.default_size;
  const bool same_size = fixed && p.height == q.data_height && p.width == q.data_width;

  Preprocess& eval = p.eval;
  eval.channels = p.channels;
  eval.height = p.height;
  eval.width = p.width;
  const Normalization norm = kind_normalization(q.kind, q.channels);
  eval.mean = q.mean.empty() ? norm.mean : q.mean;
  eval.stddev = q.stddev.empty() ? norm.stddev : q.stddev;
  eval.seed = q.seed;
  if (!fixed) {
    eval.geometry = Geometry::ResizeCenterCrop;
    eval.resize = eval_resize(p.height);
  } else {
    eval.geometry = same_size ? Geometry::None : Geometry::Resize;
  }

  CHECK(q.augment == "none" || q.augment == "flip" || q.augment == "crop-flip" || q.augment == "imagenet",
        "--augment: unknown augmentation '", q.augment, "' (none, flip, crop-flip, imagenet)");
  Preprocess& train = p.train;
  train = eval;
  if (q.augment == "flip" || q.augment == "crop-flip") train.hflip = true;
  if (q.augment == "crop-flip") {
    CHECK(fixed || q.image_size > 0, "--augment crop-flip: needs fixed-size images");
    CHECK(same_size, "--augment crop-flip: pads and crops at the images' own size; drop --image-size");
    train.geometry = Geometry::PadRandomCrop;
    train.padding = std::max(1, p.height / 8);
  }
  if (q.augment == "imagenet") {
    train.geometry = Geometry::RandomResizedCrop;
    train.resize = 0;  // the crop's own scale and ratio, not the evaluation's shorter side
    train.hflip = true;
  }
  return p;
}

}  // namespace mpicnn::data
