// Conv2d: fast forward vs a direct-convolution loop in double on many geometries (padding,
// stride, dilation, groups, 1x1, non-square, chunked and unchunked batches), finite-difference
// checks of din / grad_weight / grad_bias, '+=' accumulation, and shape errors, on every engine:
// im2col with small layers' chunks run one at a time and in parallel (and the latter's bits the
// same for any thread count), and the blocked direct kernels with AVX-512 and with AVX2 (on their
// own table of larger shapes too, against double references of all three passes, the same bits
// for any thread count); the same for Winograd F(2x2,3x3) on its own table of shapes, and its
// accuracy against float64.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>

#include "core/threads.h"
#include "layers/conv2d.h"
#include "layers/conv_direct.h"
#include "layers/params.h"
#include "testing.h"

using namespace mpicnn;
using namespace mpicnn::testing;

namespace {

struct Case {
  std::string name;
  int N, IC, H, W, OC;
  Conv2dOptions::Hw kernel, stride = 1, padding = 0, dilation = 1;
  int groups = 1;
  bool bias = true;
  int plan_n = 0;  // batch given to plan(); 0 = N
};

Conv2dOptions options_of(const Case& c) {
  return {.in_channels = c.IC, .out_channels = c.OC, .kernel = c.kernel, .stride = c.stride,
          .padding = c.padding, .dilation = c.dilation, .groups = c.groups, .bias = c.bias};
}

int out_extent(int in, int k, int s, int p, int d) {
  return (in + 2 * p - d * (k - 1) - 1) / s + 1;
}

// Direct convolution, one output element at a time, straight from the definition.
Vec conv_ref(const Vec& x, const Vec& w, const Vec& b, const Case& c) {
  const int OH = out_extent(c.H, c.kernel.h, c.stride.h, c.padding.h, c.dilation.h);
  const int OW = out_extent(c.W, c.kernel.w, c.stride.w, c.padding.w, c.dilation.w);
  const int ICg = c.IC / c.groups, OCg = c.OC / c.groups;
  Vec y(size_t(c.N) * c.OC * OH * OW);
  for (int n = 0; n < c.N; ++n)
    for (int oc = 0; oc < c.OC; ++oc)
      for (int oh = 0; oh < OH; ++oh)
        for (int ow = 0; ow < OW; ++ow) {
          double s = c.bias ? b[size_t(oc)] : 0.0;
          const int g = oc / OCg;
          for (int j = 0; j < ICg; ++j)
            for (int kh = 0; kh < c.kernel.h; ++kh)
              for (int kw = 0; kw < c.kernel.w; ++kw) {
                const int ih = oh * c.stride.h - c.padding.h + kh * c.dilation.h;
                const int iw = ow * c.stride.w - c.padding.w + kw * c.dilation.w;
                if (ih < 0 || ih >= c.H || iw < 0 || iw >= c.W) continue;
                const int ic = g * ICg + j;
                s += x[((size_t(n) * c.IC + ic) * c.H + ih) * c.W + iw] *
                     w[((size_t(oc) * ICg + j) * c.kernel.h + kh) * c.kernel.w + kw];
              }
          y[((size_t(n) * c.OC + oc) * OH + oh) * OW + ow] = s;
        }
  return y;
}

// The config the fixtures below plan with: the tests' (testing::exec()), changed for a scope by
// the engine scopes further down.
ExecConfig& fixture_cfg() {
  static ExecConfig c = exec();
  return c;
}

// A Conv2d bound to its own slabs, with random weights, planned for the case under
// fixture_cfg().
struct Fixture {
  Conv2d conv;
  ParamStore store;
  Tensor x, y;
  explicit Fixture(const Case& c, uint64_t seed) : conv(options_of(c)) {
    conv.register_state(store, "conv.");
    store.allocate();
    fill_uniform(conv.weight, seed);
    if (c.bias) fill_uniform(conv.bias, seed + 1);
    const Shape in{c.N, c.IC, c.H, c.W};
    conv.plan({c.plan_n ? c.plan_n : c.N, c.IC, c.H, c.W}, fixture_cfg());
    x = random_tensor(in, seed + 2);
    y = Tensor::empty(conv.output_shape(in));
  }
  Vec w() const { return to_double(conv.weight); }
  Vec b() const { return conv.options().bias ? to_double(conv.bias) : Vec{}; }
};

// Each comment says which path of conv2d.cpp the case exercises beyond its geometry.
const Case kCases[] = {
    {"3x3 pad 1, odd size", 2, 3, 7, 9, 4, 3, 1, 1},
    {"3x3 stride 2 pad 1", 3, 4, 9, 8, 5, 3, 2, 1},
    {"5x5 no pad, no bias", 1, 2, 8, 8, 3, 5, 1, 0, 1, 1, false},
    {"dilation 2", 2, 3, 9, 10, 2, 3, 1, 2, 2},
    {"groups 2", 2, 4, 6, 7, 6, 3, 1, 1, 1, 2},
    {"depthwise", 2, 4, 7, 6, 4, 3, 1, 1, 1, 4},
    {"depthwise x2 multiplier, stride 2", 2, 3, 8, 9, 6, 3, 2, 1, 1, 3, false},
    {"1x1", 3, 5, 4, 6, 7, 1},
    {"1x1 stride 2 (downsample)", 2, 6, 7, 7, 4, 1, 2, 0, 1, 1, false},
    {"1x1 unchunked: input is the column matrix", 2, 3, 32, 33, 4, 1},
    {"non-square kernel/stride/pad", 2, 3, 9, 11, 4, {3, 2}, {2, 1}, {1, 0}, {1, 2}},
    {"kernel 1x5, pad 0x2", 1, 2, 5, 9, 3, {1, 5}, 1, {0, 2}},
    {"7x7 stride 2 pad 3 (resnet stem)", 2, 3, 15, 13, 4, 7, 2, 3},
    {"stride larger than kernel", 2, 2, 10, 10, 3, 2, 3, 0},
    {"padding larger than kernel", 1, 2, 3, 4, 2, 2, 1, 3},
    {"unchunked: one image per GEMM", 2, 2, 33, 32, 3, 3, 1, 1},
    {"batch smaller than planned", 3, 3, 5, 5, 4, 3, 1, 1, 1, 1, true, 8},
    {"chunks of 6 with a 1-image tail", 7, 2, 10, 10, 3, 3, 1, 1, 1, 1, true, 12},
    {"chunks of 6, grouped, with a tail", 8, 4, 10, 10, 4, 3, 1, 1, 1, 2, false, 12},
    {"1x1 chunks with a 1-image tail", 7, 3, 10, 10, 4, 1, 1, 0, 1, 1, true, 12},
    // Dead taps (reading only padding) dropped from the GEMMs; small-plane offset tables.
    {"3x3 pad 1 on 1x1: one live tap", 4, 3, 1, 1, 5, 3, 1, 1},
    {"3x3 stride 2 pad 1 on 2x2: four live taps", 3, 4, 2, 2, 3, 3, 2, 1, 1, 1, false},
    {"5x5 pad 2 on 2x3, grouped", 2, 4, 2, 3, 6, 5, 1, 2, 1, 2},
    {"3x3 pad 2 on 1x4, dilation 2", 2, 2, 1, 4, 3, 3, 1, 2, 2},
    // Planes above the table threshold: the range path with stride 2 and dilation.
    {"3x3 stride 2 pad 1, large plane", 2, 3, 21, 22, 4, 3, 2, 1},
    {"3x3 dilation 2 pad 2, large plane", 1, 2, 12, 13, 3, 3, 1, 2, 2},
};

// The case called `name`: tests pick cases by what they exercise, so adding or reordering cases
// above cannot silently move a check onto another geometry.
const Case& case_named(const std::string& name) {
  const Case* found = nullptr;
  for (const Case& c : kCases)
    if (c.name == name) {
      MPICNN_CHECK(!found, "test_conv2d: two cases named '", name, "'");
      found = &c;
    }
  MPICNN_CHECK(found, "test_conv2d: no case named '", name, "'");
  return *found;
}

// Sets whether small layers run their chunks in parallel for one scope. Most cases' layers are
// small, so the tests below run them both ways: parallel chunks, and one chunk at a time (the
// path every large layer takes).
struct ParallelSmall {
  bool old = fixture_cfg().parallel_small_convs;
  explicit ParallelSmall(bool on) { fixture_cfg().parallel_small_convs = on; }
  ~ParallelSmall() { fixture_cfg().parallel_small_convs = old; }
};

// One way of running the CPU convolutions, set for one scope: im2col (small layers' chunks one
// at a time or in parallel), or the direct kernels on one instruction set.
struct Engine {
  const char* name;
  ConvAlgorithm algorithm;
  DirectIsa isa;  // for kDirect
  bool parallel;  // for kIm2col
};
struct EngineScope {
  ConvAlgorithm old_algorithm = fixture_cfg().conv;
  DirectIsa old_isa = fixture_cfg().isa;
  ParallelSmall small;
  explicit EngineScope(const Engine& e) : small(e.parallel) {
    fixture_cfg().conv = e.algorithm;
    if (e.algorithm == ConvAlgorithm::kDirect) fixture_cfg().isa = e.isa;
  }
  ~EngineScope() {
    fixture_cfg().conv = old_algorithm;
    fixture_cfg().isa = old_isa;
  }
};

// The direct engines this CPU can run (AVX2 on any x86-64 CPU from 2013 on; AVX-512 where it
// has it); a missing one is reported once, so a run on an AVX2-only CPU says what it skipped.
std::vector<Engine> direct_engines() {
  std::vector<Engine> out;
  const DirectIsa best = best_direct_isa();
  if (best == DirectIsa::kAvx512)
    out.push_back({"direct avx512", ConvAlgorithm::kDirect, DirectIsa::kAvx512, false});
  else
    MESSAGE("this CPU has no AVX-512: the direct kernels' AVX-512 copy is not tested here");
  if (best != DirectIsa::kNone)
    out.push_back({"direct avx2", ConvAlgorithm::kDirect, DirectIsa::kAvx2, false});
  return out;
}

std::vector<Engine> all_engines() {
  std::vector<Engine> out = {{"im2col", ConvAlgorithm::kIm2col, DirectIsa::kNone, false},
                             {"im2col, parallel chunks", ConvAlgorithm::kIm2col, DirectIsa::kNone,
                              true}};
  for (const Engine& e : direct_engines()) out.push_back(e);
  return out;
}

}  // namespace

TEST_CASE("Conv2d forward matches the direct convolution") {
  for (const Engine& e : all_engines()) {
    EngineScope scope(e);
    for (const Case& c : kCases) {
      CAPTURE(c.name);
      CAPTURE(e.name);
      Fixture f(c, 11);
      // The direct kernels take every ungrouped layer, im2col the rest.
      CHECK(f.conv.direct() == (e.algorithm == ConvAlgorithm::kDirect && c.groups == 1));
      f.y.fill(1e9f);  // forward must overwrite every element
      f.conv.forward(f.y, f.x);
      expect_close("conv forward: " + c.name, f.y, conv_ref(to_double(f.x), f.w(), f.b(), c));
    }
  }
}

TEST_CASE("Conv2d plan picks the GEMM paths the cases above rely on") {
  EngineScope serial({"im2col", ConvAlgorithm::kIm2col, DirectIsa::kNone, false});
  auto chunk_of = [](const char* name) { return Fixture(case_named(name), 1).conv.chunk(); };
  // 1x1 over 1056 pixels: no im2col at all
  CHECK(chunk_of("1x1 unchunked: input is the column matrix") == 1);
  CHECK(chunk_of("unchunked: one image per GEMM") == 1);  // 1056 columns per image: already wide
  CHECK(chunk_of("batch smaller than planned") == 8);  // whole planned batch in one GEMM, run on 3
  CHECK(chunk_of("chunks of 6 with a 1-image tail") == 6);  // a chunk of 6, then 1 (direct rows)
  CHECK(chunk_of("1x1 chunks with a 1-image tail") == 6);  // pointwise; its tail pointwise-direct
  auto live_of = [](const char* name) {
    return Fixture(case_named(name), 1).conv.columns().live_taps().size();
  };
  CHECK(live_of("3x3 pad 1 on 1x1: one live tap") == 1);  // only the centre tap reads the 1x1 map
  CHECK(live_of("3x3 stride 2 pad 1 on 2x2: four live taps") == 4);
  CHECK(live_of("5x5 pad 2 on 2x3, grouped") == 15);  // rows -2, +2 of a 2-row map are dead: 3 x 5
  CHECK(live_of("3x3 pad 2 on 1x4, dilation 2") == 3);  // dilated rows -2, +2 of 1 row are dead
  CHECK(live_of("3x3 pad 1, odd size") == 9);
  auto table_of = [](const char* name) {
    return Fixture(case_named(name), 1).conv.columns().uses_table();
  };
  CHECK(table_of("3x3 pad 1, odd size"));                  // 7x9 output plane
  CHECK(!table_of("3x3 stride 2 pad 1, large plane"));     // 11x11
  CHECK(!table_of("3x3 dilation 2 pad 2, large plane"));
}

TEST_CASE("Conv2d gradients match finite differences") {
  const char* const grad_cases[] = {
      "3x3 stride 2 pad 1",
      "dilation 2",
      "groups 2",
      "depthwise x2 multiplier, stride 2",
      "1x1 stride 2 (downsample)",
      "1x1 unchunked: input is the column matrix",
      "non-square kernel/stride/pad",
      "7x7 stride 2 pad 3 (resnet stem)",
      "chunks of 6 with a 1-image tail",
      "1x1 chunks with a 1-image tail",
  };
  for (const Engine& e : all_engines()) {
    EngineScope scope(e);
    for (const char* name : grad_cases) {
      const Case& c = case_named(name);
      CAPTURE(c.name);
      CAPTURE(e.name);
      Fixture f(c, 21);
      f.conv.forward(f.y, f.x);
      Tensor dy = random_tensor(f.y.shape(), 22);
      Tensor dx = Tensor::empty(f.x.shape());
      dx.fill(1e9f);  // din is written with '='
      f.store.zero_grad();
      f.conv.backward(dx, dy, f.x, f.y);

      const Vec x = to_double(f.x), w = f.w(), b = f.b(), wy = to_double(dy);
      check_gradient("conv din: " + c.name, dx,
                     [&](const Vec& v) { return dot(conv_ref(v, w, b, c), wy); }, x);
      check_gradient("conv grad_weight: " + c.name, f.conv.grad_weight,
                     [&](const Vec& v) { return dot(conv_ref(x, v, b, c), wy); }, w);
      if (c.bias)
        check_gradient("conv grad_bias: " + c.name, f.conv.grad_bias,
                       [&](const Vec& v) { return dot(conv_ref(x, w, v, c), wy); }, b);
    }
  }
}

TEST_CASE("Conv2d backward accumulates parameter grads and overwrites din") {
  const char* const names[] = {"3x3 pad 1, odd size", "1x1 unchunked: input is the column matrix",
                               "chunks of 6 with a 1-image tail"};
  for (const Engine& e : all_engines()) {
    for (const char* name : names) {
      EngineScope scope(e);
      const Case& c = case_named(name);
      CAPTURE(c.name);
      CAPTURE(e.name);
      Fixture f(c, 31);
      f.conv.forward(f.y, f.x);
      Tensor dy = random_tensor(f.y.shape(), 32);
      Tensor dx = Tensor::empty(f.x.shape());
      f.store.zero_grad();
      f.conv.backward(dx, dy, f.x, f.y);
      const Vec gw1 = to_double(f.conv.grad_weight), gb1 = to_double(f.conv.grad_bias);
      const Vec dx1 = to_double(dx);
      f.conv.backward(dx, dy, f.x, f.y);
      Vec gw2 = gw1, gb2 = gb1;
      for (double& v : gw2) v *= 2;
      for (double& v : gb2) v *= 2;
      expect_close("grad_weight after two backwards", f.conv.grad_weight, gw2);
      expect_close("grad_bias after two backwards", f.conv.grad_bias, gb2);
      expect_close("din after two backwards", dx, dx1, 0, 0);

      // Without din (first layer) the parameter grads are still produced.
      Tensor none;
      f.store.zero_grad();
      f.conv.backward(none, dy, f.x, f.y);
      expect_close("grad_weight without din", f.conv.grad_weight, gw1, 0, 0);
    }
  }
}

TEST_CASE("Conv2d small layers run their chunks in parallel: any thread count gives the same bits") {
  // LeNet's two convolutions at batch 64 (784- and 100-pixel planes; the second's 22 chunks of
  // 3 images end in a tail of 1), and a layer just over the size rule (37.7M multiply-adds per
  // image, resnet18's first stage at 32x32).
  const Case lenet1{"lenet conv1", 64, 1, 28, 28, 6, 5, 1, 2};
  const Case lenet2{"lenet conv2", 64, 6, 14, 14, 16, 5};
  const Case large{"64 -> 64 3x3 on 32x32", 2, 64, 32, 32, 64, 3, 1, 1, 1, 1, false, 64};
  EngineScope on({"im2col, parallel chunks", ConvAlgorithm::kIm2col, DirectIsa::kNone, true});
  // The table's chunked cases that the tests above run both ways do take the parallel path.
  CHECK(Fixture(case_named("chunks of 6 with a 1-image tail"), 1).conv.parallel_chunks());
  CHECK(Fixture(case_named("chunks of 6, grouped, with a tail"), 1).conv.parallel_chunks());
  CHECK(Fixture(case_named("1x1 chunks with a 1-image tail"), 1).conv.parallel_chunks());
  CHECK(Fixture(lenet1, 1).conv.parallel_chunks());
  CHECK(Fixture(lenet1, 1).conv.chunk() == 1);
  CHECK(Fixture(lenet2, 1).conv.parallel_chunks());
  CHECK(Fixture(lenet2, 1).conv.chunk() == 3);
  CHECK(!Fixture(large, 1).conv.parallel_chunks());
  {
    ParallelSmall off(false);
    CHECK(!Fixture(lenet1, 1).conv.parallel_chunks());
  }

  const int threads_before = num_threads();
  for (const Case& c : {lenet1, lenet2}) {
    CAPTURE(c.name);
    // y, din, grad_weight, grad_bias after one forward and one backward (grads accumulated
    // onto a nonzero start, as in a step after the first).
    auto run = [&](bool parallel, int threads) {
      ParallelSmall mode(parallel);
      set_num_threads(threads);
      Fixture f(c, 41);
      REQUIRE(f.conv.parallel_chunks() == parallel);
      f.conv.forward(f.y, f.x);
      Tensor dy = random_tensor(f.y.shape(), 42);
      Tensor dx = Tensor::empty(f.x.shape());
      fill_uniform(f.conv.grad_weight, 43);
      fill_uniform(f.conv.grad_bias, 44);
      f.conv.backward(dx, dy, f.x, f.y);
      return std::vector<Vec>{to_double(f.y), to_double(dx), to_double(f.conv.grad_weight),
                              to_double(f.conv.grad_bias)};
    };
    const std::vector<Vec> one = run(true, 1);
    for (int threads : {2, 3}) {
      CAPTURE(threads);
      const std::vector<Vec> many = run(true, threads);
      for (size_t i = 0; i < one.size(); ++i) CHECK(many[i] == one[i]);
    }
    // And the same values as one chunk at a time, up to the weight gradient's summation order.
    const std::vector<Vec> serial = run(false, 2);
    const char* what[] = {"y", "din", "grad_weight", "grad_bias"};
    for (size_t i = 0; i < one.size(); ++i) {
      Tensor t = Tensor::empty({int64_t(one[i].size())});
      from_double(t, one[i]);
      expect_close(std::string("parallel vs serial ") + what[i], t, serial[i]);
    }
  }
  set_num_threads(threads_before);
}

TEST_CASE("Conv2d reset_parameters draws PyTorch's default bounds") {
  Conv2d conv({.in_channels = 4, .out_channels = 6, .kernel = 3, .groups = 2});
  ParamStore store;
  conv.register_state(store, "features.0.");
  store.allocate();
  CHECK(store.entries().size() == 2);
  CHECK(store.entries()[0].name == "features.0.weight");
  CHECK(store.entries()[0].shape == Shape{6, 2, 3, 3});
  CHECK(store.entries()[1].name == "features.0.bias");
  conv.reset_parameters(5);
  const double bound = 1.0 / std::sqrt(2.0 * 9.0);
  CHECK(max_abs(to_double(conv.weight)) <= bound);
  CHECK(max_abs(to_double(conv.weight)) > 0.8 * bound);
  CHECK(max_abs(to_double(conv.bias)) <= bound);
  CHECK(max_abs(to_double(conv.bias)) > 0);

  Conv2d nobias({.in_channels = 4, .out_channels = 6, .kernel = 3, .bias = false});
  ParamStore store2;
  nobias.register_state(store2, "c.");
  CHECK(store2.entries().size() == 1);
}

TEST_CASE("Conv2d rejects bad options and shapes with clear errors") {
  using doctest::Contains;
  CHECK_THROWS_WITH_AS(Conv2d({.in_channels = 3, .out_channels = 4, .kernel = 3, .groups = 2}),
                       Contains("divisible by groups"), Error);
  CHECK_THROWS_WITH_AS(Conv2d({.in_channels = 4, .out_channels = 6, .kernel = 3, .groups = 4}),
                       Contains("divisible by groups"), Error);
  CHECK_THROWS_AS(Conv2d({.in_channels = 0, .out_channels = 4}), Error);
  CHECK_THROWS_AS(Conv2d({.in_channels = 2, .out_channels = 4, .kernel = 0}), Error);
  CHECK_THROWS_AS(Conv2d({.in_channels = 2, .out_channels = 4, .kernel = 3, .stride = 0}), Error);
  CHECK_THROWS_AS(Conv2d({.in_channels = 2, .out_channels = 4, .kernel = 3, .padding = -1}),
                  Error);
  CHECK_THROWS_AS(Conv2d({.in_channels = 2, .out_channels = 4, .kernel = 3, .dilation = 0}),
                  Error);

  Conv2d conv({.in_channels = 3, .out_channels = 4, .kernel = 5, .padding = 1});
  CHECK_THROWS_WITH_AS(conv.output_shape({2, 4, 8, 8}), Contains("input must be (N, 3, H, W)"),
                       Error);
  CHECK_THROWS_AS(conv.output_shape({3, 8, 8}), Error);
  CHECK_THROWS_WITH_AS(conv.output_shape({1, 3, 2, 8}), Contains("smaller than the dilated kernel"),
                       Error);
  CHECK(conv.output_shape({1, 3, 3, 8}) == Shape{1, 4, 1, 6});

  ParamStore store;
  conv.register_state(store, "");
  Tensor x = random_tensor({2, 3, 8, 8}, 1), y = Tensor::empty({2, 4, 6, 6});
  CHECK_THROWS_WITH_AS(conv.forward(y, x), Contains("not allocated"), Error);
  store.allocate();
  CHECK_THROWS_WITH_AS(conv.forward(y, x), Contains("call plan()"), Error);
  conv.plan({2, 3, 8, 8}, exec());
  conv.forward(y, x);
  Tensor y_bad = Tensor::empty({2, 4, 6, 5});
  CHECK_THROWS_AS(conv.forward(y_bad, x), Error);
  Tensor x_big = random_tensor({3, 3, 8, 8}, 2), y_big = Tensor::empty({3, 4, 6, 6});
  CHECK_THROWS_WITH_AS(conv.forward(y_big, x_big), Contains("does not fit the plan"), Error);
  Tensor x_other = random_tensor({2, 3, 9, 8}, 3), y_other = Tensor::empty({2, 4, 7, 6});
  CHECK_THROWS_AS(conv.forward(y_other, x_other), Error);
  Tensor dx_bad = Tensor::empty({2, 3, 8, 9});
  CHECK_THROWS_AS(conv.backward(dx_bad, y, x, y), Error);
  CHECK_THROWS_AS(conv.backward(x, y_bad, x, y), Error);
}

namespace {

// din and grad_weight of sum(conv_ref(x, w) * dy), straight from the definition.
void conv_grads_ref(Vec& dx, Vec& dw, const Vec& x, const Vec& w, const Vec& dy, const Case& c) {
  const int OH = out_extent(c.H, c.kernel.h, c.stride.h, c.padding.h, c.dilation.h);
  const int OW = out_extent(c.W, c.kernel.w, c.stride.w, c.padding.w, c.dilation.w);
  const int ICg = c.IC / c.groups, OCg = c.OC / c.groups;
  dx.assign(x.size(), 0.0);
  dw.assign(w.size(), 0.0);
  for (int n = 0; n < c.N; ++n)
    for (int oc = 0; oc < c.OC; ++oc)
      for (int oh = 0; oh < OH; ++oh)
        for (int ow = 0; ow < OW; ++ow) {
          const double g = dy[((size_t(n) * c.OC + oc) * OH + oh) * OW + ow];
          for (int j = 0; j < ICg; ++j)
            for (int kh = 0; kh < c.kernel.h; ++kh)
              for (int kw = 0; kw < c.kernel.w; ++kw) {
                const int ih = oh * c.stride.h - c.padding.h + kh * c.dilation.h;
                const int iw = ow * c.stride.w - c.padding.w + kw * c.dilation.w;
                if (ih < 0 || ih >= c.H || iw < 0 || iw >= c.W) continue;
                const size_t xi = ((size_t(n) * c.IC + (oc / OCg) * ICg + j) * c.H + ih) * c.W + iw;
                const size_t wi = ((size_t(oc) * ICg + j) * c.kernel.h + kh) * c.kernel.w + kw;
                dx[xi] += w[wi] * g;
                dw[wi] += x[xi] * g;
              }
        }
}

// The direct kernels' own table: channels that are no multiple of 16 or 8 (a partial last
// block), several blocks, the stems of ResNet (7x7/2) and AlexNet (11x11/4: 16 stride phases),
// 1x1 with and without stride, dilation, rows wider than a tile, dead taps, input pixels that
// no tap reaches, batch 1 and batches below the planned one.
const Case kDirectCases[] = {
    {"17 -> 33, 3x3 pad 1, odd plane", 2, 17, 9, 11, 33, 3, 1, 1},
    {"resnet stem 3 -> 20, 7x7 stride 2 pad 3", 2, 3, 21, 19, 20, 7, 2, 3},
    {"alexnet stem 3 -> 19, 11x11 stride 4 pad 2", 1, 3, 31, 35, 19, 11, 4, 2},
    {"1x1 40 -> 24", 3, 40, 6, 5, 24, 1},
    {"1x1 stride 2 (downsample) 24 -> 40", 2, 24, 9, 9, 40, 1, 2, 0, 1, 1, false},
    {"3x3 stride 2 pad 1, 16 -> 32", 2, 16, 12, 13, 32, 3, 2, 1},
    {"3x3 stride 2 no pad, even plane", 2, 6, 10, 10, 8, 3, 2, 0},
    {"dilation 2 pad 2, 8 -> 17", 2, 8, 10, 9, 17, 3, 1, 2, 2},
    {"non-square kernel, stride and dilation", 2, 9, 10, 12, 10, {3, 2}, {2, 1}, {1, 0}, {2, 1}},
    {"batch 1, 32 -> 16, 5x5 pad 2", 1, 32, 8, 8, 16, 5, 1, 2},
    {"batch smaller than planned", 3, 20, 7, 7, 18, 3, 1, 1, 1, 1, true, 8},
    {"3x3 pad 1 on a 1x1 map, 33 -> 35 (dead taps)", 4, 33, 1, 1, 35, 3, 1, 1},
    // One live tap reading no padding: planned as a 1x1 convolution on the kernel's centre.
    {"5x5 stride 2 pad 2 on a 1x1 map, 17 -> 9", 2, 17, 1, 1, 9, 5, 2, 2},
    {"3x3 dilation 2 pad 2 on a 1x1 map, 20 -> 18", 3, 20, 1, 1, 18, 3, 1, 2, 2},
    {"2x2 stride 3 (pixels no tap reads)", 2, 5, 10, 11, 7, 2, 3, 0},
    {"padding larger than kernel", 1, 4, 3, 4, 5, 2, 1, 3},
    {"a row of 70 outputs: full tiles and a tail", 1, 5, 3, 70, 9, 3, 1, 1},
    {"1 -> 6, 5x5 pad 2 (lenet conv1)", 5, 1, 14, 14, 6, 5, 1, 2},
    // Rows of at most 6 outputs: images interleaved per pixel, tiles across images.
    {"interleaved images: 3x3 stride 2 pad 1 on 4x5", 3, 12, 4, 5, 20, 3, 2, 1},
    {"interleaved images: batch smaller than planned", 3, 20, 4, 4, 18, 3, 1, 1, 1, 1, true, 8},
};

Tensor as_tensor(const Vec& v) {
  Tensor t = Tensor::empty({int64_t(v.size())});
  from_double(t, v);
  return t;
}

// y, din, grad_weight, grad_bias of one forward and backward, grads accumulated onto a random
// start (a step after the first).
std::vector<Vec> run_once(const Case& c, uint64_t seed, bool direct_expected) {
  Fixture f(c, seed);
  REQUIRE(f.conv.direct() == direct_expected);
  f.y.fill(1e9f);  // forward must overwrite every element
  f.conv.forward(f.y, f.x);
  Tensor dy = random_tensor(f.y.shape(), seed + 3);
  Tensor dx = Tensor::empty(f.x.shape());
  dx.fill(1e9f);  // din is written with '='
  fill_uniform(f.conv.grad_weight, seed + 4);
  if (c.bias) fill_uniform(f.conv.grad_bias, seed + 5);
  f.conv.backward(dx, dy, f.x, f.y);
  return {to_double(f.y), to_double(dx), to_double(f.conv.grad_weight),
          c.bias ? to_double(f.conv.grad_bias) : Vec{}, to_double(f.x), f.w(), f.b(),
          to_double(dy)};
}

}  // namespace

TEST_CASE("Conv2d direct kernels match double references of all three passes, and im2col") {
  for (const Engine& e : direct_engines()) {
    for (const Case& c : kDirectCases) {
      CAPTURE(e.name);
      CAPTURE(c.name);
      std::vector<Vec> got;
      {
        EngineScope scope(e);
        got = run_once(c, 51, true);
      }
      const Vec &x = got[4], &w = got[5], &b = got[6], &dy = got[7];
      Vec dx_ref, dw_ref;
      conv_grads_ref(dx_ref, dw_ref, x, w, dy, c);
      // The references of the accumulated grads: the same random start plus the gradient.
      Tensor start_w = Tensor::empty({int64_t(w.size())});
      fill_uniform(start_w, 55);
      for (size_t i = 0; i < dw_ref.size(); ++i) dw_ref[i] += double(start_w.data()[i]);
      expect_close("direct forward: " + c.name, as_tensor(got[0]), conv_ref(x, w, b, c));
      expect_close("direct din: " + c.name, as_tensor(got[1]), dx_ref);
      expect_close("direct grad_weight: " + c.name, as_tensor(got[2]), dw_ref);
      // And the im2col reference path on the same inputs.
      EngineScope im2col({"im2col", ConvAlgorithm::kIm2col, DirectIsa::kNone, false});
      const std::vector<Vec> ref = run_once(c, 51, false);
      const char* what[] = {"y", "din", "grad_weight", "grad_bias"};
      for (size_t i = 0; i < 4; ++i)
        if (!ref[i].empty())
          expect_close(std::string("direct vs im2col ") + what[i], as_tensor(got[i]), ref[i]);
    }
  }
}

TEST_CASE("Conv2d direct kernels: backward in several chunks of images matches im2col") {
  // 430K floats of packed input and output gradient per image: the 16 MiB budget holds 11 of
  // the 12 images, so backward packs a chunk of 11, then one of 1.
  const Case c{"64 -> 64, 3x3 pad 1 on 52x52, 12 images", 12, 64, 52, 52, 64, 3, 1, 1};
  for (const Engine& e : direct_engines()) {
    CAPTURE(e.name);
    std::vector<Vec> got;
    {
      EngineScope scope(e);
      got = run_once(c, 71, true);
    }
    EngineScope im2col({"im2col", ConvAlgorithm::kIm2col, DirectIsa::kNone, false});
    const std::vector<Vec> ref = run_once(c, 71, false);
    const char* what[] = {"y", "din", "grad_weight", "grad_bias"};
    for (size_t i = 0; i < 4; ++i)
      expect_close(std::string("chunked direct vs im2col ") + what[i], as_tensor(got[i]), ref[i]);
  }
}

TEST_CASE("Conv2d direct kernels: any thread count gives the same bits") {
  // Weight gradient units outside the images (small planes), inside them (a wide plane), and
  // fewer images than threads (forward and the input gradient split within the image).
  const Case cases[] = {
      case_named("3x3 stride 2 pad 1, large plane"),
      {"64 -> 40, 3x3 pad 1 on 6x6", 6, 64, 6, 6, 40, 3, 1, 1},
      {"8 -> 24, 3x3 on 40x40", 3, 8, 40, 40, 24, 3, 1, 1},
      {"batch 1, 24 -> 48, 3x3 stride 2", 1, 24, 15, 15, 48, 3, 2, 1},
  };
  struct Threads {
    int old = num_threads();
    ~Threads() { set_num_threads(old); }
  } restore;
  for (const Engine& e : direct_engines()) {
    EngineScope scope(e);
    for (const Case& c : cases) {
      CAPTURE(e.name);
      CAPTURE(c.name);
      set_num_threads(1);
      const std::vector<Vec> one = run_once(c, 61, true);
      for (int threads : {2, 3}) {
        CAPTURE(threads);
        set_num_threads(threads);
        const std::vector<Vec> many = run_once(c, 61, true);
        for (size_t i = 0; i < 4; ++i) CHECK(many[i] == one[i]);
      }
    }
  }
}

namespace {

// Sets the fixtures' convolution algorithm for one scope.
struct AlgorithmScope {
  ConvAlgorithm old = fixture_cfg().conv;
  explicit AlgorithmScope(ConvAlgorithm a) { fixture_cfg().conv = a; }
  ~AlgorithmScope() { fixture_cfg().conv = old; }
};

// Shapes for Winograd F(2x2,3x3): every padding it takes, odd and tiny planes (a tile hanging
// over the edge, a 1x1 map), channels that are no multiple of 16, batch 1, chunks with a tail.
const Case kWinogradCases[] = {
    {"wino pad 1, odd plane", 2, 5, 7, 9, 6, 3, 1, 1},
    {"wino pad 0", 2, 3, 8, 7, 4, 3, 1, 0},
    {"wino pad 2", 1, 4, 5, 6, 3, 3, 1, 2, 1, 1, false},
    {"wino 1x1 map", 3, 17, 1, 1, 19, 3, 1, 1},
    {"wino 2x3 map", 2, 6, 2, 3, 5, 3, 1, 1},
    {"wino 3x3 map, no pad: one output", 2, 4, 3, 3, 2, 3, 1, 0},
    {"wino batch 1, 17 -> 33 channels", 1, 17, 6, 5, 33, 3, 1, 1},
    {"wino pad 0x1 (non-square)", 2, 3, 6, 7, 4, 3, 1, {0, 1}},
    {"wino batch smaller than planned", 3, 4, 5, 5, 4, 3, 1, 1, 1, 1, true, 8},
};

}  // namespace

TEST_CASE("Conv2d with Winograd F(2x2,3x3): forward and gradients match the direct convolution") {
  AlgorithmScope scope(ConvAlgorithm::kWinograd);
  for (const Case& c : kWinogradCases) {
    CAPTURE(c.name);
    Fixture f(c, 31);
    REQUIRE(f.conv.winograd());
    f.y.fill(1e9f);  // forward must overwrite every element
    f.conv.forward(f.y, f.x);
    expect_close("winograd forward: " + c.name, f.y, conv_ref(to_double(f.x), f.w(), f.b(), c));
    Tensor dy = random_tensor(f.y.shape(), 32);
    Tensor dx = Tensor::empty(f.x.shape());
    dx.fill(1e9f);  // din is written with '='
    f.store.zero_grad();
    f.conv.backward(dx, dy, f.x, f.y);
    const Vec x = to_double(f.x), w = f.w(), b = f.b(), wy = to_double(dy);
    check_gradient("winograd din: " + c.name, dx,
                   [&](const Vec& v) { return dot(conv_ref(v, w, b, c), wy); }, x);
    check_gradient("winograd grad_weight: " + c.name, f.conv.grad_weight,
                   [&](const Vec& v) { return dot(conv_ref(x, v, b, c), wy); }, w);
    // Frozen weights (no weight gradient) with an input gradient: Winograd alone.
    f.conv.set_param_state(true, true);
    Tensor dx2 = Tensor::empty(f.x.shape());
    f.conv.backward(dx2, dy, f.x, f.y);
    CHECK(std::memcmp(dx.data(), dx2.data(), size_t(dx.numel()) * sizeof(real)) == 0);
  }
  // Where it does not fit, Conv2d stays on im2col even when Winograd is asked for.
  CHECK(!Fixture(case_named("3x3 stride 2 pad 1"), 1).conv.winograd());
  CHECK(!Fixture(case_named("dilation 2"), 1).conv.winograd());
  CHECK(!Fixture(case_named("groups 2"), 1).conv.winograd());
  CHECK(!Fixture(case_named("1x1"), 1).conv.winograd());
  CHECK(!Fixture(case_named("padding larger than kernel"), 1).conv.winograd());
}

TEST_CASE("Conv2d algorithm choice: direct by default, im2col and Winograd when asked for") {
  const Case wide{"16 -> 16", 1, 16, 6, 6, 16, 3, 1, 1};
  {
    AlgorithmScope scope(ConvAlgorithm::kDirect);  // the default, unless MPICNN_CONV says else
    CHECK(Fixture(wide, 1).conv.direct() == (best_direct_isa() != DirectIsa::kNone));
    CHECK(!Fixture(wide, 1).conv.winograd());
  }
  {
    AlgorithmScope scope(ConvAlgorithm::kIm2col);
    CHECK(!Fixture(wide, 1).conv.direct());
    CHECK(!Fixture(wide, 1).conv.winograd());
  }
  {
    AlgorithmScope scope(ConvAlgorithm::kWinograd);
    CHECK(Fixture(wide, 1).conv.winograd());
    CHECK(!Fixture(wide, 1).conv.direct());
  }
  CHECK(parse_conv_algorithm("direct") == ConvAlgorithm::kDirect);
  CHECK(parse_conv_algorithm("im2col") == ConvAlgorithm::kIm2col);
  CHECK(parse_conv_algorithm("winograd") == ConvAlgorithm::kWinograd);
  CHECK_THROWS_WITH(parse_conv_algorithm("fft"),
                    doctest::Contains("unknown convolution algorithm 'fft'"));
  CHECK(parse_direct_isa("avx2") == DirectIsa::kAvx2);
  CHECK(parse_direct_isa("avx512") == DirectIsa::kAvx512);
  CHECK_THROWS_WITH(parse_direct_isa("sse2"), doctest::Contains("unknown instruction set 'sse2'"));
  if (best_direct_isa() != DirectIsa::kAvx512) {
    const char* before = std::getenv("MPICNN_CONV_ISA");
    const std::string saved = before ? before : "";
    setenv("MPICNN_CONV_ISA", "avx512", 1);
    CHECK_THROWS_WITH(exec_overrides({}),
                      doctest::Contains("MPICNN_CONV_ISA: this CPU has no avx512"));
    if (before)
      setenv("MPICNN_CONV_ISA", saved.c_str(), 1);
    else
      unsetenv("MPICNN_CONV_ISA");
  }
}

TEST_CASE("Winograd F(2x2,3x3) accuracy against float64, next to im2col's") {
  // A ResNet stage's shape, values of both signs: the float32 error of each algorithm relative
  // to the largest output, from the same inputs (the reference is the direct sum in double).
  const Case c{"64 -> 64 at 14x14", 2, 64, 14, 14, 64, 3, 1, 1, 1, 1, false};
  double err[2];
  for (int wino = 0; wino < 2; ++wino) {
    AlgorithmScope scope(wino ? ConvAlgorithm::kWinograd : ConvAlgorithm::kIm2col);
    Fixture f(c, 41);
    REQUIRE(f.conv.winograd() == bool(wino));
    f.conv.forward(f.y, f.x);
    const Vec want = conv_ref(to_double(f.x), f.w(), f.b(), c);
    double worst = 0;
    for (int64_t i = 0; i < f.y.numel(); ++i)
      worst = std::max(worst, std::fabs(double(f.y.data()[i]) - want[size_t(i)]));
    err[wino] = worst / max_abs(want);
  }
  MESSAGE("max |error| / max |y| against float64: im2col ", err[0], ", Winograd ", err[1]);
  // F(2x2,3x3)'s transforms add a few roundings per output (Lavin & Gray: a small constant
  // factor over direct convolution); well below the parity tests' 1e-4 on logits.
  CHECK(err[1] < 1e-5);
  CHECK(err[1] < 8 * err[0]);
}

// --explain-plan's words (Conv2d::plan_note, Model::explain_plan): what each convolution runs
// and why not the direct kernels where it does not take them, as the planner decided it.
TEST_CASE("conv2d: the plan says which implementation it chose and why") {
  const auto note = [](Conv2dOptions o, const Shape& in, const ExecConfig& cfg) {
    Conv2d conv(o);
    ParamStore store;
    conv.register_state(store, "c.");
    store.allocate();
    conv.plan(in, cfg);
    return conv.plan_note();
  };
  const Conv2dOptions k3{.in_channels = 16, .out_channels = 16, .kernel = 3, .padding = 1};
  const Shape in{4, 16, 12, 12};
  const ExecConfig fp32 = testing::exec();
  if (fp32.isa != DirectIsa::kNone)
    CHECK(note(k3, in, fp32) == std::string("direct ") + direct_isa_name(fp32.isa) + " fp32");
  ExecConfig im2col = fp32;
  im2col.conv = ConvAlgorithm::kIm2col;
  CHECK(note(k3, in, im2col).find("im2col + fp32 GEMM") == 0);
  CHECK(note(k3, in, im2col).find("(not direct: another algorithm asked for (MPICNN_CONV))") !=
        std::string::npos);
  Conv2dOptions grouped = k3;
  grouped.groups = 4;
  CHECK(note(grouped, in, fp32).find("(not direct: a grouped convolution)") != std::string::npos);
  ExecConfig wino = fp32;
  wino.conv = ConvAlgorithm::kWinograd;
  CHECK(note(k3, in, wino).find("winograd + im2col + fp32 GEMM") == 0);
  // bf16 training: a 1x1 layer stays on the GEMMs where the bf16 direct kernels exist.
  const ExecConfig bf16 = exec_in(Precision::kBf16);
  const Conv2dOptions k1{.in_channels = 16, .out_channels = 32, .kernel = 1};
  const std::string pointwise = note(k1, in, bf16);
  CHECK(pointwise.find("im2col + bf16 GEMM") != std::string::npos);
  if (DirectConv::supports(ConvGeometry{.channels = 16}, 1, true, bf16.isa))
    CHECK(pointwise.find("(not direct: bf16 1x1 in training") != std::string::npos);
  else
    CHECK(pointwise.find("(not direct: no bf16 direct kernels here") != std::string::npos);
}

// The one table of implementations (layers/conv_choice.h): each rule of choose_conv, and
// Conv2d::plan planning exactly what it names.
TEST_CASE("conv2d: choose_conv names each implementation by its rule, and plan runs what it names") {
  // A layer of c channels on hw x hw planned under cfg: the table's choice for its geometry,
  // checked against what plan set up.
  const auto plan = [](int64_t c, int64_t hw, int k, int stride, const ExecConfig& cfg, int groups = 1) {
    Conv2d conv({.in_channels = int(c), .out_channels = 32, .kernel = k, .stride = stride, .padding = k / 2,
                 .groups = groups, .bias = false});
    ParamStore store;
    conv.register_state(store, "c.");
    store.allocate();
    conv.plan({2, c, hw, hw}, cfg);
    const ConvChoice choice = choose_conv(conv.geometry(), groups, cfg);
    CHECK(choice.impl == conv.choice().impl);
    CHECK(conv.direct() == (choice.impl == ConvImpl::kDirect || choice.impl == ConvImpl::kDirectForward));
    CHECK(conv.direct_weight_grad() == (choice.impl == ConvImpl::kDirect));
    CHECK(conv.winograd() == (choice.impl == ConvImpl::kWinograd));
    return choice;
  };
  ExecConfig cuda;
  cuda.device = Device::CUDA;
  CHECK(choose_conv(ConvGeometry{.channels = 16}, 1, cuda).impl == ConvImpl::kCudnn);
  ExecConfig fp16 = testing::exec();
  fp16.precision = Precision::kFp16;
  testing::expect_error([&] { choose_conv(ConvGeometry{.channels = 16}, 1, fp16); }, "Conv2d: fp16 on the CPU (fp32 or bf16)");

  const ExecConfig fp32 = testing::exec();
  const bool direct = fp32.isa != DirectIsa::kNone;
  CHECK(plan(16, 12, 3, 1, fp32).impl == (direct ? ConvImpl::kDirect : ConvImpl::kIm2col));
  const ConvChoice grouped = plan(16, 12, 3, 1, fp32, 4);
  CHECK(grouped.impl == ConvImpl::kIm2col);
  CHECK(std::string(grouped.why_not_direct) == "a grouped convolution");
  ExecConfig im2col = fp32, wino = fp32;
  im2col.conv = ConvAlgorithm::kIm2col;
  wino.conv = ConvAlgorithm::kWinograd;
  CHECK(plan(16, 12, 3, 1, im2col).impl == ConvImpl::kIm2col);
  CHECK(plan(16, 12, 3, 1, wino).impl == ConvImpl::kWinograd);
  CHECK(plan(16, 12, 3, 2, wino).impl == ConvImpl::kIm2col);  // Winograd: stride 1 only

  // bf16, where the bf16 direct kernels exist: all three passes on them for stride 1 and rows of
  // 8+; forward and the input gradient only for rows under 8, strided layers and (inference)
  // 1x1 layers; 1x1 layers in training on im2col; never Winograd.
  const ExecConfig bf16 = exec_in(Precision::kBf16);
  ExecConfig bf16_infer = bf16.for_inference(), bf16_wino = bf16;
  bf16_wino.conv = ConvAlgorithm::kWinograd;
  CHECK(plan(16, 12, 3, 1, bf16_wino).impl == ConvImpl::kIm2col);
  if (!DirectConv::supports(ConvGeometry{.channels = 16}, 1, true, bf16.isa)) {
    CHECK(plan(16, 12, 3, 1, bf16).impl == ConvImpl::kIm2col);
    return;
  }
  CHECK(plan(16, 12, 3, 1, bf16).impl == ConvImpl::kDirect);
  CHECK(plan(16, 6, 3, 1, bf16).impl == ConvImpl::kDirectForward);   // rows of 6
  CHECK(plan(16, 24, 3, 2, bf16).impl == ConvImpl::kDirectForward);  // stride 2
  const ConvChoice k1 = plan(16, 12, 1, 1, bf16);
  CHECK(k1.impl == ConvImpl::kIm2col);
  CHECK(std::string(k1.why_not_direct) == "bf16 1x1 in training: the GEMMs measured faster");
  CHECK(plan(16, 12, 1, 1, bf16_infer).impl == ConvImpl::kDirectForward);
}
