// RoIAlign and MultiScaleRoIAlign (src/detect/roi_align.h): hand-computed cases, a naive
// double-precision reference with finite-difference gradients, thread-count determinism, and
// parity with torchvision 0.14 computed at test time by tests/python/detect_roi_align_torch.py.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <omp.h>
#include <string>
#include <vector>

#include "detect/roi_align.h"
#include "testing.h"

using namespace mpicnn;
using namespace mpicnn::testing;
using namespace mpicnn::detect;

namespace {

Tensor poisoned(const Shape& s) {
  Tensor t = Tensor::empty(s);
  t.fill(std::numeric_limits<float>::quiet_NaN());
  return t;
}

// K rois [b, x1, y1, x2, y2] on an image of image_h x image_w: centres up to 15% beyond the
// image (so some rois leave the map), sides log-uniform in [min_side, max_side].
Tensor random_rois(int64_t K, int64_t N, double image_h, double image_w, double min_side,
                   double max_side, uint64_t seed) {
  Rng rng(seed, "rois");
  Tensor r = Tensor::empty({K, 5});
  const double lmin = std::log(min_side), lmax = std::log(max_side);
  for (int64_t k = 0; k < K; ++k) {
    const uint64_t i = uint64_t(k) * 8;
    const double cx = rng.uniform(i, -0.15f, 1.15f) * image_w;
    const double cy = rng.uniform(i + 1, -0.15f, 1.15f) * image_h;
    const double w = std::exp(lmin + (lmax - lmin) * rng.uniform(i + 2));
    const double h = std::exp(lmin + (lmax - lmin) * rng.uniform(i + 3));
    float* row = r.data() + k * 5;
    row[0] = float(rng.below(i + 4, uint64_t(N)));
    row[1] = float(cx - w / 2), row[2] = float(cy - h / 2);
    row[3] = float(cx + w / 2), row[4] = float(cy + h / 2);
  }
  return r;
}

// RoIAlign straight from its definition, in double: each bin averages bilinear samples on a
// regular grid; a sample more than one cell outside the map is 0, one within a cell of the
// border reads the clamped position.
Vec ref_roi_align(const Vec& feat, const float* rois, int64_t K, int64_t C, int64_t H, int64_t W,
                  int PH, int PW, double scale, int sampling, bool aligned) {
  Vec out;
  for (int64_t k = 0; k < K; ++k) {
    const float* r = rois + k * 5;
    const auto b = int64_t(r[0]);
    const double off = aligned ? 0.5 : 0.0;
    const double y0 = r[2] * scale - off, x0 = r[1] * scale - off;
    double rh = r[4] * scale - off - y0, rw = r[3] * scale - off - x0;
    if (!aligned) rh = std::max(rh, 1.0), rw = std::max(rw, 1.0);
    const int gh = sampling > 0 ? sampling : int(std::max(0.0, std::ceil(rh / PH)));
    const int gw = sampling > 0 ? sampling : int(std::max(0.0, std::ceil(rw / PW)));
    for (int64_t c = 0; c < C; ++c) {
      const double* plane = feat.data() + (b * C + c) * H * W;
      auto at = [&](double y, double x) {
        if (y < -1 || y > double(H) || x < -1 || x > double(W)) return 0.0;
        y = std::clamp(y, 0.0, double(H - 1)), x = std::clamp(x, 0.0, double(W - 1));
        const auto yl = int64_t(std::floor(y)), xl = int64_t(std::floor(x));
        const int64_t yh = std::min(yl + 1, H - 1), xh = std::min(xl + 1, W - 1);
        const double ly = y - double(yl), lx = x - double(xl);
        return (1 - ly) * (1 - lx) * plane[yl * W + xl] + (1 - ly) * lx * plane[yl * W + xh] +
               ly * (1 - lx) * plane[yh * W + xl] + ly * lx * plane[yh * W + xh];
      };
      for (int ph = 0; ph < PH; ++ph)
        for (int pw = 0; pw < PW; ++pw) {
          double sum = 0;
          for (int iy = 0; iy < gh; ++iy)
            for (int ix = 0; ix < gw; ++ix)
              sum += at(y0 + (ph + (iy + 0.5) / gh) * rh / PH, x0 + (pw + (ix + 0.5) / gw) * rw / PW);
          out.push_back(sum / std::max(gh * gw, 1));
        }
    }
  }
  return out;
}

void write_f32(const std::string& path, const Tensor& t) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(t.data()), std::streamsize(t.numel() * sizeof(float)));
  REQUIRE_MESSAGE(f.good(), "cannot write ", path);
}

Vec read_f32(const std::string& path, int64_t n) {
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(path, ec);
  REQUIRE_MESSAGE(!ec, "torchvision wrote no ", path);
  REQUIRE_MESSAGE(bytes == uint64_t(n) * sizeof(float), path, " has ", bytes, " bytes, expected ",
                  n, " floats");
  std::vector<float> v(static_cast<size_t>(n));
  std::ifstream f(path, std::ios::binary);
  f.read(reinterpret_cast<char*>(v.data()), std::streamsize(bytes));
  REQUIRE(f.good());
  return Vec(v.begin(), v.end());
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() &&
         std::memcmp(a.data(), b.data(), size_t(a.numel()) * sizeof(float)) == 0;
}

// ---- the torchvision run: every parity case, one python invocation --------------------------

struct RoiCfg {
  std::string name;
  int64_t N, C, H, W, K;
  int PH, PW;
  double scale;
  int sampling;
  bool aligned;
  double min_side, max_side;  // roi sides in image pixels
  float dfeat_base;           // backward accumulates onto this
};

struct RoiCase : RoiCfg {
  Tensor feat, rois, dout;
  Vec want_out, want_dfeat;
};

const int64_t kMsN = 2, kMsC = 4, kImageH = 320, kImageW = 448;
const int64_t kMsSizes[4][2] = {{80, 112}, {40, 56}, {20, 28}, {10, 14}};
const int64_t kImages[kMsN][2] = {{320, 448}, {296, 430}};  // torchvision takes the max

struct MsCase {
  int64_t K = 0;
  std::vector<Tensor> feats;
  Tensor rois, dout;
  std::vector<Vec> want_dfeats;
  Vec want_out;
  std::vector<int> want_levels;
  std::vector<double> want_scales;
};

struct TorchRun {
  std::vector<RoiCase> roi;
  MsCase ms;
};

Tensor ms_rois() {
  // Per image: random rois from 4 to 640 pixels a side, then boxes on the level boundaries
  // (224 and 112 exactly, a hair below each: the mapper's eps decides those) and one too
  // large for any level but the coarsest. Grouped by image, as torchvision concatenates them.
  const float edge[][4] = {{10, 20, 234, 244},       {100, 50, 212, 162},
                           {0, 0, 111.99997f, 111.99997f}, {5, 5, 228.9999f, 228.9999f},
                           {-20, -10, 480, 490},     {300, 200, 301, 201}};
  std::vector<float> rows;
  for (int64_t b = 0; b < kMsN; ++b) {
    const Tensor r = random_rois(34, 1, double(kImageH), double(kImageW), 4, 640, 70 + uint64_t(b));
    for (int64_t k = 0; k < r.size(0); ++k) {
      rows.push_back(float(b));
      for (int j = 1; j < 5; ++j) rows.push_back(r.data()[k * 5 + j]);
    }
    for (const auto& e : edge) rows.insert(rows.end(), {float(b), e[0], e[1], e[2], e[3]});
  }
  Tensor t = Tensor::empty({int64_t(rows.size() / 5), 5});
  std::copy(rows.begin(), rows.end(), t.data());
  return t;
}

TorchRun make_torch_run() {
  TorchRun run;
  const RoiCfg cfgs[] = {
      {"legacy_q4_s2", 2, 3, 20, 24, 64, 7, 7, 0.25, 2, false, 2, 120, 0.5f},
      {"aligned_q16_adaptive", 2, 2, 12, 16, 64, 7, 7, 1.0 / 16, 0, true, 4, 400, 0},
      {"k1_tiny_3x5", 1, 4, 9, 11, 1, 3, 5, 0.25, 2, false, 0.1, 3, 0},
      {"aligned_tiny_adaptive_3x5", 2, 3, 10, 10, 64, 3, 5, 0.25, 0, true, 0.05, 8, 0},
      {"legacy_q16_adaptive", 2, 2, 14, 10, 64, 7, 7, 1.0 / 16, 0, false, 1, 300, 0},
      {"aligned_q4_s2_3x5", 2, 3, 16, 12, 64, 3, 5, 0.25, 2, true, 1, 80, 0},
  };
  for (const RoiCfg& cfg : cfgs) {
    run.roi.emplace_back();
    static_cast<RoiCfg&>(run.roi.back()) = cfg;
  }
  TempDir dir;
  std::ofstream cases(dir / "cases.txt");
  for (size_t i = 0; i < run.roi.size(); ++i) {
    RoiCase& c = run.roi[i];
    c.feat = random_tensor({c.N, c.C, c.H, c.W}, 10 + i);
    c.rois = random_rois(c.K, c.N, double(c.H) / c.scale, double(c.W) / c.scale, c.min_side,
                         c.max_side, 20 + i);
    c.dout = random_tensor({c.K, c.C, c.PH, c.PW}, 30 + i);
    write_f32(dir / (c.name + ".feat.f32"), c.feat);
    write_f32(dir / (c.name + ".rois.f32"), c.rois);
    write_f32(dir / (c.name + ".dout.f32"), c.dout);
    char scale[64];
    std::snprintf(scale, sizeof scale, "%.17g", c.scale);
    cases << "roi " << c.name << ' ' << c.N << ' ' << c.C << ' ' << c.H << ' ' << c.W << ' '
          << c.K << ' ' << c.PH << ' ' << c.PW << ' ' << scale << ' ' << c.sampling << ' '
          << int(c.aligned) << '\n';
  }
  MsCase& ms = run.ms;
  ms.rois = ms_rois();
  ms.K = ms.rois.size(0);
  ms.dout = random_tensor({ms.K, kMsC, 7, 7}, 40);
  write_f32(dir / "ms.rois.f32", ms.rois);
  write_f32(dir / "ms.dout.f32", ms.dout);
  cases << "ms ms " << kMsN << ' ' << kMsC << ' ' << ms.K << " 4";
  for (int l = 0; l < 4; ++l) {
    ms.feats.push_back(random_tensor({kMsN, kMsC, kMsSizes[l][0], kMsSizes[l][1]}, 50 + uint64_t(l)));
    write_f32(dir / ("ms.feat" + std::to_string(l) + ".f32"), ms.feats.back());
    cases << ' ' << kMsSizes[l][0] << ' ' << kMsSizes[l][1];
  }
  for (const auto& im : kImages) cases << ' ' << im[0] << ' ' << im[1];
  cases << '\n';
  cases.close();

  run_python("detect_roi_align_torch.py", shell_quote(dir.path.string()));

  for (RoiCase& c : run.roi) {
    c.want_out = read_f32(dir / (c.name + ".out.f32"), c.K * c.C * c.PH * c.PW);
    c.want_dfeat = read_f32(dir / (c.name + ".dfeat.f32"), c.feat.numel());
  }
  ms.want_out = read_f32(dir / "ms.out.f32", ms.dout.numel());
  for (int l = 0; l < 4; ++l)
    ms.want_dfeats.push_back(read_f32(dir / ("ms.dfeat" + std::to_string(l) + ".f32"), ms.feats[size_t(l)].numel()));
  std::ifstream lf(dir / "ms.levels.txt"), sf(dir / "ms.scales.txt");
  int lv;
  while (lf >> lv) ms.want_levels.push_back(lv);
  double s;
  while (sf >> s) ms.want_scales.push_back(s);
  return run;
}

const TorchRun& torch_run() {
  static const TorchRun run = make_torch_run();
  return run;
}

}  // namespace

TEST_CASE("roi_align hand-computed case: sample average, outside samples, adjoint") {
  // feat[y][x] = 10 y + x is linear, so bilinear samples inside the map are exact.
  Tensor feat = Tensor::empty({1, 1, 3, 4});
  for (int y = 0; y < 3; ++y)
    for (int x = 0; x < 4; ++x) feat.data()[y * 4 + x] = float(10 * y + x);
  // Roi 0: samples x in {1, 2}, y in {0.625, 1.375} -> mean 10 * 1 + 1.5.
  // Roi 1: samples x = 4 (on the border: reads column 3) and x = 5 (beyond W: 0), divided by 4.
  const float rois[] = {0, 0.5f, 0.25f, 2.5f, 1.75f, 0, 3.5f, 0.25f, 5.5f, 1.75f};
  Tensor out = poisoned({2, 1, 1, 1});
  roi_align_forward(out.data(), feat.data(), rois, 2, 1, 1, 3, 4, 1, 1, 1.0, 2, false);
  CHECK(out.data()[0] == doctest::Approx(11.5).epsilon(1e-7));
  CHECK(out.data()[1] == doctest::Approx((9.25 + 16.75) / 4).epsilon(1e-7));

  Tensor dfeat = Tensor::zeros({1, 1, 3, 4});
  const float dout[] = {0, 1};
  roi_align_backward(dfeat.data(), dout, rois, 2, 1, 1, 3, 4, 1, 1, 1.0, 2, false);
  // Column 3 gets (0.375, 0.625) and (0.625, 0.375) of rows (0,1), (1,2), each over 4.
  const double want[12] = {0, 0, 0, 0.09375, 0, 0, 0, 0.3125, 0, 0, 0, 0.09375};
  for (int i = 0; i < 12; ++i) CHECK(dfeat.data()[i] == doctest::Approx(want[i]).epsilon(1e-7));
}

TEST_CASE("infer_scale and LevelMapper hand-computed cases") {
  CHECK(infer_scale(80, 320) == 0.25);
  CHECK(infer_scale(200, 800) == 0.25);   // 800x1066 padded to 800x1088 by the transform
  CHECK(infer_scale(34, 100) == 0.25);    // log2 0.34 = -1.56 rounds to -2
  CHECK(infer_scale(36, 100) == 0.5);     // log2 0.36 = -1.47 rounds to -1
  CHECK(infer_scale(10, 320) == 0.03125);
  const LevelMapper m{2, 5};
  const float boxes[][4] = {{0, 0, 224, 224},  {0, 0, 112, 112}, {0, 0, 200, 200},
                            {0, 0, 111.99997f, 111.99997f},  // eps lifts 2.9999995 to level 3
                            {0, 0, 1, 1},      {0, 0, 1000, 1000}, {0, 0, 0, 10}};
  const int want[] = {2, 1, 1, 1, 0, 3, 0};
  for (size_t i = 0; i < std::size(want); ++i) CHECK_MESSAGE(m.level(boxes[i]) == want[i], "box ", i);
  const float bad[] = {10, 0, 0, 10};
  expect_error([&] { (void)m.level(bad); }, "negative or non-finite area");
}

TEST_CASE("roi_align matches a double reference and finite differences") {
  struct Cfg {
    int64_t N, C, H, W, K;
    int PH, PW;
    double scale;
    int sampling;
    bool aligned;
  };
  const Cfg cfgs[] = {{2, 2, 7, 9, 6, 3, 3, 0.25, 2, false},
                      {2, 2, 8, 6, 6, 2, 3, 0.5, 0, true},
                      {1, 3, 6, 7, 4, 3, 2, 1.0, 3, false}};
  uint64_t seed = 100;
  for (const Cfg& c : cfgs) {
    INFO("config H ", c.H, " W ", c.W, " scale ", c.scale, " sampling ", c.sampling, " aligned ", c.aligned);
    const Tensor feat = random_tensor({c.N, c.C, c.H, c.W}, ++seed);
    const Tensor rois = random_rois(c.K, c.N, c.H / c.scale, c.W / c.scale, 0.5 / c.scale,
                                    6 / c.scale, ++seed);
    const Tensor dout = random_tensor({c.K, c.C, c.PH, c.PW}, ++seed);
    Tensor out = poisoned({c.K, c.C, c.PH, c.PW});
    roi_align_forward(out.data(), feat.data(), rois.data(), c.K, c.N, c.C, c.H, c.W, c.PH, c.PW,
                      c.scale, c.sampling, c.aligned);
    const Vec x0 = to_double(feat);
    auto ref = [&](const Vec& x) {
      return ref_roi_align(x, rois.data(), c.K, c.C, c.H, c.W, c.PH, c.PW, c.scale, c.sampling, c.aligned);
    };
    expect_close("forward vs double reference", out, ref(x0), 1e-5, 1e-5);

    Tensor dfeat = Tensor::zeros({c.N, c.C, c.H, c.W});
    roi_align_backward(dfeat.data(), dout.data(), rois.data(), c.K, c.N, c.C, c.H, c.W, c.PH,
                       c.PW, c.scale, c.sampling, c.aligned);
    const Vec w = to_double(dout);
    GradCheckOptions opt;
    opt.h = 1e-2;  // the map is linear in feat: any step is exact up to rounding
    opt.max_checks = int(feat.numel());
    opt.rtol = 1e-5;
    opt.atol_frac = 1e-5;
    check_gradient("dfeat", dfeat, [&](const Vec& x) { return dot(w, ref(x)); }, x0, opt);
  }
}

TEST_CASE("roi_align backward is bit-identical with 1 and 2 threads") {
  const int saved = omp_get_max_threads();
  const int64_t N = 2, C = 32, H = 40, W = 48, K = 128;
  const Tensor feat = random_tensor({N, C, H, W}, 200);
  const Tensor rois = random_rois(K, N, H * 8.0, W * 8.0, 8, 300, 201);
  const Tensor dout = random_tensor({K, C, 7, 7}, 202);
  for (int sampling : {2, 0}) {
    INFO("sampling ", sampling);
    Tensor out[2], dfeat[2];
    for (int t = 0; t < 2; ++t) {
      omp_set_num_threads(t + 1);
      out[t] = poisoned({K, C, 7, 7});
      dfeat[t] = Tensor::zeros({N, C, H, W});
      roi_align_forward(out[t].data(), feat.data(), rois.data(), K, N, C, H, W, 7, 7, 0.125,
                        sampling, false);
      roi_align_backward(dfeat[t].data(), dout.data(), rois.data(), K, N, C, H, W, 7, 7, 0.125,
                         sampling, false);
    }
    CHECK(same_bits(out[0], out[1]));
    CHECK(same_bits(dfeat[0], dfeat[1]));
  }
  omp_set_num_threads(saved);
}

TEST_CASE("roi_align and MultiScaleRoIAlign reject bad input with clear errors") {
  const Tensor feat = random_tensor({2, 1, 4, 4}, 300);
  Tensor out = Tensor::empty({1, 1, 2, 2});
  const float bad_batch[] = {2, 0, 0, 3, 3};
  expect_error([&] { roi_align_forward(out.data(), feat.data(), bad_batch, 1, 2, 1, 4, 4, 2, 2, 1.0, 2, false); },
               "batch index 2, outside [0, 2)");
  const float nan_roi[] = {0, 0, 0, std::numeric_limits<float>::quiet_NaN(), 3};
  expect_error([&] { roi_align_forward(out.data(), feat.data(), nan_roi, 1, 2, 1, 4, 4, 2, 2, 1.0, 0, false); },
               "too many adaptive sampling points");
  const float huge_roi[] = {0, 0, 0, 60000, 60000};  // 8572^2 points in each of 4 bins
  expect_error([&] { roi_align_forward(out.data(), feat.data(), huge_roi, 1, 2, 1, 4, 4, 2, 2, 1.0, 0, false); },
               "adaptive sampling points: too many");
  MultiScaleRoIAlign pool;
  expect_error([&] { pool.plan({{1, 1, 16, 16}, {1, 1, 4, 4}}, 64, 64, 1); }, "must halve");
  pool.plan({{1, 1, 16, 16}, {1, 1, 8, 8}}, 64, 64, 4);
  const Tensor f0 = random_tensor({1, 1, 16, 16}, 301), f1 = random_tensor({1, 1, 8, 8}, 302);
  const float rois[] = {0, 1, 1, 20, 20};
  Tensor o = Tensor::empty({1, 1, 7, 7});
  pool.forward(o.data(), {{f0.data(), f0.shape()}, {f1.data(), f1.shape()}}, rois, 1, 64, 64);
  Tensor d0 = Tensor::zeros({1, 1, 16, 16}), d1 = Tensor::zeros({1, 1, 8, 8});
  expect_error([&] { pool.backward({d0.data(), d1.data()}, o.data(), rois, 2); }, "the last forward had 1");
}

TEST_CASE("roi_align matches torchvision forward and backward") {
  for (const RoiCase& c : torch_run().roi) {
    INFO("case ", c.name);
    Tensor out = poisoned({c.K, c.C, c.PH, c.PW});
    roi_align_forward(out.data(), c.feat.data(), c.rois.data(), c.K, c.N, c.C, c.H, c.W, c.PH,
                      c.PW, c.scale, c.sampling, c.aligned);
    expect_close(c.name + " forward", out, c.want_out, 1e-5, 1e-6);
    Tensor dfeat = Tensor::empty({c.N, c.C, c.H, c.W});
    dfeat.fill(c.dfeat_base);
    roi_align_backward(dfeat.data(), c.dout.data(), c.rois.data(), c.K, c.N, c.C, c.H, c.W, c.PH,
                       c.PW, c.scale, c.sampling, c.aligned);
    Vec want = c.want_dfeat;
    for (double& v : want) v += c.dfeat_base;  // backward accumulates
    expect_close(c.name + " dfeat", dfeat, want, 1e-5, 1e-6);
  }
}

TEST_CASE("MultiScaleRoIAlign matches torchvision: scales, levels, forward, backward") {
  const MsCase& ms = torch_run().ms;
  MultiScaleRoIAlign pool(7, 2);
  std::vector<FeatureLevel> levels;
  for (const Tensor& f : ms.feats) levels.push_back({f.data(), f.shape()});
  Tensor out = poisoned({ms.K, kMsC, 7, 7});
  pool.forward(out.data(), levels, ms.rois.data(), ms.K, std::max(kImages[0][0], kImages[1][0]),
               std::max(kImages[0][1], kImages[1][1]));

  CHECK(pool.scales() == ms.want_scales);
  REQUIRE(int64_t(ms.want_levels.size()) == ms.K);
  CHECK(pool.roi_levels() == ms.want_levels);
  for (int l = 0; l < 4; ++l)
    CHECK_MESSAGE(std::count(ms.want_levels.begin(), ms.want_levels.end(), l) > 0,
                  "no roi on level ", l, ": the case does not cover every level");
  expect_close("multiscale forward", out, ms.want_out, 1e-5, 1e-6);

  std::vector<Tensor> dfeats;
  std::vector<float*> ptrs;
  for (const Tensor& f : ms.feats) dfeats.push_back(Tensor::zeros(f.shape()));
  for (Tensor& d : dfeats) ptrs.push_back(d.data());
  pool.backward(ptrs, ms.dout.data(), ms.rois.data(), ms.K);
  for (size_t l = 0; l < 4; ++l)
    expect_close("multiscale dfeat level " + std::to_string(l), dfeats[l], ms.want_dfeats[l], 1e-5, 1e-6);
}
