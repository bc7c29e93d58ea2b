// AnchorGenerator: torchvision 0.14's generate_anchors and grid_anchors, float32 throughout so
// cell anchors round to the same integers. Not the per-image bookkeeping of ImageList.
#include "detect/anchors.h"

#include <cmath>

#include "core/check.h"

namespace mpicnn::detect {

namespace {

// generate_anchors: h = sqrt(ar), w = 1 / h, (ratio, size) pairs ratio-major, base anchor
// (-w*s, -h*s, w*s, h*s) / 2 rounded half to even (torch.round), all in float32.
std::vector<float> make_cell_anchors(const std::vector<float>& sizes, const std::vector<float>& ratios) {
  std::vector<float> out;
  out.reserve(4 * sizes.size() * ratios.size());
  for (float ar : ratios) {
    const float h_ratio = std::sqrt(ar), w_ratio = 1.f / h_ratio;
    for (float s : sizes) {
      const float ws = w_ratio * s, hs = h_ratio * s;
      for (float v : {-ws, -hs, ws, hs}) out.push_back(std::nearbyint(v / 2.f));
    }
  }
  return out;
}

}  // namespace

AnchorGenerator::AnchorGenerator(std::vector<std::vector<float>> sizes,
                                 std::vector<std::vector<float>> aspect_ratios) {
  CHECK(!sizes.empty(), "AnchorGenerator: no anchor sizes given");
  if (aspect_ratios.size() == 1) aspect_ratios.resize(sizes.size(), aspect_ratios[0]);
  CHECK(aspect_ratios.size() == sizes.size(), "AnchorGenerator: ", sizes.size(),
        " levels of sizes but ", aspect_ratios.size(), " of aspect ratios");
  for (size_t l = 0; l < sizes.size(); ++l) {
    CHECK(!sizes[l].empty() && !aspect_ratios[l].empty(), "AnchorGenerator: level ", l,
          " has no sizes or no aspect ratios");
    for (float s : sizes[l]) CHECK(s > 0, "AnchorGenerator: anchor size ", s, " must be positive");
    for (float a : aspect_ratios[l])
      CHECK(a > 0, "AnchorGenerator: aspect ratio ", a, " must be positive");
    cell_anchors_.push_back(make_cell_anchors(sizes[l], aspect_ratios[l]));
  }
}

std::vector<int64_t> AnchorGenerator::num_anchors_per_location() const {
  std::vector<int64_t> out;
  for (const std::vector<float>& c : cell_anchors_) out.push_back(int64_t(c.size() / 4));
  return out;
}

const std::vector<float>& AnchorGenerator::cell_anchors(int64_t level) const {
  CHECK(level >= 0 && level < num_levels(), "AnchorGenerator: no level ", level, " (have ",
        num_levels(), ")");
  return cell_anchors_[size_t(level)];
}

std::vector<float> AnchorGenerator::grid_anchors(const std::vector<std::array<int64_t, 2>>& grid_sizes,
                                                 int64_t image_h, int64_t image_w) const {
  CHECK(int64_t(grid_sizes.size()) == num_levels(), "AnchorGenerator: ", grid_sizes.size(),
        " feature maps for ", num_levels(), " anchor levels");
  size_t total = 0;
  for (size_t l = 0; l < grid_sizes.size(); ++l) {
    const auto [gh, gw] = grid_sizes[l];
    CHECK(gh >= 1 && gw >= 1 && gh <= image_h && gw <= image_w, "AnchorGenerator: feature map ",
          l, " is ", gh, "x", gw, " for a ", image_h, "x", image_w, " image");
    total += size_t(gh * gw) * cell_anchors_[l].size();
  }
  std::vector<float> out(total);
  float* o = out.data();
  for (size_t l = 0; l < grid_sizes.size(); ++l) {
    const auto [gh, gw] = grid_sizes[l];
    const int64_t stride_h = image_h / gh, stride_w = image_w / gw;
    const std::vector<float>& base = cell_anchors_[l];
    for (int64_t y = 0; y < gh; ++y) {
      const float sy = float(y * stride_h);  // int64 shift promoted to float, as torch adds them
      for (int64_t x = 0; x < gw; ++x) {
        const float sx = float(x * stride_w);
        for (size_t a = 0; a < base.size(); a += 4) {
          *o++ = sx + base[a];
          *o++ = sy + base[a + 1];
          *o++ = sx + base[a + 2];
          *o++ = sy + base[a + 3];
        }
      }
    }
  }
  return out;
}

}  // namespace mpicnn::detect
