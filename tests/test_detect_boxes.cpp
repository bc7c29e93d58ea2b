// Detection box utilities and anchors (src/detect/boxes, src/detect/anchors): hand-worked cases,
// an encode/decode round trip, and parity with torchvision 0.14 computed at test time by ONE run
// of tests/python/detect_boxes_torch.py. NMS, clipping and anchors must match exactly.
#include <array>
#include <bit>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <tuple>

#include "detect/anchors.h"
#include "detect/boxes.h"
#include "testing.h"

using namespace mpicnn;
using namespace mpicnn::detect;
using namespace mpicnn::testing;

namespace {

using Boxes = std::vector<float>;   // (n, 4)
using Index = std::vector<int64_t>;

// Boxes of widely varied size (0.01 .. 600 px, aspect 1:5 .. 5:1) anywhere around the image.
Boxes random_boxes(int64_t n, uint64_t seed, float min_size = 0.01f, float max_size = 600.f) {
  Rng rng(seed, "random_boxes");
  Boxes b;
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t k = 4 * uint64_t(i);
    const float x1 = rng.uniform(k, -50, 1000), y1 = rng.uniform(k + 1, -50, 800);
    const float w = std::exp(rng.uniform(k + 2, std::log(min_size), std::log(max_size)));
    const float h = w * std::exp(rng.uniform(k + 3, -1.6f, 1.6f));
    b.insert(b.end(), {x1, y1, x1 + w, y1 + h});
  }
  return b;
}

// Boxes jittered around n/10 centres, so NMS has real overlaps to resolve at every threshold.
Boxes clustered_boxes(int64_t n, uint64_t seed) {
  Rng centre(seed, "centres"), jitter(seed, "jitter");
  const uint64_t clusters = uint64_t(std::max<int64_t>(1, n / 10));
  Boxes b;
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t c = jitter.below(5 * uint64_t(i), clusters), k = 5 * uint64_t(i) + 1;
    const float cx = centre.uniform(3 * c, 0, 1200), cy = centre.uniform(3 * c + 1, 0, 800);
    const float s = std::exp(centre.uniform(3 * c + 2, std::log(4.f), std::log(300.f)));
    const float x = cx + 0.25f * s * jitter.uniform(k, -1, 1), y = cy + 0.25f * s * jitter.uniform(k + 1, -1, 1);
    const float w = s * std::exp(jitter.uniform(k + 2, -0.4f, 0.4f)), h = s * std::exp(jitter.uniform(k + 3, -0.4f, 0.4f));
    b.insert(b.end(), {x - w / 2, y - h / 2, x + w / 2, y + h / 2});
  }
  return b;
}

// Distinct scores in random order (a shuffled ladder), so the parity cases have no exact ties.
std::vector<float> distinct_scores(int64_t n, uint64_t seed) {
  Rng rng(seed, "scores");
  std::vector<float> s(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) s[size_t(i)] = float(i + 1) / float(n + 1);
  for (int64_t i = n - 1; i > 0; --i) std::swap(s[size_t(i)], s[rng.below(uint64_t(i), uint64_t(i) + 1)]);
  return s;
}

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// Per row of 4: |got - want| <= 1e-4 + 1e-5 * (largest |coordinate| of that want row), so a
// coordinate that cancels to ~0 is judged against the scale it was computed at.
void expect_coords(const std::string& what, const Boxes& got, const Boxes& want) {
  REQUIRE_MESSAGE(got.size() == want.size(), what, ": ", got.size(), " values vs ", want.size());
  for (size_t r = 0; r < want.size(); r += 4) {
    float scale = 0;
    for (size_t c = 0; c < 4; ++c) scale = std::max(scale, std::fabs(want[r + c]));
    for (size_t c = 0; c < 4; ++c)
      if (!(std::fabs(got[r + c] - want[r + c]) <= 1e-4 + 1e-5 * scale)) {
        FAIL_CHECK(what, ": value ", r + c, " is ", num(got[r + c]), ", torchvision ", num(want[r + c]));
        return;
      }
  }
}

void expect_exact(const std::string& what, const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE_MESSAGE(got.size() == want.size(), what, ": ", got.size(), " values vs ", want.size());
  for (size_t i = 0; i < want.size(); ++i)
    if (!(got[i] == want[i])) {
      FAIL_CHECK(what, ": value ", i, " is ", num(got[i]), ", expected ", num(want[i]));
      return;
    }
}

void expect_index(const std::string& what, const Index& got, const Index& want) {
  const size_t common = std::min(got.size(), want.size());
  size_t i = 0;
  while (i < common && got[i] == want[i]) ++i;
  CHECK_MESSAGE((i == common && got.size() == want.size()), what, ": kept ", got.size(),
                " vs torchvision ", want.size(), ", first difference at position ", i, " (",
                i < got.size() ? got[i] : -1, " vs ", i < want.size() ? want[i] : -1, ")");
}

static_assert(std::endian::native == std::endian::little, "raw files are little-endian");

template <class T>
void write_raw(const std::string& path, const std::vector<T>& v) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * sizeof(T)));
  REQUIRE_MESSAGE(f.good(), "cannot write ", path);
}

template <class T>
std::vector<T> read_raw(const std::string& path) {
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(path, ec);
  REQUIRE_MESSAGE(!ec, "torchvision wrote no ", path);
  REQUIRE(bytes % sizeof(T) == 0);
  std::vector<T> v(bytes / sizeof(T));
  std::ifstream f(path, std::ios::binary);
  f.read(reinterpret_cast<char*>(v.data()), std::streamsize(bytes));
  REQUIRE(f.good());
  return v;
}

struct AnchorCase {
  int64_t height, width;
  std::vector<std::array<int64_t, 2>> grids;
  std::vector<std::vector<float>> sizes, ratios;
};

}  // namespace

TEST_CASE("box coder: hand-worked deltas, clamp, and encode/decode round trip") {
  const float prop[] = {0, 0, 10, 20, 0, 0, 10, 20}, gt[] = {5, 5, 15, 25, 0, 0, 20, 10};
  float d[8];
  BoxCoder{}.encode(d, gt, prop, 2);
  const float want1[] = {0.5f, 0.25f, 0, 0, 0.5f, -0.25f, std::log(2.f), std::log(0.5f)};
  for (int i = 0; i < 8; ++i) CHECK(d[i] == doctest::Approx(want1[i]).epsilon(1e-6));
  const BoxCoder head{10, 10, 5, 5};
  head.encode(d, gt, prop, 2);
  const float want2[] = {5, 2.5f, 0, 0, 5, -2.5f, 5 * std::log(2.f), 5 * std::log(0.5f)};
  for (int i = 0; i < 8; ++i) CHECK(d[i] == doctest::Approx(want2[i]).epsilon(1e-6));

  // dw = 10 is clamped to log(1000/16): width 10 -> 625 around the same centre.
  CHECK(kBboxXformClip == float(std::log(1000.0 / 16)));
  const float big[] = {0, 0, 10, 0};
  float out[4];
  BoxCoder{}.decode(out, big, prop, 1, 1);
  CHECK(out[0] == doctest::Approx(5 - 312.5).epsilon(1e-6));
  CHECK(out[2] == doctest::Approx(5 + 312.5).epsilon(1e-6));
  CHECK(out[1] == 0);
  CHECK(out[3] == 20);

  // Round trip: decode(encode(gt, p), p) == gt for boxes within 62.5x of each other.
  const int64_t n = 500;
  const Boxes p = random_boxes(n, 1, 2.f, 400.f);
  Boxes g;  // each proposal moved by up to half its size and scaled by up to e^2 < 62.5
  Rng rng(2, "round_trip");
  for (int64_t i = 0; i < n; ++i) {
    const float* q = p.data() + 4 * i;
    const float w = q[2] - q[0], h = q[3] - q[1];
    const uint64_t k = 4 * uint64_t(i);
    const float cx = q[0] + w * (0.5f + rng.uniform(k, -0.5f, 0.5f));
    const float cy = q[1] + h * (0.5f + rng.uniform(k + 1, -0.5f, 0.5f));
    const float gw = w * std::exp(rng.uniform(k + 2, -2, 2)), gh = h * std::exp(rng.uniform(k + 3, -2, 2));
    g.insert(g.end(), {cx - gw / 2, cy - gh / 2, cx + gw / 2, cy + gh / 2});
  }
  for (const BoxCoder& coder : {BoxCoder{}, head}) {
    Boxes deltas(size_t(4 * n)), back(size_t(4 * n));
    coder.encode(deltas.data(), g.data(), p.data(), n);
    coder.decode(back.data(), deltas.data(), p.data(), n, 1);
    expect_coords("round trip", back, g);
  }
}

TEST_CASE("box_iou, box_area, clip and remove_small_boxes by hand") {
  const float a[] = {0, 0, 2, 2, 0, 0, 10, 10};
  const float b[] = {1, 1, 3, 3, 5, 0, 15, 10, 2, 0, 4, 2, 0, 0, 10, 10};
  float iou[8], area[2];
  box_iou(iou, a, 2, b, 4);
  const float want[] = {1.f / 7, 0, 0, 0.04f, 0.04f, 1.f / 3, 0.04f, 1};
  for (int i = 0; i < 8; ++i) CHECK(iou[i] == doctest::Approx(want[i]).epsilon(1e-6));
  box_area(area, a, 2);
  CHECK(area[0] == 4);
  CHECK(area[1] == 100);

  float boxes[] = {-5, 3, 700, 900, 10, -1, 20, 30};
  clip_boxes_to_image(boxes, 2, 480, 640);
  const float clipped[] = {0, 3, 640, 480, 10, 0, 20, 30};
  for (int i = 0; i < 8; ++i) CHECK(boxes[i] == clipped[i]);

  // Widths compare in float like torch: a 0.7f-wide box passes min_size 0.7.
  const float small[] = {0, 0, 0.7f, 1, 0, 0, 0.69f, 1, 0, 0, 1, 0.5f, 0, 0, 2, 2};
  Index keep;
  remove_small_boxes(keep, small, 4, 0.7f);
  CHECK(keep == Index{0, 3});
}

TEST_CASE("nms and batched_nms by hand") {
  Index keep;
  // A suppresses B (IoU 60/140 > 0.4); C only overlaps B, which is gone, so C survives.
  const float chain[] = {0, 0, 10, 10, 4, 0, 14, 10, 8, 0, 18, 10};
  const float s1[] = {0.9f, 0.8f, 0.7f};
  nms(keep, chain, s1, 3, 0.4);
  CHECK(keep == Index{0, 2});
  nms(keep, chain, s1, 3, 0.5);
  CHECK(keep == Index{0, 1, 2});
  // Output in decreasing score; IoU(0, 1) = 90/110.
  const float three[] = {1, 0, 11, 10, 0, 0, 10, 10, 20, 20, 30, 30};
  const float s2[] = {0.8f, 0.9f, 0.95f};
  nms(keep, three, s2, 3, 0.5);
  CHECK(keep == Index{2, 1});
  nms(keep, three, s2, 3, 0.9);
  CHECK(keep == Index{2, 1, 0});
  // IoU 3/10 rounds to 0.3f > 0.3 (double): torchvision suppresses, and so must we.
  const float edge[] = {0, 0, 10, 1, 0, 0, 3, 1};
  const float s3[] = {1, 0.5f};
  nms(keep, edge, s3, 2, 0.3);
  CHECK(keep == Index{0});
  nms(keep, edge, s3, 2, 0.30000002);  // just above 0.3f
  CHECK(keep == Index{0, 1});
  // Equal scores keep input order; a NaN score sorts first.
  const float s4[] = {0.5f, 0.5f, 0.5f};
  nms(keep, three, s4, 3, 0.5);
  CHECK(keep == Index{0, 2});
  const float s5[] = {0.5f, std::numeric_limits<float>::quiet_NaN(), 0.9f};
  nms(keep, three, s5, 3, 0.5);
  CHECK(keep == Index{1, 2});
  nms(keep, three, s5, 0, 0.5);
  CHECK(keep.empty());

  // Identical boxes of different classes never suppress each other.
  const float same[] = {0, 0, 10, 10, 0, 0, 10, 10, 0, 0, 10, 10, 1, 0, 11, 10};
  const float s6[] = {0.6f, 0.9f, 0.7f, 0.8f};
  const int64_t cls[] = {7, 3, 7, 3};
  batched_nms(keep, same, s6, cls, 4, 0.5);
  CHECK(keep == Index{1, 2});
  const int64_t cls2[] = {1, 2, 3, 4};
  batched_nms(keep, same, s6, cls2, 4, 0.5);
  CHECK(keep == Index{1, 3, 2, 0});
}

TEST_CASE("anchor generator by hand and its errors") {
  const AnchorGenerator gen({{32}, {1, 3, 5}}, {{0.5f, 1, 2}, {1}});
  CHECK(gen.num_anchors_per_location() == std::vector<int64_t>{3, 3});
  // torchvision's well-known FPN cell anchors for size 32.
  CHECK(gen.cell_anchors(0) == std::vector<float>{-23, -11, 23, 11, -16, -16, 16, 16, -11, -23, 11, 23});
  // Half-way values round to even: 0.5 -> 0, 1.5 -> 2, 2.5 -> 2.
  CHECK(gen.cell_anchors(1) == std::vector<float>{0, 0, 0, 0, -2, -2, 2, 2, -2, -2, 2, 2});

  // Order (level, y, x, anchor); strides 10 / 3 = 3 and 12 / 4 = 3.
  const std::vector<float> a = gen.grid_anchors({{3, 4}, {1, 1}}, 10, 12);
  REQUIRE(a.size() == size_t(4 * (3 * 4 * 3 + 3)));
  const size_t r = 4 * ((2 * 4 + 1) * 3 + 1);  // y = 2, x = 1, anchor 1
  CHECK(std::vector<float>(a.begin() + long(r), a.begin() + long(r) + 4) == std::vector<float>{3 - 16, 6 - 16, 3 + 16, 6 + 16});
  CHECK(std::vector<float>(a.end() - 4, a.end()) == std::vector<float>{-2, -2, 2, 2});

  // One ratio list serves every level, as in torchvision.
  CHECK(AnchorGenerator({{32}, {64}, {128}}, {{0.5f, 1, 2}}).num_anchors_per_location() == std::vector<int64_t>{3, 3, 3});
  expect_error([] { AnchorGenerator({{32}, {64}}, {{1}, {1}, {1}}); }, "2 levels of sizes but 3");
  expect_error([&] { gen.grid_anchors({{3, 4}}, 10, 12); }, "1 feature maps for 2 anchor levels");
  expect_error([&] { gen.grid_anchors({{3, 4}, {11, 1}}, 10, 12); }, "feature map 1 is 11x1");
  expect_error([&] { gen.cell_anchors(2); }, "no level 2");
}

TEST_CASE("parity with torchvision 0.14 (one python run)") {
  TempDir dir;
  std::ofstream list(dir / "cases.txt");
  std::vector<std::function<void()>> checks;  // run after torchvision has written its outputs
  const auto path = [&dir](const std::string& name, const std::string& part) { return dir / (name + "." + part); };

  // Box coder: RPN and box-head weights; deltas up to dw = 8 so about a quarter hit the clamp.
  for (const auto& [name, coder, k] : {std::tuple{std::string("rpn"), BoxCoder{}, int64_t(1)},
                                        std::tuple{std::string("head"), BoxCoder{10, 10, 5, 5}, int64_t(5)}}) {
    const int64_t n = k == 1 ? 20000 : 400;  // RPN sizes take the OpenMP path
    const Boxes gt = random_boxes(n, 11), prop = random_boxes(n, 12);
    write_raw(path("enc_" + name, "gt.f32"), gt);
    write_raw(path("enc_" + name, "prop.f32"), prop);
    list << "encode enc_" << name << " " << n << " " << coder.wx << " " << coder.wy << " " << coder.ww << " " << coder.wh << "\n";
    auto enc = std::make_shared<Boxes>(size_t(4 * n));
    coder.encode(enc->data(), gt.data(), prop.data(), n);
    checks.push_back([=] {
      const Boxes want = read_raw<float>(path("enc_" + name, "out.f32"));
      REQUIRE(want.size() == enc->size());
      for (size_t i = 0; i < want.size(); ++i) {
        // dx, dy involve no transcendental: bit-identical. dw, dh: logf vs Sleef, a few ulps.
        const bool ok = i % 4 < 2 ? (*enc)[i] == want[i]
                                  : std::fabs((*enc)[i] - want[i]) <= 1e-7 + 2e-6 * std::fabs(want[i]);
        if (!ok) {
          FAIL_CHECK("encode ", name, ": value ", i, " is ", num((*enc)[i]), ", torchvision ", num(want[i]));
          break;
        }
      }
    });

    const int64_t m = k == 1 ? 20000 : 300;
    const Boxes ref = random_boxes(m, 13);
    Rng rng(14, name);
    Boxes deltas;
    for (int64_t i = 0; i < m * k; ++i) {
      const uint64_t q = 4 * uint64_t(i);
      deltas.insert(deltas.end(), {coder.wx * rng.uniform(q, -1.5f, 1.5f), coder.wy * rng.uniform(q + 1, -1.5f, 1.5f),
                                   coder.ww * rng.uniform(q + 2, -5, 8), coder.wh * rng.uniform(q + 3, -5, 8)});
    }
    // Second variant: dw = dh = 0, so exp is exactly 1 on both sides and every output must be
    // bit-identical (this is what catches a changed operation order or a fused multiply-add).
    for (const bool shift_only : {false, true}) {
      const std::string case_name = (shift_only ? "dec0_" : "dec_") + name;
      if (shift_only)
        for (size_t i = 0; i < deltas.size(); ++i) deltas[i] = i % 4 < 2 ? deltas[i] : 0.f;
      write_raw(path(case_name, "deltas.f32"), deltas);
      write_raw(path(case_name, "ref.f32"), ref);
      list << "decode " << case_name << " " << m << " " << k << " " << coder.wx << " " << coder.wy << " "
           << coder.ww << " " << coder.wh << "\n";
      auto dec = std::make_shared<Boxes>(size_t(4 * m * k));
      coder.decode(dec->data(), deltas.data(), ref.data(), m, k);
      checks.push_back([=] {
        const Boxes want = read_raw<float>(path(case_name, "out.f32"));
        if (shift_only)
          expect_exact("decode " + case_name, *dec, want);
        else
          expect_coords("decode " + case_name, *dec, want);
      });
    }
  }

  {  // IoU and area, including identical and disjoint pairs; 37 x 3001 takes the OpenMP path.
    Boxes a = random_boxes(37, 21), b = random_boxes(3001, 22);
    std::copy(a.begin(), a.begin() + 8, b.begin());
    write_raw(path("iou", "a.f32"), a);
    write_raw(path("iou", "b.f32"), b);
    list << "iou iou 37 3001\n";
    auto iou = std::make_shared<std::vector<float>>(37 * 3001);
    auto area = std::make_shared<std::vector<float>>(37);
    box_iou(iou->data(), a.data(), 37, b.data(), 3001);
    box_area(area->data(), a.data(), 37);
    checks.push_back([=] {
      const std::vector<float> want = read_raw<float>(path("iou", "out.f32"));
      // Same float ops in the same order as torchvision, so bit-identical (1e-6 would hide a
      // fused multiply-add, which can flip an NMS decision at the threshold).
      expect_exact("box_iou", *iou, want);
      expect_exact("box_area", *area, read_raw<float>(path("iou", "area.f32")));
    });
  }

  {  // clip and remove_small_boxes (widths exactly 0.7f and 1e-3f sit on the thresholds).
    Boxes boxes = random_boxes(300, 31, 0.0001f, 900.f);
    for (float w : {0.7f, 1e-3f, std::nextafter(0.7f, 0.f)}) boxes.insert(boxes.end(), {0, 0, w, w});
    const int64_t n = int64_t(boxes.size() / 4);
    write_raw(path("clip", "boxes.f32"), boxes);
    list << "clip clip " << n << " 800 1216\n";
    auto clipped = std::make_shared<Boxes>(boxes);
    clip_boxes_to_image(clipped->data(), n, 800, 1216);
    checks.push_back([=] { expect_exact("clip", *clipped, read_raw<float>(path("clip", "out.f32"))); });
    for (double min_size : {1e-3, 0.7, 5.0}) {
      const std::string name = "small" + std::to_string(checks.size());
      write_raw(path(name, "boxes.f32"), boxes);
      list << "small " << name << " " << n << " " << num(min_size) << "\n";
      auto keep = std::make_shared<Index>();
      remove_small_boxes(*keep, boxes.data(), n, float(min_size));
      checks.push_back([=] { expect_index(name, *keep, read_raw<int64_t>(path(name, "keep.i64"))); });
    }
  }

  // nms on clustered boxes; one case with ties and a NaN score, whose order torchvision defines.
  for (int64_t n : {1, 7, 500, 3000})
    for (double thr : {0.3, 0.5, 0.7}) {
      const std::string name = "nms_" + std::to_string(n) + "_" + std::to_string(int(thr * 10));
      const Boxes boxes = clustered_boxes(n, uint64_t(n));
      std::vector<float> scores = distinct_scores(n, uint64_t(n) + 1);
      if (n == 500 && thr == 0.5) {
        for (size_t i = 0; i < scores.size(); ++i) scores[i] = std::round(scores[i] * 8) / 8;
        scores[17] = std::numeric_limits<float>::quiet_NaN();
      }
      write_raw(path(name, "boxes.f32"), boxes);
      write_raw(path(name, "scores.f32"), scores);
      list << "nms " << name << " " << n << " " << num(thr) << "\n";
      auto keep = std::make_shared<Index>();
      nms(*keep, boxes.data(), scores.data(), n, thr);
      if (n == 3000) CHECK_MESSAGE(keep->size() < 2900, name, ": the case suppresses too little to prove much");
      checks.push_back([=] { expect_index(name, *keep, read_raw<int64_t>(path(name, "keep.i64"))); });
    }

  // batched_nms against _batched_nms_vanilla, and against the public batched_nms where that
  // runs the same algorithm (over 1000 CPU boxes).
  for (const auto& [n, ncls, thr] : {std::tuple{int64_t(7), 3, 0.5}, std::tuple{int64_t(500), 4, 0.7},
                                     std::tuple{int64_t(3000), 5, 0.3}, std::tuple{int64_t(2500), 3, 0.5}}) {
    const std::string name = "batched_" + std::to_string(n);
    const Boxes boxes = clustered_boxes(n, uint64_t(n) + 7);
    const std::vector<float> scores = distinct_scores(n, uint64_t(n) + 8);
    const int64_t ids[] = {4, 0, 9, 2, 7};  // class ids need not be contiguous
    Rng rng(uint64_t(n), "classes");
    Index classes;
    for (int64_t i = 0; i < n; ++i) classes.push_back(ids[rng.below(uint64_t(i), uint64_t(ncls))]);
    write_raw(path(name, "boxes.f32"), boxes);
    write_raw(path(name, "scores.f32"), scores);
    write_raw(path(name, "classes.i64"), classes);
    list << "batched " << name << " " << n << " " << num(thr) << "\n";
    auto keep = std::make_shared<Index>();
    batched_nms(*keep, boxes.data(), scores.data(), classes.data(), n, thr);
    checks.push_back([=, n = n] {
      expect_index(name, *keep, read_raw<int64_t>(path(name, "keep.i64")));
      if (n > 1000) expect_index(name + " (public)", *keep, read_raw<int64_t>(path(name, "public.i64")));
    });
  }

  // Anchors: resnet50-FPN levels (the last one from LastLevelMaxPool, so its stride is not a
  // power of two) and an unpadded image whose strides do not divide it, with fractional sizes.
  const std::vector<std::vector<float>> fpn_sizes = {{32}, {64}, {128}, {256}, {512}};
  const std::vector<std::vector<float>> fpn_ratios(5, std::vector<float>{0.5f, 1, 2});
  const AnchorCase anchor_cases[] = {
      {224, 320, {{56, 80}, {28, 40}, {14, 20}, {7, 10}, {4, 5}}, fpn_sizes, fpn_ratios},
      {800, 1216, {{200, 304}, {100, 152}, {50, 76}, {25, 38}, {13, 19}}, fpn_sizes, fpn_ratios},
      {97, 150, {{25, 38}, {13, 19}}, {{1, 3, 5, 20.5f}, {33.3f, 71}}, {{0.25f, 1, 1.7f}, {0.5f, 2}}},
  };
  for (const AnchorCase& c : anchor_cases) {
    const std::string name = "anchors_" + std::to_string(c.height) + "x" + std::to_string(c.width);
    list << "anchors " << name << " " << c.height << " " << c.width << " " << c.grids.size();
    for (size_t l = 0; l < c.grids.size(); ++l) {
      list << " " << c.grids[l][0] << " " << c.grids[l][1] << " " << c.sizes[l].size();
      for (float s : c.sizes[l]) list << " " << num(s);
      list << " " << c.ratios[l].size();
      for (float r : c.ratios[l]) list << " " << num(r);
    }
    list << "\n";
    auto got = std::make_shared<std::vector<float>>(
        AnchorGenerator(c.sizes, c.ratios).grid_anchors(c.grids, c.height, c.width));
    checks.push_back([=] { expect_exact(name, *got, read_raw<float>(path(name, "out.f32"))); });
  }

  list.close();
  REQUIRE(list.good());
  run_python("detect_boxes_torch.py", shell_quote(dir.path.string()));
  for (const auto& check : checks) check();
}
