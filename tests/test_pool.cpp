// Pooling layers (MaxPool2d, AvgPool2d, AdaptiveAvgPool2d): fast CPU code vs naive double
// loops written here, finite-difference gradient checks, PyTorch's tie/NaN/-inf rules, errors,
// and parity with torch 1.13 computed at test time by tests/python/pool_torch.py.
#include <bit>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <sys/wait.h>

#include "layers/adaptive_avgpool2d.h"
#include "layers/avgpool2d.h"
#include "layers/maxpool2d.h"
#include "testing.h"

using namespace mpicnn;
using namespace mpicnn::testing;

namespace {

const double kInf = std::numeric_limits<double>::infinity();

// Outputs and input gradients start as NaN, so a forward or backward that skips an element
// (or accumulates instead of writing '=') cannot pass.
Tensor poisoned(const Shape& s) {
  Tensor t = Tensor::empty(s);
  t.fill(std::numeric_limits<float>::quiet_NaN());
  return t;
}

// Output extent by counting window starts (padded coordinates), not by PyTorch's formula:
// floor mode keeps whole windows; ceil mode keeps a window while the one before it had not
// reached the padded end, provided it starts inside the input or the left padding.
int64_t ref_out_size(int64_t in, int k, int s, int p, int d, bool ceil_mode) {
  const int64_t span = int64_t(d) * (k - 1) + 1, padded = in + 2 * p;
  int64_t n = 0;  // windows 0..n-1 taken so far
  while (ceil_mode ? (n - 1) * s + span < padded && n * s - p < in : n * s + span <= padded) ++n;
  return n;
}

struct MaxCfg {
  Shape in;
  int kh, kw, sh, sw, ph, pw, dh, dw;
  bool ceil;
  MaxPool2dOptions options() const {
    return {.kernel = {kh, kw}, .stride = {sh, sw}, .padding = {ph, pw}, .dilation = {dh, dw},
            .ceil_mode = ceil};
  }
  Shape out() const {
    return {in[0], in[1], ref_out_size(in[2], kh, sh, ph, dh, ceil),
            ref_out_size(in[3], kw, sw, pw, dw, ceil)};
  }
};

Vec max_ref(const Vec& x, const MaxCfg& c) {
  const Shape o = c.out();
  const int64_t H = c.in[2], W = c.in[3];
  Vec y;
  for (int64_t p = 0; p < o[0] * o[1]; ++p)
    for (int64_t oh = 0; oh < o[2]; ++oh)
      for (int64_t ow = 0; ow < o[3]; ++ow) {
        double best = -kInf;
        for (int i = 0; i < c.kh; ++i)
          for (int j = 0; j < c.kw; ++j) {
            int64_t h = oh * c.sh - c.ph + i * c.dh, w = ow * c.sw - c.pw + j * c.dw;
            if (h >= 0 && h < H && w >= 0 && w < W)
              best = std::max(best, x[size_t(p * H * W + h * W + w)]);
          }
        y.push_back(best);
      }
  return y;
}

struct AvgCfg {
  Shape in;
  int kh, kw, sh, sw, ph, pw;
  bool ceil, include_pad;
  int divisor;  // 0: none
  AvgPool2dOptions options() const {
    AvgPool2dOptions o{.kernel = {kh, kw}, .stride = {sh, sw}, .padding = {ph, pw},
                       .ceil_mode = ceil, .count_include_pad = include_pad};
    if (divisor) o.divisor_override = divisor;
    return o;
  }
  Shape out() const {
    return {in[0], in[1], ref_out_size(in[2], kh, sh, ph, 1, ceil),
            ref_out_size(in[3], kw, sw, pw, 1, ceil)};
  }
};

// Divisor by counting cells: real ones, or those inside the padded input.
Vec avg_ref(const Vec& x, const AvgCfg& c) {
  const Shape o = c.out();
  const int64_t H = c.in[2], W = c.in[3];
  Vec y;
  for (int64_t p = 0; p < o[0] * o[1]; ++p)
    for (int64_t oh = 0; oh < o[2]; ++oh)
      for (int64_t ow = 0; ow < o[3]; ++ow) {
        double sum = 0;
        int real = 0, padded = 0;
        for (int i = 0; i < c.kh; ++i)
          for (int j = 0; j < c.kw; ++j) {
            int64_t h = oh * c.sh - c.ph + i, w = ow * c.sw - c.pw + j;
            if (h >= -c.ph && h < H + c.ph && w >= -c.pw && w < W + c.pw) ++padded;
            if (h >= 0 && h < H && w >= 0 && w < W) ++real, sum += x[size_t(p * H * W + h * W + w)];
          }
        y.push_back(sum / (c.divisor ? c.divisor : c.include_pad ? padded : real));
      }
  return y;
}

Vec adaptive_ref(const Vec& x, const Shape& in, int64_t OH, int64_t OW) {
  const int64_t H = in[2], W = in[3];
  Vec y;
  for (int64_t p = 0; p < in[0] * in[1]; ++p)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        auto h0 = int64_t(std::floor(double(oh * H) / double(OH)));
        auto h1 = int64_t(std::ceil(double((oh + 1) * H) / double(OH)));
        auto w0 = int64_t(std::floor(double(ow * W) / double(OW)));
        auto w1 = int64_t(std::ceil(double((ow + 1) * W) / double(OW)));
        double sum = 0;
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t w = w0; w < w1; ++w) sum += x[size_t(p * H * W + h * W + w)];
        y.push_back(sum / double((h1 - h0) * (w1 - w0)));
      }
  return y;
}


template <class F>
void expect_error_labelled(const std::string& what, F&& f, const std::string& part) {
  INFO(what);
  testing::expect_error(f, part);
}

}  // namespace

TEST_CASE("MaxPool2d forward matches reference and gradient checks") {
  const MaxCfg cfgs[] = {
      {{1, 3, 7, 7}, 3, 3, 2, 2, 1, 1, 1, 1, false},   // ResNet stem shape
      {{2, 2, 9, 8}, 2, 2, 2, 2, 0, 0, 1, 1, true},    // ceil: partial last window
      {{3, 1, 10, 11}, 3, 2, 2, 1, 1, 1, 2, 1, false},  // dilation, non-square
      {{2, 2, 6, 5}, 3, 3, 1, 1, 0, 0, 2, 2, true},
      {{4, 3, 5, 7}, 3, 3, 3, 3, 1, 1, 1, 1, true},    // ceil: a window would start in padding
      {{2, 2, 11, 10}, 3, 2, 2, 1, 1, 1, 2, 3, true},
  };
  for (const MaxCfg& c : cfgs) {
    const std::string tag = "maxpool case " + std::to_string(&c - cfgs) + " " + c.in.str();
    MaxPool2d pool(c.options());
    REQUIRE(pool.output_shape(c.in) == c.out());
    pool.plan(c.in, exec());
    Tensor x = random_tensor(c.in, 11), y = poisoned(c.out());
    pool.forward(y, x);
    expect_close(tag + " forward", y, max_ref(to_double(x), c), 0, 0);

    Tensor w = random_tensor(c.out(), 12), dx = poisoned(c.in);
    pool.backward(dx, w, x, y);
    const Vec wd = to_double(w);
    check_gradient(tag + " dx", dx, [&](const Vec& v) { return dot(max_ref(v, c), wd); },
                   to_double(x));
  }
}

TEST_CASE("MaxPool2d default stride, square form and a batch below the planned one") {
  MaxPool2d by_default(MaxPool2dOptions{.kernel = {2, 3}});
  CHECK(by_default.options().stride == std::array<int, 2>{2, 3});
  MaxPool2d square(3, 2, 1);
  CHECK(square.options().kernel == std::array<int, 2>{3, 3});
  CHECK(square.options().padding == std::array<int, 2>{1, 1});

  const MaxCfg c{{4, 32, 17, 17}, 3, 3, 2, 2, 1, 1, 1, 1, false};  // 2 of 4: OpenMP path
  square.plan(c.in, exec());
  Tensor x_all = random_tensor(c.in, 21);
  Tensor x = x_all.slice0(0, 2);
  MaxCfg small = c;
  small.in = x.shape();
  Tensor y = poisoned(small.out()), dx = poisoned(x.shape());
  square.forward(y, x);
  expect_close("maxpool batch 2 of 4", y, max_ref(to_double(x), small), 0, 0);
  Tensor w = random_tensor(small.out(), 22);
  square.backward(dx, w, x, y);
  const Vec wd = to_double(w);
  check_gradient("maxpool batch 2 of 4 dx", dx,
                 [&](const Vec& v) { return dot(max_ref(v, small), wd); }, to_double(x));
}

TEST_CASE("MaxPool2d follows PyTorch on ties, NaN and -inf") {
  MaxPool2d pool(MaxPool2dOptions{.kernel = {2, 2}, .stride = {1, 1}});
  const Shape s{1, 3, 3, 3};
  pool.plan(s, exec());
  Tensor x = Tensor::empty(s), y = Tensor::empty({1, 3, 2, 2}), dx = Tensor::empty(s);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  // plane 0 all equal (first maximum wins), plane 1 with NaN at the centre (NaN wins every
  // window), plane 2 all -inf (the argmax stays at each window's first cell).
  for (int i = 0; i < 9; ++i) x[i] = 1.f, x[9 + i] = float(i), x[18 + i] = -inf;
  x[9 + 4] = nan;
  pool.forward(y, x);
  for (int i = 0; i < 4; ++i) {
    CHECK(y[i] == 1.f);
    CHECK(std::isnan(y[4 + i]));
    CHECK(y[8 + i] == -inf);
  }
  Tensor dy = Tensor::empty(y.shape());
  dy.fill(1.f);
  pool.backward(dx, dy, x, y);
  const float want0[9] = {1, 1, 0, 1, 1, 0, 0, 0, 0};  // window starts (0,0),(0,1),(1,0),(1,1)
  const float want1[9] = {0, 0, 0, 0, 4, 0, 0, 0, 0};
  for (int i = 0; i < 9; ++i) {
    CHECK(dx[i] == want0[i]);
    CHECK(dx[9 + i] == want1[i]);
    CHECK(dx[18 + i] == want0[i]);
  }
}

TEST_CASE("MaxPool2d window with no input cell gives -inf and no gradient") {
  // kernel 2 with dilation 3 and padding 1 over 2 rows touches rows -1 and 2 only. PyTorch
  // returns -inf there too, but indexes past the plane in backward; we pass no gradient.
  MaxPool2d pool(MaxPool2dOptions{.kernel = {2, 1}, .stride = {1, 1}, .padding = {1, 0},
                                  .dilation = {3, 1}});
  const Shape s{1, 1, 2, 4};
  REQUIRE(pool.output_shape(s) == Shape{1, 1, 1, 4});
  pool.plan(s, exec());
  Tensor x = random_tensor(s, 5), y = Tensor::empty({1, 1, 1, 4}), dx = poisoned(s);
  pool.forward(y, x);
  Tensor dy = Tensor::empty(y.shape());
  dy.fill(1.f);
  pool.backward(dx, dy, x, y);
  for (int i = 0; i < 4; ++i) CHECK(y[i] == -std::numeric_limits<float>::infinity());
  for (int i = 0; i < 8; ++i) CHECK(dx[i] == 0.f);
}

TEST_CASE("AvgPool2d forward matches reference and gradient checks") {
  const AvgCfg cfgs[] = {
      {{1, 3, 7, 7}, 3, 3, 2, 2, 1, 1, false, true, 0},
      {{1, 3, 7, 7}, 3, 3, 2, 2, 1, 1, false, false, 0},
      {{2, 2, 9, 8}, 2, 2, 2, 2, 0, 0, true, true, 0},
      {{2, 2, 6, 6}, 3, 3, 2, 2, 1, 1, true, true, 0},   // last window clipped at H + pad
      {{2, 1, 5, 6}, 3, 3, 3, 3, 1, 1, true, false, 0},  // ceil and excluded padding
      {{3, 2, 6, 7}, 3, 2, 1, 2, 1, 0, false, true, 5},  // divisor_override
      {{4, 2, 5, 5}, 3, 3, 3, 3, 1, 1, true, true, 0},   // a window would start in padding
      {{4, 16, 15, 15}, 3, 3, 2, 2, 1, 1, false, true, 0},  // large enough for OpenMP
      // 2x2/2 windows tiling the plane (the vectorised path, DenseNet's transitions)
      {{2, 3, 8, 38}, 2, 2, 2, 2, 0, 0, false, true, 0},
      {{2, 3, 6, 4}, 2, 2, 2, 2, 0, 0, true, false, 3},
      {{4, 16, 16, 16}, 2, 2, 2, 2, 0, 0, false, true, 0},
  };
  for (const AvgCfg& c : cfgs) {
    const std::string tag = "avgpool case " + std::to_string(&c - cfgs) + " " + c.in.str();
    AvgPool2d pool(c.options());
    REQUIRE(pool.output_shape(c.in) == c.out());
    Tensor x = random_tensor(c.in, 31), y = poisoned(c.out());
    pool.forward(y, x);
    expect_close(tag + " forward", y, avg_ref(to_double(x), c), 1e-5, 1e-6);

    Tensor w = random_tensor(c.out(), 32), dx = poisoned(c.in);
    pool.backward(dx, w, x, y);
    const Vec wd = to_double(w);
    check_gradient(tag + " dx", dx, [&](const Vec& v) { return dot(avg_ref(v, c), wd); },
                   to_double(x));
  }
}

TEST_CASE("AdaptiveAvgPool2d forward matches reference and gradient checks") {
  struct Cfg {
    Shape in;
    int oh, ow;
  };
  const Cfg cfgs[] = {
      {{2, 3, 7, 7}, 3, 3},  {{1, 2, 5, 5}, 7, 7},  {{2, 3, 10, 6}, 4, 5},
      {{3, 4, 7, 5}, 1, 1},  {{1, 2, 6, 6}, 6, 6},  {{2, 2, 13, 1}, 5, 2},
      {{2, 64, 16, 16}, 5, 5},  // large enough for OpenMP
  };
  for (const Cfg& c : cfgs) {
    const std::string tag = "adaptive case " + std::to_string(&c - cfgs) + " " + c.in.str();
    AdaptiveAvgPool2d pool(c.oh, c.ow);
    const Shape os{c.in[0], c.in[1], c.oh, c.ow};
    REQUIRE(pool.output_shape(c.in) == os);
    Tensor x = random_tensor(c.in, 41), y = poisoned(os);
    pool.forward(y, x);
    expect_close(tag + " forward", y, adaptive_ref(to_double(x), c.in, c.oh, c.ow), 1e-5, 1e-6);

    Tensor w = random_tensor(os, 42), dx = poisoned(c.in);
    pool.backward(dx, w, x, y);
    const Vec wd = to_double(w);
    check_gradient(tag + " dx", dx,
                   [&](const Vec& v) { return dot(adaptive_ref(v, c.in, c.oh, c.ow), wd); },
                   to_double(x));
  }
}

TEST_CASE("Pooling layers reject bad configurations and shapes with clear errors") {
  expect_error_labelled("max pad", [] { MaxPool2d p(3, 1, 2); }, "at most half the kernel");
  expect_error_labelled("max kernel", [] { MaxPool2d p(0); }, "kernel 0x0 must be positive");
  expect_error_labelled("max stride", [] { MaxPool2d p({.kernel = {2, 2}, .stride = {-1, 1}}); },
               "stride -1x1 must be positive");
  expect_error_labelled("max dilation", [] { MaxPool2d p(2, 2, 0, 0); }, "dilation");
  expect_error_labelled("max too small", [] { MaxPool2d(3).output_shape({1, 1, 2, 2}); }, "too small");
  expect_error_labelled("max 3-D", [] { MaxPool2d(2).output_shape({3, 4, 4}); }, "must be 4-D");
  {
    MaxPool2d p(2);
    Tensor x = Tensor::zeros({2, 1, 4, 4}), y = Tensor::empty({2, 1, 2, 2});
    expect_error_labelled("max no plan", [&] { p.forward(y, x); }, "forward before plan()");
    Tensor dx = Tensor::empty(x.shape());
    expect_error_labelled("max no forward", [&] { p.backward(dx, y, x, y); }, "backward before forward");
    p.plan({1, 1, 4, 4}, exec());
    expect_error_labelled("max over plan", [&] { p.forward(y, x); }, "does not fit the planned");
    p.plan({2, 1, 4, 4}, exec());
    Tensor bad = Tensor::empty({2, 1, 3, 3});
    expect_error_labelled("max out shape", [&] { p.forward(bad, x); }, "out has shape (2, 1, 3, 3)");
  }
  expect_error_labelled("avg pad", [] { AvgPool2d p(2, 2, 2); }, "at most half the kernel");
  expect_error_labelled("avg divisor", [] { AvgPool2d p({.kernel = {2, 2}, .divisor_override = 0}); },
               "divisor_override must not be 0");
  expect_error_labelled("avg too small", [] { AvgPool2d(4).output_shape({1, 1, 3, 8}); }, "too small");
  {
    AvgPool2d p(2);
    Tensor x = Tensor::zeros({1, 1, 4, 4}), dy = Tensor::zeros({1, 1, 2, 2});
    Tensor dx = Tensor::empty({1, 1, 4, 5});
    expect_error_labelled("avg din shape", [&] { p.backward(dx, dy, x, dy); }, "AvgPool2d backward");
  }
  expect_error_labelled("adaptive size", [] { AdaptiveAvgPool2d p(0, 2); }, "must be at least 1x1");
  expect_error_labelled("adaptive 2-D", [] { AdaptiveAvgPool2d(2).output_shape({4, 4}); }, "must be 4-D");
}

// ---- parity with PyTorch -------------------------------------------------------------------

namespace {

static_assert(std::endian::native == std::endian::little, "raw float32 files are little-endian");

void write_f32(const std::filesystem::path& p, const Tensor& t) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(t.data()), std::streamsize(t.numel() * sizeof(float)));
  REQUIRE_MESSAGE(f.good(), "cannot write ", p.string());
}

Tensor read_f32(const std::filesystem::path& p, const Shape& s) {
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(p, ec);
  REQUIRE_MESSAGE(!ec, "torch wrote no ", p.string());
  REQUIRE_MESSAGE(bytes == uint64_t(s.numel()) * sizeof(float), p.string(), " has ", bytes,
                  " bytes, expected shape ", s.str());
  Tensor t = Tensor::empty(s);
  std::ifstream f(p, std::ios::binary);
  f.read(reinterpret_cast<char*>(t.data()), std::streamsize(bytes));
  REQUIRE(f.good());
  return t;
}

// NaN matches NaN and infinities match exactly; otherwise |got - want| <= rtol*|want| + atol.
void expect_match(const std::string& what, const Tensor& got, const Tensor& want, double rtol) {
  REQUIRE(got.numel() == want.numel());
  double scale = 0;
  for (int64_t i = 0; i < want.numel(); ++i)
    if (std::isfinite(want[i])) scale = std::max(scale, std::fabs(double(want[i])));
  const double atol = rtol * scale;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double g = got[i], w = want[i];
    const bool ok = std::isnan(w) ? std::isnan(g)
                    : std::isinf(w) ? g == w
                                    : std::fabs(g - w) <= rtol * std::fabs(w) + atol;
    if (!ok) {
      FAIL_CHECK(what, ": element ", i, " is ", g, ", torch has ", w);
      return;
    }
  }
  CHECK(true);
}

struct ParityCase {
  std::string op, name;
  Shape in;
  std::vector<int> p;  // op parameters in pool_torch.py's order
  enum Fill { Uniform, Ties, Specials } fill = Uniform;
};

std::unique_ptr<UnaryLayer> make_layer(const ParityCase& c) {
  const auto& p = c.p;
  if (c.op == "max")
    return std::make_unique<MaxPool2d>(MaxPool2dOptions{.kernel = {p[0], p[1]},
                                                        .stride = {p[2], p[3]},
                                                        .padding = {p[4], p[5]},
                                                        .dilation = {p[6], p[7]},
                                                        .ceil_mode = p[8] != 0});
  if (c.op == "avg") {
    AvgPool2dOptions o{.kernel = {p[0], p[1]}, .stride = {p[2], p[3]}, .padding = {p[4], p[5]},
                       .ceil_mode = p[6] != 0, .count_include_pad = p[7] != 0};
    if (p[8]) o.divisor_override = p[8];
    return std::make_unique<AvgPool2d>(o);
  }
  return std::make_unique<AdaptiveAvgPool2d>(p[0], p[1]);
}

Tensor parity_input(const ParityCase& c, uint64_t seed) {
  Tensor x = random_tensor(c.in, seed);
  const int64_t n = x.numel(), plane = c.in[2] * c.in[3];
  if (c.fill == ParityCase::Ties)  // few distinct values: ties in almost every window
    for (int64_t i = 0; i < n; ++i) x[i] = std::floor(x[i] * 2.f);
  if (c.fill == ParityCase::Specials) {
    for (int64_t i = 0; i < n; i += 7) x[i] = std::numeric_limits<float>::quiet_NaN();
    for (int64_t i = 3; i < n; i += 5) x[i] = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < plane; ++i) x[plane + i] = -std::numeric_limits<float>::infinity();
  }
  return x;
}

}  // namespace

TEST_CASE("Pooling layers match PyTorch forward and backward") {
  using F = ParityCase::Fill;
  // max: kh kw sh sw ph pw dh dw ceil;  avg: kh kw sh sw ph pw ceil include_pad divisor;
  // adaptive: oh ow
  const std::vector<ParityCase> cases = {
      {"max", "max_stem", {2, 3, 9, 9}, {3, 3, 2, 2, 1, 1, 1, 1, 0}},
      {"max", "max_ceil_partial", {1, 2, 6, 7}, {3, 3, 2, 2, 0, 0, 1, 1, 1}},
      {"max", "max_ceil_drop_in_pad", {2, 2, 5, 3}, {3, 2, 3, 2, 1, 1, 1, 1, 1}},
      {"max", "max_dilated_ceil", {2, 2, 11, 10}, {3, 2, 2, 1, 1, 1, 2, 3, 1}},
      {"max", "max_ties", {2, 2, 8, 7}, {3, 3, 1, 1, 1, 1, 1, 1, 0}, F::Ties},
      {"max", "max_specials", {1, 3, 6, 6}, {3, 3, 2, 2, 1, 1, 1, 1, 1}, F::Specials},
      // Planes wide enough for the vectorised columns (many lanes, then the clipped edges).
      {"max", "max_wide_stem_ties", {2, 2, 9, 40}, {3, 3, 2, 2, 1, 1, 1, 1, 0}, F::Ties},
      {"max", "max_wide_dilated_specials", {1, 3, 7, 37}, {3, 3, 1, 1, 1, 1, 2, 2, 1}, F::Specials},
      {"max", "max_wide_2x2_ties", {2, 4, 6, 33}, {2, 2, 2, 2, 0, 0, 1, 1, 1}, F::Ties},
      {"max", "max_wide_stride3_specials", {1, 2, 5, 50}, {2, 4, 1, 3, 1, 2, 1, 1, 0}, F::Specials},
      // Rows with several 16-column blocks of the AVX-512 stride-2 path, then the rest.
      {"max", "max_long_stem_specials", {1, 2, 6, 80}, {3, 3, 2, 2, 1, 1, 1, 1, 0}, F::Specials},
      {"max", "max_long_2x2_ties", {1, 3, 4, 72}, {2, 2, 2, 2, 0, 0, 1, 1, 0}, F::Ties},
      {"avg", "avg_incl_pad", {2, 3, 9, 9}, {3, 3, 2, 2, 1, 1, 0, 1, 0}},
      {"avg", "avg_excl_pad", {2, 3, 9, 9}, {3, 3, 2, 2, 1, 1, 0, 0, 0}},
      {"avg", "avg_ceil_clip_incl", {1, 2, 6, 6}, {3, 3, 2, 2, 1, 1, 1, 1, 0}},
      {"avg", "avg_ceil_excl", {2, 2, 7, 5}, {3, 2, 2, 2, 1, 1, 1, 0, 0}},
      {"avg", "avg_ceil_drop_in_pad", {1, 2, 5, 3}, {3, 2, 3, 2, 1, 1, 1, 1, 0}},
      {"avg", "avg_divisor", {2, 2, 7, 7}, {3, 3, 2, 2, 1, 1, 0, 1, 4}},
      {"avg", "avg_divisor_ceil", {1, 2, 8, 5}, {2, 3, 2, 2, 1, 1, 1, 0, 7}},
      {"adaptive", "adaptive_7_3", {2, 3, 7, 7}, {3, 3}},
      {"adaptive", "adaptive_5_7", {1, 2, 5, 5}, {7, 7}},
      {"adaptive", "adaptive_mixed", {2, 2, 10, 6}, {4, 9}},
      {"adaptive", "adaptive_1x1", {2, 4, 7, 5}, {1, 1}},
  };
  TempDir dir;
  struct Ours { Shape out; Tensor y, dx; };
  std::vector<Ours> ours;
  std::ofstream list(dir.path / "cases.txt");
  for (size_t k = 0; k < cases.size(); ++k) {
    const ParityCase& c = cases[k];
    auto layer = make_layer(c);
    const Shape os = layer->output_shape(c.in);
    layer->plan(c.in, exec());
    Tensor x = parity_input(c, 100 + k), dy = random_tensor(os, 200 + k);
    Tensor y = poisoned(os), dx = poisoned(c.in);
    layer->forward(y, x);
    layer->backward(dx, dy, x, y);
    ours.push_back({os, y, dx});
    write_f32(dir.path / (c.name + ".x.f32"), x);
    write_f32(dir.path / (c.name + ".dout.f32"), dy);
    list << c.op << ' ' << c.name;
    for (int i = 0; i < 4; ++i) list << ' ' << c.in[i];
    for (int v : c.p) list << ' ' << v;
    list << '\n';
  }
  list.close();
  REQUIRE(list.good());

  const char* py = std::getenv("PYTHON");
  const std::string cmd = shell_quote(py && *py ? py : "/usr/bin/python3") + " " +
                          shell_quote(source_dir() + "/tests/python/pool_torch.py") + " " +
                          shell_quote(dir.path.string());
  const int status = std::system(cmd.c_str());
  REQUIRE_MESSAGE((status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0),
                  "pool_torch.py failed (status ", status, "): ", cmd);

  for (size_t k = 0; k < cases.size(); ++k) {
    const ParityCase& c = cases[k];
    std::ifstream sf(dir.path / (c.name + ".shape.txt"));
    int64_t n, ch, oh, ow;
    REQUIRE_MESSAGE(bool(sf >> n >> ch >> oh >> ow), c.name, ": no output shape from torch");
    const Shape torch_out{n, ch, oh, ow};
    CHECK_MESSAGE(torch_out == ours[k].out, c.name, ": torch output ", torch_out.str(), ", ours ",
                  ours[k].out.str());
    if (torch_out != ours[k].out) continue;
    // Bit-identical in practice; the 1x1 adaptive case differs in the last bit (torch.mean).
    const auto file = [&](const char* suffix) { return dir.path / (c.name + suffix); };
    expect_match(c.name + " forward", ours[k].y, read_f32(file(".y.f32"), torch_out), 1e-6);
    expect_match(c.name + " din", ours[k].dx, read_f32(file(".dx.f32"), c.in), 1e-6);
  }
}
