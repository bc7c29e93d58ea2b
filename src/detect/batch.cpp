// Detection batches: decode (data/detection.h), then the transform (transform.h) per image.
#include "detect/batch.h"

#include "core/check.h"

namespace mpicnn::detect {

void make_detection_batch(DetectionBatch& out, const data::DetectionSet& set,
                          const std::vector<int64_t>& indices, const std::vector<bool>& flips,
                          const ResizeOptions& o) {
  CHECK(!indices.empty(), "detection batch: no images");
  CHECK(flips.empty() || flips.size() == indices.size(), "detection batch: ", flips.size(),
        " flips for ", indices.size(), " images");
  const int64_t N = int64_t(indices.size());
  std::vector<data::DetectionImage> images;
  out.original.clear(), out.resized.clear(), out.targets.clear();
  for (int64_t i = 0; i < N; ++i) {
    CHECK(indices[size_t(i)] >= 0 && indices[size_t(i)] < int64_t(set.samples.size()),
          "detection batch: image index ", indices[size_t(i)], " outside the set of ",
          set.samples.size());
    const data::DetectionSample& s = set.samples[size_t(indices[size_t(i)])];
    images.push_back(data::load_detection_image(s, !flips.empty() && flips[size_t(i)]));
    const data::DetectionImage& img = images.back();
    out.original.push_back({img.height, img.width});
    out.resized.push_back(resized_size(img.height, img.width, o));
    DetectionTarget t;
    for (const auto& b : img.boxes) t.boxes.insert(t.boxes.end(), b.begin(), b.end());
    resize_boxes(t.boxes.data(), int64_t(img.boxes.size()), out.original.back(), out.resized.back());
    t.labels.assign(s.labels.begin(), s.labels.end());
    out.targets.push_back(std::move(t));
  }
  const Size2 padded = batch_size(out.resized, o.size_divisible);
  const Shape shape{N, 3, padded.h, padded.w};
  if (out.images.shape() != shape) out.images = Tensor::empty(shape);
  for (int64_t i = 0; i < N; ++i)
    transform_into(out.images, i, images[size_t(i)].pixels.data(), images[size_t(i)].height,
                   images[size_t(i)].width, o);
}

}  // namespace mpicnn::detect
