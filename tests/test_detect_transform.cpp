// The detection input transform (src/detect/transform.*) against torchvision 0.14's
// GeneralizedRCNNTransform: resized sizes, the normalised, resized and padded batch, boxes
// scaled with their images and back, from references tests/python/detect_transform_torch.py
// writes at test time; and the bilinear weights on a hand-worked case.
#include <string>
#include <vector>

#include "core/rng.h"
#include "detect/transform.h"
#include "io/safetensors.h"
#include "testing.h"

using namespace mpicnn;
using namespace mpicnn::testing;

TEST_CASE("bilinear resize: align_corners=False weights on a hand-worked 1x2 -> 1x4 case") {
  // scale 0.5: outputs sample at 0 (clamped from -0.25), 0.25, 0.75, 1 (clamped to the edge).
  const float in[2] = {1.f, 5.f};
  float out[4];
  detect::resize_bilinear(out, in, 1, 1, 2, 1, 4);
  CHECK(out[0] == 1.f);
  CHECK(out[1] == 2.f);
  CHECK(out[2] == 4.f);
  CHECK(out[3] == 5.f);
}

TEST_CASE("detection transform matches torchvision's GeneralizedRCNNTransform") {
  // Landscape, portrait, one limited by max_size, one upscaled, one odd.
  const std::vector<detect::Size2> sizes = {{48, 64}, {70, 41}, {30, 200}, {17, 23}, {64, 64}};
  detect::ResizeOptions o;
  o.min_size = 56;
  o.max_size = 120;
  TempDir dir;
  SafetensorsWriter w;
  std::vector<std::vector<float>> images, boxes;
  for (size_t k = 0; k < sizes.size(); ++k) {
    const auto [h, wd] = sizes[k];
    Tensor img = random_tensor({3, h, wd}, 100 + k, 0.f, 1.f);
    images.emplace_back(img.data(), img.data() + img.numel());
    std::vector<float> b;
    const Rng rng(7, k);
    for (uint64_t i = 0; i < 3; ++i) {
      const float x1 = rng.uniform(4 * i, 0.f, float(wd - 5));
      const float y1 = rng.uniform(4 * i + 1, 0.f, float(h - 5));
      b.insert(b.end(), {x1, y1, x1 + rng.uniform(4 * i + 2, 1.f, 5.f),
                         y1 + rng.uniform(4 * i + 3, 1.f, 5.f)});
    }
    boxes.push_back(b);
    w.add_f32("image." + std::to_string(k), images.back().data(), {3, h, wd});
    w.add_f32("boxes." + std::to_string(k), b.data(), {3, 4});
  }
  const std::string in_path = (dir.path / "in.safetensors").string();
  const std::string out_path = (dir.path / "out.safetensors").string();
  w.write(in_path);
  run_python("detect_transform_torch.py", shell_quote(in_path) + " " + shell_quote(out_path) +
                                              " " + std::to_string(o.min_size) + " " +
                                              std::to_string(o.max_size));
  SafetensorsReader ref(out_path);

  std::vector<detect::Size2> resized;
  for (const auto& s : sizes) resized.push_back(detect::resized_size(s.h, s.w, o));
  const std::vector<int64_t> want_sizes = ref.read_i64("sizes");
  for (size_t k = 0; k < sizes.size(); ++k) {
    CHECK(resized[k].h == want_sizes[2 * k]);
    CHECK(resized[k].w == want_sizes[2 * k + 1]);
  }
  const detect::Size2 padded = detect::batch_size(resized, o.size_divisible);
  Tensor batch = Tensor::empty({int64_t(sizes.size()), 3, padded.h, padded.w});
  REQUIRE(dims_of(batch.shape()) == ref.info("batch").shape);
  for (size_t k = 0; k < sizes.size(); ++k)
    detect::transform_into(batch, int64_t(k), images[k].data(), sizes[k].h, sizes[k].w, o);
  // Not bit-exact: ATen's source coordinates (float, near 200 px: ulp 1.5e-5) and the order it
  // sums the taps in differ from ours by a few ulps of the coordinate, ~1e-5 of a pixel step.
  expect_close("batch", batch, ref.read_f64("batch"), 1e-4, 2e-5);

  for (size_t k = 0; k < sizes.size(); ++k) {
    std::vector<float> b = boxes[k];
    detect::resize_boxes(b.data(), 3, sizes[k], resized[k]);
    const std::vector<float> want = ref.read_f32("boxes." + std::to_string(k));
    const std::vector<float> back_want = ref.read_f32("back." + std::to_string(k));
    for (size_t i = 0; i < b.size(); ++i) CHECK(b[i] == want[i]);  // same float ops
    detect::resize_boxes(b.data(), 3, resized[k], sizes[k]);
    for (size_t i = 0; i < b.size(); ++i) CHECK(b[i] == back_want[i]);
  }
}
