// The CPU layers' bf16 GEMMs (Precision::kBf16, core/precision.h): Conv2d (im2col: forward, weight
// and input gradients) and Linear under bf16 against double references on the same bf16-rounded
// inputs, and a small network (conv -> ReLU -> linear) forward and backward in bf16 against fp32
// within a bound carried through the layers; fp32 stays the default and keeps the direct kernels.
// Conv2d's direct kernels in bf16 (all three passes; layers/conv_direct.h) against the same
// double references and against the im2col bf16 path, on a CPU with AVX-512 (native with
// AVX512-BF16, else emulated in AVX-512F); the two copies against each other bit for bit where
// both run.
#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/gemm_bf16.h"
#include "core/threads.h"
#include "layers/batchnorm.h"
#include "layers/conv2d.h"
#include "layers/conv_direct.h"
#include "layers/linear.h"
#include "layers/params.h"
#include "model_step.h"
#include "models/densenet.h"
#include "models/registry.h"
#include "testing.h"

using namespace mpicnn;
using namespace mpicnn::testing;

namespace {

const double kU32 = std::ldexp(1.0, -24);  // float32's unit roundoff
const double kU16 = std::ldexp(1.0, -8);   // bfloat16's

// Float32 sums of n terms (any order): off by at most sum_error(n) times the sum of magnitudes.
double sum_error(double n) { return n * kU32 / (1 - n * kU32); }
// One GEMM over K against the exact product of its unrounded inputs: fp32 sums only; bf16 also
// rounds each input by at most u16, each product by 2 u16 + u16^2. The K block adds and the
// epilogue's (beta, bias) are the few extra roundings.
double gemm_error(Precision p, double K) {
  const double sum = sum_error(K + K / kBf16KC + 4);
  return p == Precision::kBf16 ? 2 * kU16 + kU16 * kU16 + sum : sum;
}

double bf16_of(double x) {
  return double(std::bit_cast<float>(uint32_t(bf16_round(float(x))) << 16));
}
Vec rounded(const Vec& v) {
  Vec r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = bf16_of(v[i]);
  return r;
}
Vec absolute(const Vec& v) {
  Vec r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = std::fabs(v[i]);
  return r;
}
Vec plus(const Vec& a, const Vec& b) {
  Vec r(a.size());
  for (size_t i = 0; i < a.size(); ++i) r[i] = a[i] + b[i];
  return r;
}
Vec scaled(const Vec& a, double s) {
  Vec r(a.size());
  for (size_t i = 0; i < a.size(); ++i) r[i] = a[i] * s;
  return r;
}

// The tests' config (the environment's overrides applied) in precision p, with convolution
// algorithm a, planning for training or inference.
ExecConfig cfg_in(Precision p, ConvAlgorithm a = exec().conv, bool inference = false) {
  ExecConfig c = exec_in(p);
  c.conv = a;
  c.inference = inference;
  return c;
}

// A convolution's geometry (square kernel, stride and padding) and its three passes in double,
// straight from the definition.
struct Geo {
  int N, IC, H, W, OC, k, s = 1, p = 0, groups = 1;
  int OH() const { return (H + 2 * p - k) / s + 1; }
  int OW() const { return (W + 2 * p - k) / s + 1; }
  size_t x_size() const { return size_t(N) * IC * H * W; }
  size_t w_size() const { return size_t(OC) * (IC / groups) * k * k; }
  size_t y_size() const { return size_t(N) * OC * OH() * OW(); }
  // f(x index, w index, y index) for every product the convolution sums.
  template <typename F>
  void each_product(F f) const {
    const int ICg = IC / groups, OCg = OC / groups;
    for (int n = 0; n < N; ++n)
      for (int oc = 0; oc < OC; ++oc)
        for (int oh = 0; oh < OH(); ++oh)
          for (int ow = 0; ow < OW(); ++ow)
            for (int j = 0; j < ICg; ++j)
              for (int kh = 0; kh < k; ++kh)
                for (int kw = 0; kw < k; ++kw) {
                  const int ih = oh * s - p + kh, iw = ow * s - p + kw;
                  if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                  const int ic = oc / OCg * ICg + j;
                  f(((size_t(n) * IC + ic) * H + ih) * W + iw,
                    ((size_t(oc) * ICg + j) * k + kh) * k + kw,
                    ((size_t(n) * OC + oc) * OH() + oh) * OW() + ow);
                }
  }
  Vec forward(const Vec& x, const Vec& w) const {
    Vec y(y_size(), 0.0);
    each_product([&](size_t xi, size_t wi, size_t yi) { y[yi] += x[xi] * w[wi]; });
    return y;
  }
  Vec input_grad(const Vec& w, const Vec& dy) const {
    Vec dx(x_size(), 0.0);
    each_product([&](size_t xi, size_t wi, size_t yi) { dx[xi] += w[wi] * dy[yi]; });
    return dx;
  }
  Vec weight_grad(const Vec& dy, const Vec& x) const {
    Vec dw(w_size(), 0.0);
    each_product([&](size_t xi, size_t wi, size_t yi) { dw[wi] += dy[yi] * x[xi]; });
    return dw;
  }
  Vec add_bias(Vec y, const Vec& b) const {
    const size_t P = size_t(OH()) * OW();
    for (size_t i = 0; i < y.size(); ++i) y[i] += b[i / P % size_t(OC)];
    return y;
  }
};

// Linear's three products in double: y (N, O) = x (N, I) W^T, dx = dy W, dW = dy^T x.
struct Lin {
  int N, I, O;
  Vec forward(const Vec& x, const Vec& w) const {
    Vec y(size_t(N) * O, 0.0);
    for (int n = 0; n < N; ++n)
      for (int o = 0; o < O; ++o)
        for (int i = 0; i < I; ++i) y[size_t(n) * O + o] += x[size_t(n) * I + i] * w[size_t(o) * I + i];
    return y;
  }
  Vec input_grad(const Vec& w, const Vec& dy) const {
    Vec dx(size_t(N) * I, 0.0);
    for (int n = 0; n < N; ++n)
      for (int o = 0; o < O; ++o)
        for (int i = 0; i < I; ++i) dx[size_t(n) * I + i] += dy[size_t(n) * O + o] * w[size_t(o) * I + i];
    return dx;
  }
  Vec weight_grad(const Vec& dy, const Vec& x) const {
    Vec dw(size_t(O) * I, 0.0);
    for (int n = 0; n < N; ++n)
      for (int o = 0; o < O; ++o)
        for (int i = 0; i < I; ++i) dw[size_t(o) * I + i] += dy[size_t(n) * O + o] * x[size_t(n) * I + i];
    return dw;
  }
  Vec add_bias(Vec y, const Vec& b) const {
    for (size_t i = 0; i < y.size(); ++i) y[i] += b[i % size_t(O)];
    return y;
  }
};

// |got - want| <= bound, element by element.
void expect_within(const std::string& what, const Tensor& got, const Vec& want, const Vec& bound) {
  REQUIRE(int64_t(want.size()) == got.numel());
  int64_t bad = 0, worst = -1;
  double worst_ratio = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double err = std::fabs(double(got.data()[i]) - want[i]);
    if (!(err <= bound[i])) ++bad;
    const double ratio = bound[i] > 0 ? err / bound[i] : (err > 0 ? INFINITY : 0);
    if (!(ratio <= worst_ratio)) worst_ratio = ratio, worst = int64_t(i);
  }
  CAPTURE(what);
  CAPTURE(worst);
  CAPTURE(worst_ratio);  // the largest error as a fraction of its bound
  CHECK(bad == 0);
}

// The layer ran bf16 and not fp32: it is far closer to the reference on the rounded inputs
// than to the one on the unrounded inputs (bf16's rounding, 2^-9 of a term, against float32's
// accumulation, 2^-24).
void expect_rounded(const std::string& what, const Tensor& got, const Vec& on_rounded,
                    const Vec& on_exact) {
  double to_rounded = 0, to_exact = 0;
  for (size_t i = 0; i < on_rounded.size(); ++i) {
    to_rounded = std::max(to_rounded, std::fabs(double(got.data()[i]) - on_rounded[i]));
    to_exact = std::max(to_exact, std::fabs(double(got.data()[i]) - on_exact[i]));
  }
  CAPTURE(what);
  CAPTURE(to_rounded);
  CAPTURE(to_exact);
  CHECK(to_rounded * 64 < to_exact);
}

struct ConvCase {
  std::string name;
  Geo g;
  bool bias = true;
};

Conv2dOptions options_of(const ConvCase& c) {
  const Geo& g = c.g;
  return {.in_channels = g.IC, .out_channels = g.OC, .kernel = g.k, .stride = g.s,
          .padding = g.p, .groups = g.groups, .bias = c.bias};
}

}  // namespace

TEST_CASE(
    "cpu precision: fp32 by default, named; the CPU takes fp32 and bf16; fp32 keeps the direct "
    "kernels") {
  CHECK(ExecConfig{}.precision == Precision::kFp32);
  CHECK(std::string(precision_name(Precision::kBf16)) == "bf16");
  CHECK(storage_elem(Precision::kFp16) == Elem::F16);
  CHECK(make_exec_config({.device = "cpu", .precision = "bf16"}, 0).precision == Precision::kBf16);
  CHECK(make_exec_config({.device = "cpu"}, 0).precision == Precision::kFp32);
  expect_error([] { make_exec_config({.device = "cpu", .precision = "fp16"}, 0); },
               "--precision fp16: the CPU computes in fp32 or bf16 (fp16 needs --device cuda)");
  for (Precision p : {Precision::kFp32, Precision::kBf16}) {
    const ExecConfig cfg = exec_in(p);
    Conv2d conv({.in_channels = 4, .out_channels = 8, .kernel = 3, .padding = 1});
    ParamStore store;
    conv.register_state(store, "c.");
    store.allocate();
    conv.plan({2, 4, 8, 8}, cfg);
    CHECK(conv.precision() == p);
    const bool direct_ok = cfg.conv == ConvAlgorithm::kDirect &&
                           DirectConv::fits(conv.geometry(), 1, p == Precision::kBf16, cfg);
    CHECK(conv.direct() == direct_ok);
    if (p == Precision::kFp32 && cfg.conv == ConvAlgorithm::kDirect)
      CHECK(conv.direct() == (cfg.isa != DirectIsa::kNone));
    Linear lin(5, 3);
    CHECK(lin.precision() == Precision::kFp32);  // unplanned
    lin.plan({2, 5}, cfg);
    CHECK(lin.precision() == p);
  }
}

TEST_CASE("Conv2d in bf16: the three passes against double on the bf16-rounded inputs") {
  // Each pass is a GEMM (im2col) whose inputs are rounded to bf16 and whose products are then
  // exact in float32: against the double result on the rounded inputs only float32's sums
  // remain, sum_error(n) times the sum of |products| for n additions: K (+ K blocks, bias, beta)
  // forward; every pixel of the batch for the weight gradient; OC per column then the taps
  // col2im adds, for the input gradient.
  const ConvCase cases[] = {
      {"3x3 pad 1, chunks of images", {5, 3, 7, 6, 4, 3, 1, 1}},
      {"3x3 stride 2, no bias", {3, 4, 9, 8, 5, 3, 2, 1}, false},
      {"1x1 one image: the input is its own column", {1, 6, 5, 7, 4, 1}},
      {"7x7/2 pad 3 (stem)", {2, 3, 15, 13, 8, 7, 2, 3}},
      {"groups 2", {2, 4, 6, 7, 6, 3, 1, 1, 2}},
      {"K = 576 over two K blocks", {2, 64, 5, 5, 16, 3, 1, 1}},
      {"small layer: chunks in parallel", {16, 3, 8, 8, 4, 3, 1, 1}},
      {"1x1 per image, K = 600 over two K blocks", {3, 600, 8, 9, 20, 1}},
      {"1x1 per image, no bias", {4, 12, 9, 8, 10, 1}, false},
  };
  const ExecConfig cfg = cfg_in(Precision::kBf16, ConvAlgorithm::kIm2col);
  for (const ConvCase& c : cases) {
    CAPTURE(c.name);
    const Geo& g = c.g;
    Conv2d conv(options_of(c));
    ParamStore store;
    conv.register_state(store, "c.");
    store.allocate();
    fill_uniform(conv.weight, 11);
    if (c.bias) fill_uniform(conv.bias, 12);
    const Shape in{g.N, g.IC, g.H, g.W};
    conv.plan(in, cfg);
    REQUIRE(!conv.direct());
    if (c.name == "small layer: chunks in parallel") CHECK(conv.parallel_chunks());
    CHECK(conv.per_image() == (std::string(c.name).rfind("1x1 per image", 0) == 0));
    Tensor x = random_tensor(in, 13), y = Tensor::empty(conv.output_shape(in));
    Tensor dy = random_tensor(y.shape(), 14), dx = Tensor::empty(in);
    conv.forward(y, x);
    store.zero_grad();
    conv.backward(dx, dy, x, y);

    const Vec xd = to_double(x), wd = to_double(conv.weight), dyd = to_double(dy);
    const Vec xq = rounded(xd), wq = rounded(wd), dyq = rounded(dyd);
    const Vec b = c.bias ? to_double(conv.bias) : Vec(size_t(g.OC), 0.0);
    const double K = double(g.IC / g.groups) * g.k * g.k, P = double(g.OH()) * g.OW();
    const double T = double(g.k) * g.k, OCg = double(g.OC / g.groups);
    const double kblocks = g.N * P / kBf16KC + g.N;  // the weight gradient's, chunks included
    expect_within("forward", y, g.add_bias(g.forward(xq, wq), b),
                  scaled(g.add_bias(g.forward(absolute(xq), absolute(wq)), absolute(b)), sum_error(K + K / kBf16KC + 4)));
    expect_within("weight gradient", conv.grad_weight, g.weight_grad(dyq, xq),
                  scaled(g.weight_grad(absolute(dyq), absolute(xq)), sum_error(g.N * P + kblocks + 4)));
    expect_within("input gradient", dx, g.input_grad(wq, dyq),
                  scaled(g.input_grad(absolute(wq), absolute(dyq)), sum_error(OCg + T + 4)));
    expect_rounded("forward", y, g.add_bias(g.forward(xq, wq), b), g.add_bias(g.forward(xd, wd), b));
    expect_rounded("weight gradient", conv.grad_weight, g.weight_grad(dyq, xq), g.weight_grad(dyd, xd));
    expect_rounded("input gradient", dx, g.input_grad(wq, dyq), g.input_grad(wd, dyd));
  }
}

TEST_CASE("Conv2d in bf16, images or chunks side by side: any thread count gives the same bits") {
  // A 1x1 layer per image (9 images): images one per thread where they share out over the
  // threads (2 to 4 threads), else each GEMM on all threads; its weight gradient in 4 groups
  // of images (2, 2, 2 and 3), side by side on 2 and 4 threads, else in turn. A 3x3/2 layer
  // in 3 chunks of 3 images: 3 groups of one chunk, side by side on 3 threads. Every mix gives
  // the 1-thread bits.
  ExecConfig cfg = cfg_in(Precision::kBf16, ConvAlgorithm::kIm2col);
  cfg.parallel_small_convs = false;  // layers this small would run their chunks in parallel
  struct Restore {
    int threads = num_threads();
    ~Restore() { set_num_threads(threads); }
  } restore;
  struct Layer {
    const char* name;
    Conv2dOptions o;
    Shape in;
    bool per_image;
    int64_t groups;
  };
  const Layer layers[] = {
      {"1x1 per image", {.in_channels = 24, .out_channels = 40, .kernel = 1, .bias = true},
       {9, 24, 9, 8}, true, 0},
      {"3x3/2 in chunks",
       {.in_channels = 6, .out_channels = 10, .kernel = 3, .stride = 2, .padding = 1},
       {9, 6, 36, 32}, false, 3},
  };
  for (const Layer& l : layers) {
    CAPTURE(l.name);
    auto run = [&](int threads) {
      set_num_threads(threads);
      Conv2d conv(l.o);
      ParamStore store;
      conv.register_state(store, "c.");
      store.allocate();
      fill_uniform(conv.weight, 21);
      if (l.o.bias) fill_uniform(conv.bias, 22);
      conv.plan(l.in, cfg);
      REQUIRE(conv.per_image() == l.per_image);
      REQUIRE(conv.grad_groups() == l.groups);
      Tensor x = random_tensor(l.in, 23), y = Tensor::empty(conv.output_shape(l.in));
      Tensor dy = random_tensor(y.shape(), 24), dx = Tensor::empty(l.in);
      conv.forward(y, x);
      store.zero_grad();
      conv.backward(dx, dy, x, y);
      conv.backward(dx, dy, x, y);  // the groups' sums added onto a gradient already there
      std::vector<Vec> r{to_double(y), to_double(dx), to_double(conv.grad_weight)};
      if (l.o.bias) r.push_back(to_double(conv.grad_bias));
      return r;
    };
    const std::vector<Vec> one = run(1);
    for (int threads : {2, 3, 4, 5}) {
      CAPTURE(threads);
      const std::vector<Vec> many = run(threads);
      for (size_t i = 0; i < one.size(); ++i) CHECK(many[i] == one[i]);
    }
  }
}

namespace {

// Sets the bf16 GEMM's path (core/gemm_bf16.h), and with it the direct kernels' bf16 copy, for
// a scope.
struct Bf16PathScope {
  Bf16Path before = bf16_path();
  explicit Bf16PathScope(Bf16Path p) { set_bf16_path(p); }
  ~Bf16PathScope() { set_bf16_path(before); }
};

// A tensor uniform in [-1, 1) times 2^e.
Tensor scaled_tensor(const Shape& s, uint64_t seed, int e) {
  Tensor t = random_tensor(s, seed);
  for (float* v = t.data(); v < t.data() + t.numel(); ++v) *v = std::ldexp(*v, e);
  return t;
}

// conv's output on x, then its input and weight gradients for output gradient dy (the weight
// gradient from zero), each a new tensor.
std::vector<Tensor> forward_backward(Conv2d& conv, ParamStore& store, const Tensor& x,
                                     const Tensor& dy) {
  std::vector<Tensor> r{Tensor::empty(dy.shape()), Tensor::empty(x.shape())};
  r[0].fill(1e9f);  // forward and the input gradient write every element
  r[1].fill(1e9f);
  conv.forward(r[0], x);
  store.zero_grad();
  conv.backward(r[1], dy, x, r[0]);
  r.push_back(Tensor::empty(conv.weight.shape()));
  r[2].copy_from(conv.grad_weight);
  return r;
}

// Whether the bf16 direct kernels run here; if not, says why. A 1x1 layer planned for
// inference (the plans where 1x1 layers take the kernels) is direct wherever they run.
bool bf16_direct_kernels_here() {
  const ExecConfig cfg = cfg_in(Precision::kBf16, exec().conv, true);
  if (DirectConv::fits(ConvGeometry{.channels = 64}, 1, true, cfg)) return true;
  skip_case("bf16 direct kernels", "none here (a CPU without AVX-512F, the avx2 kernels, "
            "MPICNN_BF16=reference or MPICNN_CONV_BF16=im2col)");
  // Only those reasons: a probe that misses the kernels where they run must not pass quietly.
  CHECK_FALSE((bf16_avx512() && cfg.isa == DirectIsa::kAvx512 && cfg.conv_bf16_direct));
  return false;
}

}  // namespace

TEST_CASE("Conv2d in bf16 on the direct kernels: the three passes against double") {
  // Forward: every input and weight rounded to bf16 (nearest even, bf16_round), each product
  // of two 8-bit significands exact in float32, and vdpbf16ps adds each with one rounding: so
  // against the double result on the rounded inputs only float32's sums remain, at most
  // sum_error(n) times the sum of |products| for n = IC * taps additions (+ the bias, + slack),
  // whatever order the kernels sum in. The input gradient likewise on the rounded output
  // gradient and weights, n = OC * taps. The im2col bf16 path sums the same products (in
  // another order): within the two bounds of each other. The weight gradient pairs output
  // pixels (vdpbf16ps sums two pixels' products), n = N * OH * OW + 1 (dw into the zeroed
  // gradient): the same bound on the rounded output gradient and input; for 1x1 and strided
  // layers and rows under 8 pixels it runs im2col's bf16 GEMMs as the im2col path does: the
  // same bits (their accuracy is tested above).
  if (!bf16_direct_kernels_here()) return;
  const ConvCase cases[] = {
      {"1x1, 70 -> 20: three pair blocks, an odd last channel", {2, 70, 5, 6, 20, 1}},
      {"1x1 stride 2, 64 -> 40, no bias (stays on im2col)", {3, 64, 9, 9, 40, 1, 2, 0}, false},
      {"3x3 pad 1, 33 -> 17, batch 1", {1, 33, 9, 8, 17, 3, 1, 1}},
      {"3x3 pad 1, 64 -> 32, a row of 40 (tiles and a tail)", {2, 64, 3, 40, 32, 3, 1, 1}},
      {"3x3 stride 2 pad 1, 48 -> 35", {3, 48, 11, 10, 35, 3, 2, 1}},
      {"7x7 stride 2 pad 3 (stem), 3 -> 64", {2, 3, 23, 21, 64, 7, 2, 3}},
      {"3x3 pad 1 on 3x3 (images interleaved), 65 -> 33", {5, 65, 3, 3, 33, 3, 1, 1}},
      {"3x3 pad 1 on a 1x1 map (the centre tap), 40 -> 24", {4, 40, 1, 1, 24, 3, 1, 1}},
      {"3x3 no pad, 128 -> 16: K = 1152", {2, 128, 6, 7, 16, 3, 1, 0}},
      {"1 -> 6, 5x5 pad 2", {3, 1, 8, 8, 6, 5, 1, 2}},
      {"3x3 pad 1, 24 -> 20, rows of 9 (an odd last pair)", {2, 24, 5, 9, 20, 3, 1, 1}},
      {"3x3 pad 1, 20 -> 40, rows of 15 (odd)", {2, 20, 6, 15, 40, 3, 1, 1}},
      {"7x7 no pad, 17 -> 16, a row of 11 (odd), no bias", {2, 17, 7, 17, 16, 7, 1, 0}, false},
      {"5x5 pad 2, 16 -> 24, rows of 13", {3, 16, 4, 13, 24, 5, 1, 2}},
      {"3x3 pad 1, 40 -> 64, rows of 12 (four-block weight gradient)", {2, 40, 5, 12, 64, 3, 1, 1}},
  };
  for (const ConvCase& c : cases) {
    CAPTURE(c.name);
    const Geo& g = c.g;
    Conv2d conv(options_of(c));
    ParamStore store;
    conv.register_state(store, "c.");
    store.allocate();
    fill_uniform(conv.weight, 41);
    if (c.bias) fill_uniform(conv.bias, 42);
    const Shape in{g.N, g.IC, g.H, g.W};
    const Tensor x = random_tensor(in, 43), dy = random_tensor(conv.output_shape(in), 44);
    // Forward and backward on one algorithm: y, dx and the weight gradient.
    bool direct_wgrad = false;  // of the direct run
    auto run = [&](ConvAlgorithm a) {
      // 1x1 layers take the direct kernels in inference plans only (a strided one never):
      // planned so here, to test their forward and input gradient. (On the emulated path a
      // layer of under 16 input channels stays on im2col: DirectConv::fits.)
      const ExecConfig cfg = cfg_in(Precision::kBf16, a, g.k == 1);
      conv.plan(in, cfg);
      const bool strided_pointwise = g.k == 1 && g.s > 1;
      REQUIRE(conv.direct() == (a == ConvAlgorithm::kDirect && !strided_pointwise &&
                                DirectConv::fits(conv.geometry(), 1, true, cfg)));
      const bool wgrad = conv.direct() && g.OW() >= 8 && g.k > 1 && g.s == 1;
      REQUIRE(conv.direct_weight_grad() == wgrad);
      if (a == ConvAlgorithm::kDirect) direct_wgrad = wgrad;
      return forward_backward(conv, store, x, dy);
    };
    const std::vector<Tensor> direct = run(ConvAlgorithm::kDirect);
    const std::vector<Tensor> im2col = run(ConvAlgorithm::kIm2col);

    const Vec xd = to_double(x), wd = to_double(conv.weight), dyd = to_double(dy);
    const Vec xq = rounded(xd), wq = rounded(wd), dyq = rounded(dyd);
    const Vec b = c.bias ? to_double(conv.bias) : Vec(size_t(g.OC), 0.0);
    const double K = double(g.IC) * g.k * g.k;
    const Vec want = g.add_bias(g.forward(xq, wq), b);
    const Vec bound = scaled(g.add_bias(g.forward(absolute(xq), absolute(wq)), absolute(b)),
                             sum_error(K + 4));
    expect_within("bf16 direct forward", direct[0], want, bound);
    expect_rounded("bf16 direct forward", direct[0], want, g.add_bias(g.forward(xd, wd), b));
    expect_within("bf16 direct forward vs im2col bf16", direct[0], to_double(im2col[0]),
                  scaled(bound, 2));
    const double T = double(g.k) * g.k;
    const Vec dx_want = g.input_grad(wq, dyq);
    const Vec dx_bound =
        scaled(g.input_grad(absolute(wq), absolute(dyq)), sum_error(g.OC * T + T + 4));
    expect_within("bf16 direct input gradient", direct[1], dx_want, dx_bound);
    expect_rounded("bf16 direct input gradient", direct[1], dx_want, g.input_grad(wd, dyd));
    expect_within("bf16 direct input gradient vs im2col bf16", direct[1], to_double(im2col[1]),
                  scaled(dx_bound, 2));
    if (!direct_wgrad) {
      const size_t wbytes = sizeof(float) * size_t(direct[2].numel());
      CHECK(std::memcmp(direct[2].data(), im2col[2].data(), wbytes) == 0);  // the same GEMMs
      continue;
    }
    const Vec dw_want = g.weight_grad(dyq, xq);
    const Vec dw_bound = scaled(g.weight_grad(absolute(dyq), absolute(xq)),
                                sum_error(double(g.N) * g.OH() * g.OW() + 1 + 4));
    expect_within("bf16 direct weight gradient", direct[2], dw_want, dw_bound);
    expect_rounded("bf16 direct weight gradient", direct[2], dw_want, g.weight_grad(dyd, xd));
    expect_within("bf16 direct weight gradient vs im2col bf16", direct[2], to_double(im2col[2]),
                  scaled(dw_bound, 2));
  }
}


TEST_CASE("Conv2d in bf16, direct kernels: a 1x1 layer has the reference GEMM's bits, flushes too") {
  // A 1x1 layer without padding sums each output's products over the input channels in pairs,
  // in order (the odd product, then the even), from zero, and each input gradient's over the
  // output channels alike: the bf16 GEMMs over im2col (K <= kBf16KC) sum the same products in
  // the same order, so the direct kernels (native or emulated) must give the bits of the GEMM's
  // reference path (the definition in scalar code, core/gemm_bf16.h), subnormal steps flushed
  // to zero included; the weight gradient runs the bf16 GEMM on either algorithm (this path's
  // kernels against the reference). Inputs, weights and output gradients of 2^-63 make
  // products near float32's smallest normal, 2^-126: many steps and sums subnormal, which the
  // native instruction flushes and the emulation must too (its DAZ and final flush).
  if (!bf16_direct_kernels_here()) return;
  for (const int ic : {40, 70}) {  // two and three pair blocks, an odd channel count
    CAPTURE(ic);
    Conv2d conv({.in_channels = ic, .out_channels = 20, .kernel = 1, .bias = false});
    ParamStore store;
    conv.register_state(store, "c.");
    store.allocate();
    conv.weight.copy_from(scaled_tensor(conv.weight.shape(), 51, -63));
    const Shape in{2, ic, 5, 6};
    const Tensor x = scaled_tensor(in, 52, -63);
    const Tensor dy = scaled_tensor(conv.output_shape(in), 53, -63);
    auto run = [&](ConvAlgorithm a) {
      conv.plan(in, cfg_in(Precision::kBf16, a, true));
      REQUIRE(conv.direct() == (a == ConvAlgorithm::kDirect));
      return forward_backward(conv, store, x, dy);
    };
    const std::vector<Tensor> direct = run(ConvAlgorithm::kDirect);
    const std::vector<Tensor> im2col = [&] {
      const Bf16PathScope reference(Bf16Path::kReference);  // the definition, in scalar code
      return run(ConvAlgorithm::kIm2col);
    }();
    for (size_t i = 0; i < direct.size(); ++i) {
      CAPTURE(i);  // output, input gradient, weight gradient
      const Tensor& t = direct[i];
      int64_t zeros = 0, subnormal = 0;  // what the scale gave: flushed sums, and none kept
      for (const float v : std::vector<float>(t.data(), t.data() + t.numel())) {
        zeros += v == 0.f;
        subnormal += v != 0.f && std::fabs(v) < FLT_MIN;
      }
      CHECK(zeros > 0);
      CHECK(subnormal == 0);
      CHECK(same_bits(t, im2col[i]));
    }
  }
}

// The bf16 direct kernels' passes on one layer, run as DirectConv itself (not through Conv2d's
// planner, which keeps some layers on im2col on some paths: the kernels are tested wherever
// they can run), on the kernels of the bf16 path selected now: the output (with the bias), the
// input gradient and, where the kernels take it (bf16_weight_grad), the weight gradient from
// zero; otherwise an empty third tensor.
std::vector<Tensor> direct_kernel_passes(Conv2d& conv, const Tensor& x, const Tensor& dy) {
  const Shape in = x.shape();
  conv.note_input(in, exec_in(Precision::kBf16));
  const ConvGeometry g = conv.geometry();
  REQUIRE(DirectConv::supports(g, 1, true, DirectIsa::kAvx512));
  const DirectConv dc(g, conv.options().out_channels, in[0], true, DirectIsa::kAvx512);
  Tensor ws = Tensor::empty({std::max<int64_t>(dc.workspace_floats(), 1)});
  std::vector<Tensor> r{Tensor::empty(dy.shape()), Tensor::empty(in), Tensor()};
  r[0].fill(1e9f);  // forward and the input gradient write every element
  r[1].fill(1e9f);
  const real* bias = conv.options().bias ? conv.bias.data() : nullptr;
  dc.forward(r[0].data(), x.data(), conv.weight.data(), bias, in[0], ws.data());
  if (dc.bf16_weight_grad()) {
    r[2] = Tensor::zeros(conv.weight.shape());
    dc.backward(r[1].data(), r[2].data(), dy.data(), x.data(), conv.weight.data(), in[0], ws.data());
  } else {
    dc.backward(r[1].data(), nullptr, dy.data(), x.data(), conv.weight.data(), in[0], ws.data());
  }
  return r;
}

// The layers the bf16 kernel comparisons below run: each pass's tiles and tails, strides, the
// stem (which the planner keeps on im2col on the emulated path), interleaved images, and the
// weight gradient's two- and four-block loops.
const ConvCase kBf16KernelCases[] = {
    {"3x3 pad 1, 33 -> 17", {2, 33, 9, 8, 17, 3, 1, 1}},
    {"3x3 stride 2 pad 1, 48 -> 35", {3, 48, 11, 10, 35, 3, 2, 1}},
    {"7x7 stride 2 pad 3 (stem), 3 -> 64", {2, 3, 23, 21, 64, 7, 2, 3}},
    {"3x3 pad 1 on 3x3 (images interleaved), 65 -> 33", {5, 65, 3, 3, 33, 3, 1, 1}},
    {"3x3 pad 1, 64 -> 64, rows of 20 (four-block weight gradient)", {2, 64, 6, 20, 64, 3, 1, 1}},
    {"3x3 pad 1, 40 -> 64, rows of 12 (four-block weight gradient)", {2, 40, 5, 12, 64, 3, 1, 1}},
    {"5x5 pad 2, 16 -> 24, rows of 13", {3, 16, 4, 13, 24, 5, 1, 2}},
};

// The bf16 paths with direct kernels on this CPU (native where it has AVX512-BF16, emulated
// where it has AVX-512F), each with the planner's choice for a layer of few input channels;
// empty, with a message saying why, where none runs.
std::vector<Bf16Path> bf16_kernel_paths() {
  std::vector<Bf16Path> paths;
  if (exec().isa != DirectIsa::kAvx512) {
    skip_case("bf16 direct kernels against the reference", "the avx2 kernel set (a CPU "
              "without AVX-512F, or MPICNN_CONV_ISA=avx2) has no bf16 copy");
    return paths;
  }
  if (best_bf16_path() == Bf16Path::kNative) paths.push_back(Bf16Path::kNative);
  {
    const Bf16PathScope emulated(Bf16Path::kEmulated);
    if (bf16_avx512()) paths.push_back(Bf16Path::kEmulated);
  }
  if (paths.empty())
    skip_case("bf16 direct kernels against the reference", "no AVX-512F/BW/VL on this CPU");
  return paths;
}

TEST_CASE("Conv2d in bf16: the direct kernels emulated in AVX-512F give the native kernels' bits") {
  // conv_direct_bf16_avx512f.cpp runs the native copy's passes with each vdpbf16ps emulated:
  // forward, the input gradient and the weight gradient must come out bit for bit, on inputs
  // of ordinary size and on ones small enough for subnormal steps (flushed by both). Only a CPU
  // with AVX512-BF16 runs both; elsewhere the next case checks the emulated kernels against the
  // reference path.
  if (best_bf16_path() != Bf16Path::kNative || exec().isa != DirectIsa::kAvx512) {
    skip_case("bf16 direct kernels, emulated against native", "no AVX512-BF16 here (or the "
              "avx2 kernels selected); the next case checks the emulated ones against the "
              "reference");
    return;
  }
  for (const ConvCase& c : kBf16KernelCases)
    for (const int e : {0, -63}) {
      CAPTURE(c.name);
      CAPTURE(e);
      const Geo& g = c.g;
      Conv2d conv(options_of(c));
      ParamStore store;
      conv.register_state(store, "c.");
      store.allocate();
      conv.weight.copy_from(scaled_tensor(conv.weight.shape(), 61, e));
      conv.bias.copy_from(scaled_tensor(conv.bias.shape(), 64, e));
      const Shape in{g.N, g.IC, g.H, g.W};
      const Tensor x = scaled_tensor(in, 62, e), dy = scaled_tensor(conv.output_shape(in), 63, e);
      auto run = [&](Bf16Path path) {
        const Bf16PathScope p(path);
        return direct_kernel_passes(conv, x, dy);
      };
      const std::vector<Tensor> native = run(Bf16Path::kNative);
      const std::vector<Tensor> emulated = run(Bf16Path::kEmulated);
      CHECK(same_bits(native[0], emulated[0]));
      CHECK(same_bits(native[1], emulated[1]));
      REQUIRE(native[2].defined() == emulated[2].defined());
      if (native[2].defined()) CHECK(same_bits(native[2], emulated[2]));
    }
}

// A tensor of multiples of 1/8 in [-7/8, 7/8], none zero: exact in bf16, every product a
// multiple of 1/64 of at most 1 and so every sum of under 2^18 of them exact in float32.
Tensor eighths(const Shape& s, uint64_t seed) {
  Tensor t = random_tensor(s, seed);
  for (float* v = t.data(); v < t.data() + t.numel(); ++v)
    *v = (2.f * std::min(std::floor(std::fabs(*v) * 4.f), 3.f) + 1.f) / 8.f * (*v < 0 ? -1.f : 1.f);
  return t;
}

TEST_CASE("Conv2d in bf16: each path's direct kernels give the reference path's bits on exact sums") {
  // On inputs whose products and sums are all exact in float32 (eighths), the order of the
  // additions cannot show: the direct kernels of every bf16 path this CPU runs (native,
  // emulated) must give exactly what the reference path (im2col on the bf16 GEMM's scalar
  // definition, core/gemm_bf16.h) gives: every tap, channel, pair and pixel they read, on every
  // CPU with AVX-512F, not only where the native instruction is. And the planner's rule for a
  // layer of few input channels: direct on the native kernels, im2col on the emulated ones.
  const std::vector<Bf16Path> paths = bf16_kernel_paths();
  if (paths.empty()) return;
  const ExecConfig cfg = cfg_in(Precision::kBf16);
  for (const ConvCase& c : kBf16KernelCases) {
    CAPTURE(c.name);
    const Geo& g = c.g;
    Conv2d conv(options_of(c));
    ParamStore store;
    conv.register_state(store, "c.");
    store.allocate();
    conv.weight.copy_from(eighths(conv.weight.shape(), 71));
    conv.bias.copy_from(eighths(conv.bias.shape(), 72));
    const Shape in{g.N, g.IC, g.H, g.W};
    const Tensor x = eighths(in, 73), dy = eighths(conv.output_shape(in), 74);
    const std::vector<Tensor> reference = [&] {
      const Bf16PathScope reference(Bf16Path::kReference);
      conv.plan(in, cfg_in(Precision::kBf16, ConvAlgorithm::kIm2col));
      REQUIRE_FALSE(conv.direct());
      return forward_backward(conv, store, x, dy);
    }();
    for (const Bf16Path path : paths) {
      CAPTURE(bf16_path_name(path));
      const Bf16PathScope p(path);
      const std::vector<Tensor> direct = direct_kernel_passes(conv, x, dy);
      CHECK(same_bits(direct[0], reference[0]));
      CHECK(same_bits(direct[1], reference[1]));
      if (direct[2].defined()) CHECK(same_bits(direct[2], reference[2]));
      const bool few_channels = g.IC < 16;
      CHECK(DirectConv::fits(conv.geometry(), 1, true, cfg) ==
            (cfg.conv_bf16_direct && (!few_channels || path == Bf16Path::kNative)));
    }
  }
}

TEST_CASE("Linear in bf16: the three GEMMs against double on the bf16-rounded inputs") {
  const Lin l{6, 700, 37};  // I over a K block
  Linear lin(l.I, l.O);
  ParamStore store;
  lin.register_state(store, "fc.");
  store.allocate();
  fill_uniform(lin.weight, 21);
  fill_uniform(lin.bias, 22);
  lin.plan({l.N, l.I}, exec_in(Precision::kBf16));
  Tensor x = random_tensor({l.N, l.I}, 23), y = Tensor::empty({l.N, l.O});
  Tensor dy = random_tensor({l.N, l.O}, 24), dx = Tensor::empty({l.N, l.I});
  lin.forward(y, x);
  store.zero_grad();
  lin.backward(dx, dy, x, y);
  const Vec xd = to_double(x), wd = to_double(lin.weight), dyd = to_double(dy), b = to_double(lin.bias);
  const Vec xq = rounded(xd), wq = rounded(wd), dyq = rounded(dyd);
  expect_within("forward", y, l.add_bias(l.forward(xq, wq), b),
                scaled(l.add_bias(l.forward(absolute(xq), absolute(wq)), absolute(b)), sum_error(l.I + 6)));
  expect_within("weight gradient", lin.grad_weight, l.weight_grad(dyq, xq),
                scaled(l.weight_grad(absolute(dyq), absolute(xq)), sum_error(l.N + 4)));
  expect_within("input gradient", dx, l.input_grad(wq, dyq),
                scaled(l.input_grad(absolute(wq), absolute(dyq)), sum_error(l.O + 4)));
  expect_rounded("forward", y, l.add_bias(l.forward(xq, wq), b), l.add_bias(l.forward(xd, wd), b));
  expect_rounded("input gradient", dx, l.input_grad(wq, dyq), l.input_grad(wd, dyd));
}

TEST_CASE("a conv -> ReLU -> linear network: bf16 within its carried bound of fp32") {
  // Bound each path p (fp32, bf16) against the exact network on the same float inputs, then
  // |bf16 - fp32| <= bound_bf16 + bound_fp32. A GEMM over K is off by gemm_error(p, K) times
  // the product of magnitudes (|W| |x|); an error e in its input adds at most |W| e; ReLU passes
  // errors on unchanged (1-Lipschitz), and backward, where |z1| <= e1 the two paths' ReLU masks
  // may differ, the gradient there is off by up to its whole size.
  const Geo g{4, 3, 6, 6, 8, 3, 1, 1};
  const int F = g.OC * g.OH() * g.OW();
  const Lin l{g.N, F, 5};
  Conv2d conv({.in_channels = g.IC, .out_channels = g.OC, .kernel = g.k, .padding = g.p});
  Linear fc(F, l.O);
  ParamStore store;
  conv.register_state(store, "conv.");
  fc.register_state(store, "fc.");
  store.allocate();
  fill_uniform(conv.weight, 31);
  fill_uniform(conv.bias, 32, -0.1f, 0.1f);
  fill_uniform(fc.weight, 33, -0.1f, 0.1f);
  fill_uniform(fc.bias, 34);
  const Shape in{g.N, g.IC, g.H, g.W};
  const Tensor x = random_tensor(in, 35), up = random_tensor({g.N, l.O}, 36);

  struct Run {
    Tensor z1, z2, dh1, dx, gw1, gb1, gw2, gb2;
  };
  auto run = [&](Precision p) {
    conv.plan(in, exec_in(p));
    fc.plan({g.N, F}, exec_in(p));
    Run r;
    r.z1 = Tensor::empty(conv.output_shape(in));
    r.z2 = Tensor::empty({g.N, l.O});
    r.dh1 = Tensor::empty({g.N, F});
    r.dx = Tensor::empty(in);
    conv.forward(r.z1, x);
    Tensor h1 = Tensor::empty(r.z1.shape());
    for (int64_t i = 0; i < h1.numel(); ++i) h1.data()[i] = std::max(r.z1.data()[i], 0.0f);
    const Tensor h1f = h1.reshape({g.N, F});
    fc.forward(r.z2, h1f);
    store.zero_grad();
    fc.backward(r.dh1, up, h1f, r.z2);
    Tensor dz1 = Tensor::empty(r.z1.shape());
    for (int64_t i = 0; i < dz1.numel(); ++i)
      dz1.data()[i] = r.z1.data()[i] > 0 ? r.dh1.data()[i] : 0.0f;
    conv.backward(r.dx, dz1, x, h1);
    for (auto [dst, src] : {std::pair{&r.gw1, &conv.grad_weight}, {&r.gb1, &conv.grad_bias},
                            {&r.gw2, &fc.grad_weight}, {&r.gb2, &fc.grad_bias}}) {
      *dst = Tensor::empty(src->shape());
      dst->copy_from(*src);
    }
    return r;
  };
  const Run f32 = run(Precision::kFp32), b16 = run(Precision::kBf16);

  // The exact network, in double, and its magnitudes.
  const Vec xd = to_double(x), w1 = to_double(conv.weight), b1 = to_double(conv.bias);
  const Vec w2 = to_double(fc.weight), b2 = to_double(fc.bias), gd = to_double(up);
  const Vec z1 = g.add_bias(g.forward(xd, w1), b1);
  Vec h1(z1.size());
  for (size_t i = 0; i < z1.size(); ++i) h1[i] = std::max(z1[i], 0.0);
  const Vec dh1 = l.input_grad(w2, gd);
  Vec dz1(z1.size());
  for (size_t i = 0; i < z1.size(); ++i) dz1[i] = z1[i] > 0 ? dh1[i] : 0.0;
  const double K1 = double(g.IC) * g.k * g.k, P = double(g.OH()) * g.OW();

  struct Bound {
    Vec z1, z2, dh1, dz1, dx, gw1, gb1, gw2;
  };
  auto bound = [&](Precision p) {
    Bound e;
    e.z1 = scaled(g.add_bias(g.forward(absolute(xd), absolute(w1)), absolute(b1)), gemm_error(p, K1));
    const Vec h1_mag = plus(absolute(h1), e.z1);
    e.z2 = plus(l.forward(e.z1, absolute(w2)),
                scaled(l.add_bias(l.forward(h1_mag, absolute(w2)), absolute(b2)), gemm_error(p, F)));
    e.dh1 = scaled(l.input_grad(absolute(w2), absolute(gd)), gemm_error(p, l.O));
    e.dz1.resize(z1.size());
    for (size_t i = 0; i < z1.size(); ++i)
      e.dz1[i] = std::fabs(z1[i]) > e.z1[i] ? e.dh1[i] : std::fabs(dh1[i]) + e.dh1[i];
    const Vec dz1_mag = plus(absolute(dz1), e.dz1);
    e.dx = plus(g.input_grad(absolute(w1), e.dz1),
                scaled(g.input_grad(absolute(w1), dz1_mag), gemm_error(p, g.OC * g.k * g.k)));
    e.gw1 = plus(g.weight_grad(e.dz1, absolute(xd)),
                 scaled(g.weight_grad(dz1_mag, absolute(xd)), gemm_error(p, g.N * P)));
    e.gb1.assign(size_t(g.OC), 0.0);  // a float32 sum of dz1 over the batch and pixels
    for (size_t i = 0; i < z1.size(); ++i)
      e.gb1[i / size_t(P) % size_t(g.OC)] += e.dz1[i] + sum_error(g.N * P) * dz1_mag[i];
    e.gw2 = plus(l.weight_grad(absolute(gd), e.z1),
                 scaled(l.weight_grad(absolute(gd), h1_mag), gemm_error(p, g.N)));
    return e;
  };
  const Bound e32 = bound(Precision::kFp32), e16 = bound(Precision::kBf16);
  expect_within("conv output", b16.z1, to_double(f32.z1), plus(e16.z1, e32.z1));
  expect_within("logits", b16.z2, to_double(f32.z2), plus(e16.z2, e32.z2));
  expect_within("linear input gradient", b16.dh1, to_double(f32.dh1), plus(e16.dh1, e32.dh1));
  expect_within("conv input gradient", b16.dx, to_double(f32.dx), plus(e16.dx, e32.dx));
  expect_within("conv weight gradient", b16.gw1, to_double(f32.gw1), plus(e16.gw1, e32.gw1));
  expect_within("conv bias gradient", b16.gb1, to_double(f32.gb1), plus(e16.gb1, e32.gb1));
  expect_within("linear weight gradient", b16.gw2, to_double(f32.gw2), plus(e16.gw2, e32.gw2));
  expect_within("linear bias gradient", b16.gb2, to_double(f32.gb2), Vec(size_t(l.O), 0.0));
  // And bf16 did run: the logits differ from fp32's.
  CHECK(max_abs(plus(to_double(b16.z2), scaled(to_double(f32.z2), -1))) > 0);
}

TEST_CASE("DenseNet's 1x1 bottleneck GEMMs run in bf16 too") {
  // DenseBlock computes conv1 (1x1) as one GEMM of its own: under bf16 it must round its inputs
  // as Conv2d does, not run float32 under a bf16 label. One layer, training mode: the new maps
  // against a double reference in which both convolutions' inputs and weights, and norm2's
  // input (conv1's output, kept in bf16 by a training plan: plan_after_conv), are rounded to
  // bf16, and against one in which nothing is. The block sits on the rounded one (float32 sums
  // and BatchNorm only: far inside 1/16 of its distance to the exact one); with conv1 in
  // float32 it sits as far from both (measured: the check then fails).
  const int N = 2, IC = 8, G = 4, B = 16, H = 6, W = 6, HW = H * W;
  DenseBlock block(1, IC, G, B / G);
  ParamStore store;
  block.register_state(store, "b.");
  store.allocate();
  std::map<std::string, Tensor*> p;
  uint64_t seed = 60;
  for (const StateEntry& e : store.entries()) {
    if (e.kind != StateKind::Param) continue;
    const bool norm = e.name.find("norm") != std::string::npos;
    fill_uniform(*e.value, ++seed, norm ? 0.5f : -0.8f, norm ? 1.5f : 0.8f);
    p[e.name.substr(e.name.find("norm") != std::string::npos ? e.name.find("norm")
                                                               : e.name.find("conv"))] = e.value;
  }
  REQUIRE(p.size() == 6);
  block.plan({N, IC, H, W}, exec_in(Precision::kBf16));
  block.set_training(true);
  const Tensor x = random_tensor({N, IC, H, W}, 61);
  const Tensor& y = block.forward(x);

  // BatchNorm (batch statistics, eps 1e-5) then ReLU, per channel of (N, C, HW), in double.
  auto bn_relu = [&](const Vec& v, int C, const Tensor& gamma, const Tensor& beta) {
    Vec r(v.size());
    for (int c = 0; c < C; ++c) {
      double s = 0, s2 = 0;
      for (int n = 0; n < N; ++n)
        for (int i = 0; i < HW; ++i) s += v[size_t((n * C + c) * HW + i)];
      const double mean = s / (N * HW);
      for (int n = 0; n < N; ++n)
        for (int i = 0; i < HW; ++i) {
          const double d = v[size_t((n * C + c) * HW + i)] - mean;
          s2 += d * d;
        }
      const double invstd = 1 / std::sqrt(s2 / (N * HW) + 1e-5);
      for (int n = 0; n < N; ++n)
        for (int i = 0; i < HW; ++i) {
          const size_t k = size_t((n * C + c) * HW + i);
          r[k] = std::max(0.0, (v[k] - mean) * invstd * gamma.data()[c] + beta.data()[c]);
        }
    }
    return r;
  };
  auto reference = [&](bool round) {
    auto q = [&](const Vec& v) { return round ? rounded(v) : v; };
    const Vec a1 = q(bn_relu(to_double(x), IC, *p["norm1.weight"], *p["norm1.bias"]));
    const Geo g1{N, IC, H, W, B, 1}, g2{N, B, H, W, G, 3, 1, 1};
    const Vec c1 = g1.forward(a1, q(to_double(*p["conv1.weight"])));
    const Vec a2 = q(bn_relu(q(c1), B, *p["norm2.weight"], *p["norm2.bias"]));
    return g2.forward(a2, q(to_double(*p["conv2.weight"])));
  };
  const Vec on_rounded = reference(true), on_exact = reference(false);
  double to_rounded = 0, to_exact = 0;
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < G; ++c)
      for (int i = 0; i < HW; ++i) {
        const double got = y.data()[(n * (IC + G) + IC + c) * HW + i];
        const size_t k = size_t((n * G + c) * HW + i);
        to_rounded = std::max(to_rounded, std::fabs(got - on_rounded[k]));
        to_exact = std::max(to_exact, std::fabs(got - on_exact[k]));
      }
  CAPTURE(to_rounded);
  CAPTURE(to_exact);
  CHECK(to_rounded * 16 < to_exact);
}

namespace {

// max |a - b| over max |b|: how far a is from b, relative to b's scale.
double relative_gap(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  const Vec va = to_double(a), vb = to_double(b);
  double gap = 0;
  for (size_t i = 0; i < va.size(); ++i) gap = std::max(gap, std::fabs(va[i] - vb[i]));
  return gap / std::max(max_abs(vb), 1e-30);
}

}  // namespace

TEST_CASE("BatchNorm2d with bf16 input, in place: a float32 BatchNorm2d on the rounded input") {
  // set_bf16_input: forward rounds its input to bf16, keeps the copy, and backward reads that
  // copy, not the input's memory, which the in-place forward has overwritten. Against a plain
  // BatchNorm2d given the rounded input in a buffer of its own: the same float expressions,
  // only the order of the double sums may differ (1e-6 of the scale allows a few float ulps;
  // an unrounded input is off by ~2^-9, a stale input by the whole scale).
  const Shape s{3, 5, 7, 9};
  const Tensor x = random_tensor(s, 70, -2.f, 3.f), r = random_tensor(s, 71);
  const Tensor dy = random_tensor(s, 72);
  Tensor xr = Tensor::empty(s);
  for (int64_t i = 0; i < s.numel(); ++i) xr.data()[i] = float(bf16_of(x.data()[i]));
  for (bool training : {true, false})
    for (int mode = 0; mode < 3; ++mode) {  // plain, fused ReLU, residual add + ReLU
      CAPTURE(training);
      CAPTURE(mode);
      ParamStore store;
      BatchNorm2d ours(5), ref(5);
      ours.register_state(store, "ours.");
      ref.register_state(store, "ref.");
      store.allocate();
      for (BatchNorm2d* bn : {&ours, &ref}) {
        fill_uniform(bn->weight, 73, 0.5f, 1.5f);
        fill_uniform(bn->bias, 74, -0.5f, 0.5f);
        fill_uniform(bn->running_mean, 75, -0.2f, 0.2f);
        fill_uniform(bn->running_var, 76, 0.5f, 1.5f);
        bn->set_fused_relu(mode == 1);
        bn->set_training(training);
      }
      ours.set_bf16_input(true);
      ours.plan(s, exec());
      ref.plan(s, exec());
      Tensor io = Tensor::empty(s), out = Tensor::empty(s);
      io.copy_from(x);
      if (mode == 2) {
        ours.forward(io, io, r);
        ref.forward(out, xr, r);
      } else {
        ours.forward(io, io);
        ref.forward(out, xr);
      }
      CHECK(relative_gap(io, out) < 1e-6);
      CHECK(relative_gap(ours.running_mean, ref.running_mean) < 1e-6);
      CHECK(relative_gap(ours.running_var, ref.running_var) < 1e-6);
      Tensor din = Tensor::empty(s), din_ref = Tensor::empty(s);
      ours.backward(din, dy, io, io);  // in is out: the input's memory holds the output now
      ref.backward(din_ref, dy, xr, out);
      CHECK(relative_gap(din, din_ref) < 1e-6);
      CHECK(relative_gap(ours.grad_weight, ref.grad_weight) < 1e-6);
      CHECK(relative_gap(ours.grad_bias, ref.grad_bias) < 1e-6);
    }
}

TEST_CASE("bf16 training keeps the BatchNorm inputs after convolutions in bf16, in place, to the same bits") {
  // Every BatchNorm2d right after a Conv2d (ResNet blocks, the stem and downsample Sequentials,
  // GoogLeNet's BasicConv2d, its aux heads' too, DenseNet's stem and norm2) takes bf16_input in
  // a bf16 training plan, none in fp32 or in an inference plan; and using the memory that frees (bf16_batchnorm_sharing:
  // the BatchNorms in place over their convolution's output, ResNet's downsample output in a
  // shared slot) changes no value (a layer reading such an output after it was overwritten
  // would see another): a training step, the running statistics and an eval forward, shared
  // and with buffers of their own, bit for bit.
  struct Spec {
    const char* name;
    int size;
    int after_conv;  // BatchNorm2d layers right after a Conv2d; -1: all of them
  };
  for (const Spec& spec : {Spec{"resnet20", 32, -1}, Spec{"resnet50", 64, -1},
                           Spec{"googlenet", 64, -1}, Spec{"densenet121", 32, 1 + 58}}) {
    CAPTURE(spec.name);
    const Shape in{2, 3, spec.size, spec.size};
    const Tensor x = random_tensor(in, 80);
    const std::vector<int32_t> targets{1, 3};
    auto step = [&](Precision p, bool inference, bool sharing) {
      ExecConfig cfg = cfg_in(p, exec().conv, inference);
      cfg.bf16_batchnorm_sharing = sharing;
      auto model = build_model(spec.name, {.num_classes = 5, .dropout = 0.f, .aux_dropout = 0.f}, 3);
      const Shape out = model->plan(in, cfg);
      int bns = 0, bf16_bns = 0;
      model->root().for_each_layer([&](Layer& l, const std::string&) {
        if (auto* bn = dynamic_cast<BatchNorm2d*>(&l)) ++bns, bf16_bns += bn->bf16_input();
      });
      const int after_conv = spec.after_conv < 0 ? bns : spec.after_conv;
      CHECK(after_conv > 0);
      CHECK(bf16_bns == (p == Precision::kBf16 && !inference ? after_conv : 0));
      return inference ? StepResult() : step_and_eval(*model, x, targets, out);
    };
    step(Precision::kBf16, true, true);
    step(Precision::kFp32, true, true);
    step(Precision::kFp32, false, true);
    check_same_step(step(Precision::kBf16, false, false), step(Precision::kBf16, false, true));
  }
}
