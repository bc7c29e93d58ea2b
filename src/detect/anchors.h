// Anchor boxes for the region proposal network, as torchvision 0.14's AnchorGenerator makes them:
// rounded cell anchors per feature level, tiled over each level's grid. Not the matching of
// anchors to ground truth (box_iou + a matcher do that) and not SSD's DefaultBoxGenerator.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

namespace mpicnn::detect {

class AnchorGenerator {
 public:
  // sizes[l]: anchor sizes (pixels) of level l; aspect_ratios[l]: height / width ratios of level
  // l. One aspect-ratio list for several levels applies to all of them, as in torchvision.
  // fasterrcnn_resnet50_fpn: sizes {{32}, {64}, {128}, {256}, {512}}, ratios {{0.5, 1, 2}}.
  AnchorGenerator(std::vector<std::vector<float>> sizes,
                  std::vector<std::vector<float>> aspect_ratios);

  int64_t num_levels() const { return int64_t(cell_anchors_.size()); }
  // Anchors per feature-map cell of each level: sizes[l].size() * aspect_ratios[l].size().
  std::vector<int64_t> num_anchors_per_location() const;
  // (A_l, 4) zero-centred anchors of level l, ratio-major then size, rounded half to even.
  const std::vector<float>& cell_anchors(int64_t level) const;

  // (sum_l h_l * w_l * A_l, 4) anchors for feature maps of grid_sizes[l] = {h_l, w_l} computed
  // from a padded batch of image_h x image_w images. Level l's stride is image / grid in integer
  // division (torchvision's), anchors ordered (level, y, x, anchor). A grid larger than the
  // image (stride 0, which torchvision accepts and tiles at one point) is an error here.
  std::vector<float> grid_anchors(const std::vector<std::array<int64_t, 2>>& grid_sizes,
                                  int64_t image_h, int64_t image_w) const;

 private:
  std::vector<std::vector<float>> cell_anchors_;  // per level: (A_l, 4)
};

}  // namespace mpicnn::detect
