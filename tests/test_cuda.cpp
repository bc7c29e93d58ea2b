// GPU against CPU on the same inputs (ggml test-backend-ops style): every layer forward and
// backward, every model forward, backward and 3 optimizer steps, the fused optimizers, the input
// normalisation kernel, and no device allocation inside a training step; folded inference
// (MPICNN_GPU_FOLD) against the unfolded path; the channels-last typed path (--gpu-layout nhwc:
// NHWC float32, bfloat16, float16 activations) layer by layer and in whole models. Tolerances
// are per precision. Without a usable GPU (a CPU-only build, or no device) every case prints
// "SKIP: <case>: <reason>" and tests/run_all.sh counts it as skipped, not passed.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>

#include "core/device.h"
#include "core/gpu.h"
#include "core/profile.h"
#include "core/rng.h"
#include "core/timer.h"
#include "data/transform.h"
#include "layers/adaptive_avgpool2d.h"
#include "layers/add.h"
#include "layers/avgpool2d.h"
#include "layers/batchnorm.h"
#include "layers/concat.h"
#include "layers/conv2d.h"
#include "layers/dropout.h"
#include "layers/flatten.h"
#include "layers/fold.h"
#include "layers/linear.h"
#include "layers/maxpool2d.h"
#include "layers/relu.h"
#include "layers/softmax_xent.h"
#include "models/aux_loss.h"
#include "models/registry.h"
#include "optim/adamw.h"
#include "optim/sgd.h"
#include "profile_rows.h"
#include "recipes.h"
#include "testing.h"

using namespace mpicnn;

namespace {

// Selects device 0 once; "" when the GPU is usable, else why not.
const std::string& gpu_unusable() {
  static const std::string why = [] {
    std::string w = gpu::unavailable_reason();
    if (w.empty()) gpu::backend().select_device(0);
    return w;
  }();
  return why;
}

#define REQUIRE_GPU(name)                                                        \
  do {                                                                           \
    if (!gpu_unusable().empty()) {                                               \
      std::printf("SKIP: cuda %s: %s\n", name, gpu_unusable().c_str());          \
      std::fflush(stdout);                                                       \
      return;                                                                    \
    }                                                                            \
  } while (0)

// Relative error of got against want: max |got - want| / max(max |want|, 1e-6).
double rel_error(const Tensor& got, const Tensor& want) {
  const Tensor g = to_host(got), w = to_host(want);
  REQUIRE(g.numel() == w.numel());
  double diff = 0, scale = 1e-6;
  for (int64_t i = 0; i < g.numel(); ++i) {
    if (std::isnan(w[i]) != std::isnan(g[i])) return INFINITY;
    if (std::isnan(w[i])) continue;
    diff = std::max(diff, double(std::fabs(g[i] - w[i])));
    scale = std::max(scale, double(std::fabs(w[i])));
  }
  return diff / scale;
}

void expect_near(const std::string& what, const Tensor& got, const Tensor& want, double tol) {
  const double e = rel_error(got, want);
  INFO(what, ": relative error ", e, " > ", tol);
  CHECK(e <= tol);
}

double tolerance(Precision p) {
  switch (p) {
    case Precision::kFp32: return 1e-4;
    case Precision::kTf32: return 2e-2;
    case Precision::kFp16: return 3e-2;
    case Precision::kBf16: return 6e-2;
  }
  return 0;
}

Tensor on_gpu_copy(const Tensor& t) {
  Tensor d = Tensor::empty(t.shape(), Device::CUDA);
  d.copy_from(t);
  return d;
}

// A host copy that never shares memory with t (to_host returns a CPU tensor itself).
Tensor host_copy(const Tensor& t) {
  Tensor h = Tensor::empty(t.shape(), Device::CPU);
  h.copy_from(t);
  return h;
}

// Fills t (either device) with `value`: NaN makes a cell a kernel forgot to write fail the
// comparison (fresh GPU memory is often zero, as many CPU results are).
void fill(Tensor& t, float value) {
  Tensor h = Tensor::empty(t.shape(), Device::CPU);
  for (int64_t i = 0; i < h.numel(); ++i) h[i] = value;
  t.copy_from(h);
}

// How far the GPU may be from the CPU where the math itself amplifies rounding: kSpread times
// the distance between the CPU and the CPU fed inputs nudged by one ulp (`nudged`), or `tol`,
// whichever is larger (tests/README.md: the parity tests' measured spread, the same factor).
// Deep models on tiny maps in training mode are that ill-conditioned: BatchNorm over the two
// values of a 1x1 map, ReLU and max-pool decisions within rounding of their kink: torchvision's
// resnet34 on 2x3x32x32 in float32 is 2e-2 to 0.2 from its float64 logits, resnet50 about 0.5.
// With `reordered` (the CPU with another summation order: im2col instead of the direct
// kernels), the spread is the larger of the two distances.
constexpr double kSpread = 8;
void expect_near(const std::string& what, const Tensor& got, const Tensor& want,
                 const Tensor& nudged, double tol, const Tensor* reordered = nullptr) {
  const double spread = std::max(rel_error(nudged, want), reordered ? rel_error(*reordered, want) : 0.0);
  const double allowed = std::max(tol, kSpread * spread);
  const double e = rel_error(got, want);
  INFO(what, ": relative error ", e, " > ", allowed, " (the CPU's own spread ", spread, ")");
  CHECK(e <= allowed);
}

// Per-parameter comparison of two slabs laid out by `layout` (either device): each entry
// against its own largest value, so a small parameter's error is not hidden behind the slab's
// largest one. With `nudged` (a third slab), each entry's tolerance widens to its spread.
void expect_near_entries(const std::string& what, const ParamStore& layout, const Tensor& got,
                         const Tensor& want, double tol, const Tensor* nudged = nullptr,
                         const Tensor* reordered = nullptr) {
  Tensor g = to_host(got), w = to_host(want), u = nudged ? to_host(*nudged) : w,
         r = reordered ? to_host(*reordered) : w;
  for (const StateEntry& e : layout.entries()) {
    if (e.kind != StateKind::Param) continue;
    const int64_t n = e.shape.numel();
    const Tensor gv = Tensor::view(g.data() + e.offset, {n}), wv = Tensor::view(w.data() + e.offset, {n});
    const Tensor rv = Tensor::view(r.data() + e.offset, {n});
    if (nudged)
      expect_near(what + " " + e.name, gv, wv, Tensor::view(u.data() + e.offset, {n}), tol, reordered ? &rv : nullptr);
    else
      expect_near(what + " " + e.name, gv, wv, tol);
  }
}

// x with every element moved one ulp up: the rounding-sized change another summation order makes.
Tensor nudged_up(const Tensor& x) {
  Tensor y = host_copy(x);
  for (int64_t i = 0; i < y.numel(); ++i) y[i] = std::nextafter(y[i], INFINITY);
  return y;
}

// ---- the channels-last typed path -----------------------------------------------------------
// The activation format --gpu-layout nhwc gives under precision p.
Format nhwc_format(Precision p) { return Format{storage_elem(p), Order::NHWC}; }
// x as a GPU tensor in format f (rounded to its type on the host, as the GPU would).
Tensor to_gpu_as(const Tensor& x, Format f) {
  const Tensor h = convert_host(x, f);
  Tensor d = Tensor::empty(x.shape(), Device::CUDA, f);
  d.copy_from(h);
  return d;
}
// x's values after a round trip through f's element type: what the GPU path computes from.
Tensor rounded_to(const Tensor& x, Format f) { return convert_host(convert_host(x, f), Format{}); }
// A GPU tensor of any format against a plain CPU one.
void expect_near_typed(const std::string& what, const Tensor& got, const Tensor& want, double tol) {
  expect_near(what + " [" + format_name(got.format()) + "]", to_plain_host(got), want, tol);
}
// NaN in every element of a GPU tensor of any format (a cell a kernel forgot fails the check).
void fill_nan(Tensor& t) {
  Tensor h = Tensor::empty(t.shape());
  h.fill(NAN);
  t.copy_from(convert_host(h, t.format()));
}

// What the GPU side of a test plans with (core/exec.h): the tests' config (testing::exec())
// on CUDA in precision p, 4-D activations in f (plain, or the channels-last typed path's), and
// the GPU's opt-ins as the environment sets them (core/device.h's exec_overrides: fusion only
// with MPICNN_GPU_FUSION=1, folding with MPICNN_GPU_FOLD=1). A test about fusion, folding or
// deterministic algorithms sets that field itself.
ExecConfig gpu_exec(Precision p, Format f = {}) {
  static const ExecConfig base = [] {
    ExecConfig c = testing::exec();
    c.device = Device::CUDA;
    c.deterministic = false;
    return exec_overrides(c);
  }();
  ExecConfig c = base;
  c.precision = p;
  c.activations = f;
  return c;
}

// One layer kind, built twice with the same parameters (random, keyed by seed), run on both
// devices: forward output, input gradient and parameter gradients must agree. The GPU layer is
// planned with `gpu` (its precision; by default fp32, plain activations); the CPU layer with
// the tests' CPU config, in float32. With gpu.activations a typed format f (the channels-last
// typed path), the GPU layer is planned for 4-D activations in f and fed the CPU's inputs
// rounded to f's type, and is held against the CPU layer on those rounded inputs (the
// difference: f's rounding of each output, 16-bit weights in convolutions).
template <class L>
void check_unary(const std::string& what, const std::function<std::unique_ptr<L>()>& make,
                 const Shape& in_shape, double tol, bool training = true,
                 const ExecConfig& gpu = gpu_exec(Precision::kFp32)) {
  const Format f = gpu.activations;
  auto cpu = make(), dev = make();
  ParamStore sc, sg;
  cpu->register_state(sc, "l.");
  dev->register_state(sg, "l.");
  sc.allocate();
  sg.allocate();
  testing::fill_uniform(sc.values(), 11, -0.5f, 0.5f);
  testing::fill_uniform(sc.buffers(), 12, 0.5f, 1.5f);  // BN running stats: variance > 0
  sg.values().copy_from(sc.values());
  sg.buffers().copy_from(sc.buffers());
  sg.to(Device::CUDA);
  cpu->set_training(training);
  dev->set_training(training);
  cpu->plan(in_shape, testing::exec());
  dev->plan(in_shape, gpu);
  // The output's format: f when 4-D, else plain (Flatten).
  const Format out_format = gpu.format_for(cpu->output_shape(in_shape));
  // The planned batch, then one image less (convolutions make that shape's descriptors and
  // algorithms on first use, as the last batch of an evaluation does).
  for (const int64_t n : {in_shape[0], in_shape[0] - 1}) {
    if (n < 1) continue;
    Shape xs = in_shape;
    xs.d[0] = n;
    const std::string tag = what + (f.plain() ? "" : std::string(" [") + format_name(f) + "]") +
                            (n == in_shape[0] ? "" : " (batch " + std::to_string(n) + ")");
    const Shape out_shape = cpu->output_shape(xs);
    const Tensor x = rounded_to(testing::random_tensor(xs, 21), f);
    Tensor y = Tensor::empty(out_shape), yg = Tensor::empty(out_shape, Device::CUDA, out_format);
    fill(y, NAN);
    fill_nan(yg);
    const Tensor xg = to_gpu_as(x, f);
    cpu->forward(y, x);
    dev->forward(yg, xg);
    expect_near(tag + " forward", to_plain_host(yg), y, tol);
    const Tensor dy = rounded_to(testing::random_tensor(out_shape, 22), out_format);
    const Tensor dyg = to_gpu_as(dy, out_format);
    Tensor dx = Tensor::empty(xs), dxg = Tensor::empty(xs, Device::CUDA, f);
    fill(dx, NAN);
    fill_nan(dxg);
    // Parameter gradients accumulate ('+='): start both from the same non-zero value.
    fill(sc.grads(), 0.25f);
    fill(sg.grads(), 0.25f);
    cpu->backward(dx, dy, x, y);
    dev->backward(dxg, dyg, xg, yg);
    expect_near(tag + " backward (input)", to_plain_host(dxg), dx, tol);
    expect_near_entries(tag + " backward", sc, sg.grads(), sc.grads(), tol);
    expect_near(tag + " buffers", sg.buffers(), sc.buffers(), tol);
  }
}

// Cosine of the angle between two slabs (either device): gradients of a deep model in 16-bit
// differ element by element from float32's where ReLU and max-pool decisions flip, but point
// the same way.
double cosine(const Tensor& a, const Tensor& b) {
  const Tensor x = to_host(a), y = to_host(b);
  double xy = 0, xx = 0, yy = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    xy += double(x[i]) * double(y[i]);
    xx += double(x[i]) * double(x[i]);
    yy += double(y[i]) * double(y[i]);
  }
  return xy / std::sqrt(std::max(xx * yy, 1e-300));
}

}  // namespace

TEST_SUITE("cuda") {

TEST_CASE("cuda: every layer matches the CPU, forward and backward (fp32 and tf32)") {
  REQUIRE_GPU("layers");
  for (Precision p : {Precision::kFp32, Precision::kTf32}) {
    // The plan's precision: convolutions choose their algorithms per precision.
    const ExecConfig gpu = gpu_exec(p);
    const double tol = tolerance(p);
    const std::string tag = std::string(" [") + precision_name(p) + "]";
    using C = Conv2dOptions;
    const std::vector<std::pair<std::string, C>> convs = {
        {"conv 3x3 s1 p1 bias", C{.in_channels = 8, .out_channels = 16, .kernel = 3, .padding = 1}},
        {"conv 7x7 s2 p3", C{.in_channels = 3, .out_channels = 8, .kernel = 7, .stride = 2, .padding = 3, .bias = false}},
        {"conv 1x1", C{.in_channels = 16, .out_channels = 8, .kernel = 1, .bias = false}},
        {"conv grouped", C{.in_channels = 8, .out_channels = 8, .kernel = 3, .padding = 1, .groups = 4}},
        {"conv dilated 5x3", C{.in_channels = 4, .out_channels = 6, .kernel = {5, 3}, .stride = {2, 1}, .padding = {4, 2}, .dilation = 2}},
    };
    for (const auto& [name, o] : convs)
      check_unary<Conv2d>(
          name + tag, [o = o] { return std::make_unique<Conv2d>(o); },
          Shape{4, o.in_channels, 13, 11}, tol, true, gpu);
    check_unary<Linear>(
        "linear" + tag, [] { return std::make_unique<Linear>(40, 10); }, Shape{6, 40}, tol, true,
        gpu);
  }
  // The rest in fp32 (check_unary's default GPU config).
  const double tol = tolerance(Precision::kFp32);
  check_unary<BatchNorm2d>("batchnorm train", [] { return std::make_unique<BatchNorm2d>(6); }, Shape{4, 6, 9, 7}, tol);
  check_unary<BatchNorm2d>("batchnorm eval", [] { return std::make_unique<BatchNorm2d>(6); }, Shape{4, 6, 9, 7}, tol, false);
  // Shapes that split a channel's sums over several blocks (N * HW >= 4096; the second with a
  // plane that does not divide the blocks' step) and one past a 4096-channel chunk.
  for (const Shape& s : {Shape{8, 3, 32, 32}, Shape{5, 2, 37, 41}, Shape{2, 4100, 2, 2}}) {
    const int64_t c = s[1];
    check_unary<BatchNorm2d>("batchnorm train " + s.str(), [c] { return std::make_unique<BatchNorm2d>(c); }, s, tol);
    check_unary<BatchNorm2d>("batchnorm eval " + s.str(), [c] { return std::make_unique<BatchNorm2d>(c); }, s, tol, false);
  }
  check_unary<ReLU>("relu", [] { return std::make_unique<ReLU>(); }, Shape{3, 5, 7, 7}, 0);
  check_unary<MaxPool2d>("maxpool 3/2/1", [] { return std::make_unique<MaxPool2d>(3, 2, 1); }, Shape{2, 3, 11, 10}, 0);
  check_unary<MaxPool2d>("maxpool ceil dilated", [] {
    return std::make_unique<MaxPool2d>(MaxPool2dOptions{.kernel = {3, 2}, .stride = {2, 2}, .padding = {1, 1}, .dilation = {2, 1}, .ceil_mode = true});
  }, Shape{2, 3, 12, 9}, 0);
  check_unary<AvgPool2d>("avgpool ceil no-pad-count", [] {
    return std::make_unique<AvgPool2d>(AvgPool2dOptions{.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .ceil_mode = true, .count_include_pad = false});
  }, Shape{2, 3, 10, 9}, 1e-6);
  check_unary<AvgPool2d>("avgpool divisor", [] {
    return std::make_unique<AvgPool2d>(AvgPool2dOptions{.kernel = {2, 2}, .divisor_override = 3});
  }, Shape{2, 3, 8, 8}, 1e-6);
  check_unary<AdaptiveAvgPool2d>("adaptive 7->3", [] { return std::make_unique<AdaptiveAvgPool2d>(3); }, Shape{2, 4, 7, 7}, 1e-6);
  check_unary<AdaptiveAvgPool2d>("adaptive 3->5x1", [] { return std::make_unique<AdaptiveAvgPool2d>(5, 1); }, Shape{2, 4, 3, 6}, 1e-6);
  check_unary<Flatten>("flatten", [] { return std::make_unique<Flatten>(); }, Shape{3, 4, 5, 2}, 0);
  check_unary<Dropout>("dropout (same Philox mask)", [] {
    auto d = std::make_unique<Dropout>(0.3f);
    d->set_draw(7, 3, 100);
    return d;
  }, Shape{4, 3, 5, 5}, 0);
}

TEST_CASE("cuda: add, accumulate, concat and cross-entropy match the CPU") {
  REQUIRE_GPU("add/concat/loss");
  const Shape s{3, 4, 5, 5};
  const Tensor a = testing::random_tensor(s, 1), b = testing::random_tensor(s, 2);
  Tensor out = Tensor::empty(s), outg = Tensor::empty(s, Device::CUDA);
  Add add;
  add.forward(out, a, b);
  add.forward(outg, on_gpu_copy(a), on_gpu_copy(b));
  expect_near("add", outg, out, 0);
  Tensor acc = a, accg = on_gpu_copy(a);
  accumulate(acc, b);
  accumulate(accg, on_gpu_copy(b));
  expect_near("accumulate", accg, acc, 0);

  const Tensor c = testing::random_tensor({3, 2, 5, 5}, 3);
  Tensor cat = Tensor::empty({3, 6, 5, 5}), catg = Tensor::empty({3, 6, 5, 5}, Device::CUDA);
  Concat concat;
  concat.forward(cat, {&a, &c});
  const Tensor ag = on_gpu_copy(a), cg = on_gpu_copy(c);
  concat.forward(catg, {&ag, &cg});
  expect_near("concat", catg, cat, 0);
  Tensor da = Tensor::empty(s), dc = Tensor::empty({3, 2, 5, 5});
  Tensor dag = Tensor::empty(s, Device::CUDA), dcg = Tensor::empty({3, 2, 5, 5}, Device::CUDA);
  concat.backward({&da, &dc}, cat);
  concat.backward({&dag, &dcg}, catg);
  expect_near("concat backward a", dag, da, 0);
  expect_near("concat backward c", dcg, dc, 0);

  for (float eps : {0.f, 0.1f}) {
    SoftmaxCrossEntropy x(eps), xg(eps);
    x.plan(8, 10);
    xg.plan(8, 10, Device::CUDA);
    const Tensor logits = testing::random_tensor({5, 10}, 4, -4.f, 4.f);
    const int32_t labels[5] = {0, 9, 3, 3, 7};
    x.forward(logits, labels);
    xg.forward(on_gpu_copy(logits), labels);
    Tensor d = Tensor::empty({5, 10}), dg = Tensor::empty({5, 10}, Device::CUDA);
    x.backward(d, labels, 0.5f);
    xg.backward(dg, labels, 0.5f);  // queued before the loss is read, as in a training step
    const double l = x.loss(), lg = xg.loss();
    CHECK(std::fabs(l - lg) <= 1e-6 * std::max(1.0, std::fabs(l)));
    expect_near("softmax", xg.probabilities(), x.probabilities(), 1e-6);
    expect_near("cross-entropy backward", dg, d, 1e-6);
  }
}

// Each step compares one step's arithmetic, not a trajectory: the GPU model (and the CPU's
// stand-ins) start every step from the CPU model's weights and running statistics, so that
// rounding differences do not compound over the steps (after an SGD step on BatchNorm over the
// two values of a 1x1 map, whose input gradient is rounding noise, the trajectories part). The
// spread: the CPU fed one-ulp-nudged inputs, and the CPU on im2col (another summation order).
TEST_CASE("cuda: every model matches the CPU: forward, backward, 3 SGD steps (fp32, tf32)") {
  REQUIRE_GPU("models");
  ExecConfig im2col = testing::exec();
  im2col.conv = ConvAlgorithm::kIm2col;  // Conv2d::plan takes it from the config
  for (const ModelSpec& spec : model_specs()) {
    for (Precision p : {Precision::kFp32, Precision::kTf32}) {
      const double tol = 10 * tolerance(p);  // deep chains: errors compound layer by layer
      ModelOptions mo;
      mo.num_classes = 10;
      mo.in_channels = spec.name == "lenet" ? 1 : 3;
      mo.dropout = 0.f;  // the GPU draws the same masks, but 0 keeps the check about the math
      mo.aux_dropout = 0.f;
      // cpu, the GPU's model, a CPU copy fed one-ulp-nudged inputs and one on im2col.
      auto cpu = build_model(spec.name, mo, 5), dev = build_model(spec.name, mo, 5),
           nud = build_model(spec.name, mo, 5), alt = build_model(spec.name, mo, 5);
      dev->to(Device::CUDA);
      const int hw = std::max(spec.min_size, spec.name == "lenet" ? 28 : 32);
      const Shape in{2, mo.in_channels, hw, hw};
      cpu->plan(in, testing::exec());
      dev->plan(in, gpu_exec(p));
      nud->plan(in, testing::exec());
      alt->plan(in, im2col);
      Model* models[4] = {cpu.get(), dev.get(), nud.get(), alt.get()};
      const SgdOptions so{.lr = 0.01, .momentum = 0.9, .weight_decay = 1e-4};
      SGD opt[4] = {SGD(cpu->params(), so), SGD(dev->params(), so), SGD(nud->params(), so), SGD(alt->params(), so)};
      SoftmaxCrossEntropy xent[4];
      AuxLosses aux[4];  // Inception v3's and GoogLeNet's heads, as the trainer's step
      Tensor dl[4];
      for (int m = 0; m < 4; ++m) {
        const Device d = m == 1 ? Device::CUDA : Device::CPU;
        xent[m].plan(2, 10, d);
        aux[m].plan(*models[m], 2, 0.f, d);
        dl[m] = Tensor::empty({2, 10}, d);
      }
      const int32_t labels[2] = {1, 7};
      const std::string tag = spec.name + " [" + precision_name(p) + "]";
      for (int step = 0; step < 3; ++step) {
        for (int m = 1; m < 4; ++m) {  // this step from the CPU model's state
          models[m]->params().values().copy_from(cpu->params().values());
          models[m]->params().buffers().copy_from(cpu->params().buffers());
        }
        const Tensor x = testing::random_tensor(in, 100 + uint64_t(step));
        const Tensor inputs[4] = {x, on_gpu_copy(x), nudged_up(x), x};
        const Tensor* y[4];
        for (int m = 0; m < 4; ++m) y[m] = &models[m]->forward(inputs[m]);
        expect_near(tag + " logits, step " + std::to_string(step), *y[1], *y[0], *y[2], tol, y[3]);
        for (int m = 0; m < 4; ++m) {
          xent[m].forward(*y[m], labels);
          aux[m].forward(*models[m], labels);
          xent[m].backward(dl[m], labels);
          models[m]->params().zero_grad();
          models[m]->backward(dl[m], aux[m].backward(labels, 1.f));
        }
        const double l = aux[0].weighted_loss();
        const double spread = std::max(std::fabs(l - aux[2].weighted_loss()), std::fabs(l - aux[3].weighted_loss()));
        CHECK(std::fabs(l - aux[1].weighted_loss()) <= std::max(tol, kSpread * spread) * (1 + l));
        const std::string at = ", step " + std::to_string(step + 1);
        expect_near_entries(tag + " gradient" + at, cpu->params(), dev->params().grads(), cpu->params().grads(), tol,
                            &nud->params().grads(), &alt->params().grads());
        // The update itself (weights after minus before), per parameter: next to the weights
        // it is small enough to hide a wrong or missing step.
        Tensor update[4];
        for (int m = 0; m < 4; ++m) {
          const Tensor before = host_copy(models[m]->params().values());
          opt[m].step();
          update[m] = host_copy(models[m]->params().values());
          for (int64_t i = 0; i < before.numel(); ++i) update[m][i] -= before[i];
        }
        expect_near_entries(tag + " update" + at, cpu->params(), update[1], update[0], tol, &update[2], &update[3]);
        expect_near(tag + " BatchNorm running stats" + at, dev->params().buffers(), cpu->params().buffers(),
                    nud->params().buffers(), tol, &alt->params().buffers());
      }
      // Evaluation mode on a batch below the planned one, as evaluate() and Predictor run it.
      for (int m = 0; m < 4; ++m) {
        if (m > 0) models[m]->params().values().copy_from(cpu->params().values());
        if (m > 0) models[m]->params().buffers().copy_from(cpu->params().buffers());
        models[m]->set_training(false);
      }
      const Tensor x1 = testing::random_tensor({1, in[1], in[2], in[3]}, 200);
      const Tensor& ec = cpu->forward(x1);
      const Tensor x1n = nudged_up(x1);
      const Tensor& en = nud->forward(x1n);
      const Tensor& ea = alt->forward(x1);
      expect_near(tag + " eval logits, batch 1", dev->forward(on_gpu_copy(x1)), ec, en, tol, &ea);
    }
  }
}

TEST_CASE("cuda: BatchNorm fused with its ReLU and the residual add gives the unfused bits") {
  REQUIRE_GPU("fusion");
  // A training step, then an evaluation forward (an inference plan, as pipeline_eval's; a GPU
  // model plans it as for training), of models with BatchNorm-ReLU pairs in a Sequential,
  // residual blocks (BasicBlock, Bottleneck) and dense blocks, in fp32: unfused, then fused
  // (ExecConfig::fusion, on the GPU opt-in with MPICNN_GPU_FUSION=1; set here both ways).
  for (const std::string name : {"resnet18", "resnet50", "densenet121"}) {
    const int hw = std::max(32, model_spec(name).min_size);
    std::vector<Tensor> got[2];  // logits, gradients, running stats, eval logits
    for (int fused = 0; fused < 2; ++fused) {
      ExecConfig cfg = gpu_exec(Precision::kFp32);
      cfg.fusion = fused == 1;
      ModelOptions mo;
      mo.num_classes = 10;
      auto m = build_model(name, mo, 5);
      m->to(Device::CUDA);
      m->plan({2, 3, hw, hw}, cfg);
      m->set_training(true);
      const Tensor x = on_gpu_copy(testing::random_tensor({2, 3, hw, hw}, 11));
      const Tensor dl = on_gpu_copy(testing::random_tensor({2, 10}, 12));
      m->params().zero_grad();
      got[fused].push_back(host_copy(m->forward(x)));
      m->backward(dl);
      got[fused].push_back(host_copy(m->params().grads()));
      got[fused].push_back(host_copy(m->params().buffers()));
      auto e = build_model(name, mo, 5);
      e->to(Device::CUDA);
      e->plan({2, 3, hw, hw}, cfg.for_inference());
      e->set_training(false);
      got[fused].push_back(host_copy(e->forward(x)));
    }
    const char* what[] = {"logits", "gradients", "running stats", "eval logits"};
    for (size_t i = 0; i < got[0].size(); ++i) {
      INFO(name, " ", what[i]);
      REQUIRE(got[0][i].numel() == got[1][i].numel());
      CHECK(std::memcmp(got[0][i].data(), got[1][i].data(),
                        size_t(got[0][i].numel()) * sizeof(real)) == 0);
    }
  }
}

// Folded inference (layers/fold.h; ExecConfig::fold, opt-in MPICNN_GPU_FOLD). One FoldedConv
// against the CPU's Conv2d then eval BatchNorm2d (then ReLU, or + residual then ReLU), with and
// without a conv bias, at the planned batch and one image less, into an output filled with NaN
// (cuDNN must not read it when there is no residual). Then resnet18 in eval mode (a pipeline_eval
// plan), folded against unfolded on the same GPU, in fp32 and tf32, with random BatchNorm
// parameters and statistics (else the fold is the identity); its own weights unchanged by folding;
// back in training mode (forward: the unfolded model's bits; backward); evaluated again after a
// training forward moved the running statistics (the fold follows), and after new weights were
// loaded in eval mode. Tolerances: one layer, the layer tolerance of the precision (the fold moves
// each output by a few roundings, tests/test_fold.cpp's bound); the model, 10x that, as the model
// test above (deep chains compound them).
// A Conv2d (5 -> 6 channels, 3x3) and an eval-mode BatchNorm2d after it, with the same random
// parameters and statistics (BN gammas of both signs) wherever it is built.
struct ConvBn {
  Conv2d conv;
  BatchNorm2d bn{6};
  ParamStore store;
  explicit ConvBn(bool bias)
      : conv(Conv2dOptions{.in_channels = 5, .out_channels = 6, .kernel = 3, .padding = 1,
                           .bias = bias}) {
    conv.register_state(store, "conv.");
    bn.register_state(store, "bn.");
    store.allocate();
    testing::fill_uniform(store.values(), 11, -0.5f, 0.5f);
    testing::fill_uniform(store.buffers(), 12, 0.05f, 1.5f);  // means; variances > 0
    bn.set_training(false);
  }
};

// FoldedConv on the GPU, planned with `gpu` (its precision; activations in f = gpu.activations:
// plain, or channels-last typed), against the CPU's convolution then BatchNorm (then + residual,
// then ReLU) on the same inputs rounded to f's type: with and without a convolution bias, each
// epilogue, the planned batch and one less.
void check_folded_conv(const ExecConfig& gpu, double tol) {
  const Format f = gpu.activations;
  const Shape xs{3, 5, 8, 8}, ys{3, 6, 8, 8};
  for (const bool bias : {false, true}) {
    for (int mode = 0; mode < 3; ++mode) {  // plain, + ReLU, + residual + ReLU
      ConvBn cpu(bias), dev(bias);
      dev.store.to(Device::CUDA);
      cpu.conv.plan(xs, testing::exec());
      cpu.bn.plan(ys, testing::exec());
      FoldedConv fold;
      dev.conv.plan(xs, gpu);
      dev.bn.plan(ys, gpu);
      fold.plan(dev.conv, dev.bn);
      fold.refresh();
      for (const int64_t n : {xs[0], xs[0] - 1}) {
        const std::string tag = std::string("FoldedConv [") + format_name(f) + "] " +
                                (bias ? "with bias" : "no bias") +
                                (mode == 0 ? "" : mode == 1 ? ", ReLU" : ", residual + ReLU") +
                                ", batch " + std::to_string(n);
        Shape xn = xs, yn = ys;
        xn.d[0] = yn.d[0] = n;
        const Tensor x = rounded_to(testing::random_tensor(xn, 21), f);
        const Tensor r = rounded_to(testing::random_tensor(yn, 22), f);
        Tensor c = Tensor::empty(yn), want = Tensor::empty(yn);
        cpu.conv.forward(c, x);
        cpu.bn.set_fused_relu(mode == 1);
        if (mode == 2) cpu.bn.forward(want, c, r);  // relu(bn(c) + r)
        else cpu.bn.forward(want, c);
        Tensor got = Tensor::empty(yn, Device::CUDA, f);
        fill_nan(got);
        const Tensor rg = to_gpu_as(r, f);
        fold.forward(got, to_gpu_as(x, f), mode == 2 ? &rg : nullptr, mode > 0);
        expect_near(tag, to_plain_host(got), want, tol);
      }
    }
  }
}

TEST_CASE("cuda: folded inference equals conv then BatchNorm, and resnet18's unfolded eval") {
  REQUIRE_GPU("folded inference");
  check_folded_conv(gpu_exec(Precision::kFp32), tolerance(Precision::kFp32));

  ModelOptions mo;
  mo.num_classes = 10;
  const Shape in{4, 3, 64, 64};
  const Tensor x = on_gpu_copy(testing::random_tensor(in, 11));
  const Tensor x3 = x.slice0(0, 3);
  testing::TempDir dir;
  for (const Precision p : {Precision::kFp32, Precision::kTf32}) {
    // Deterministic algorithms: the same ones in both models. An inference plan (a
    // pipeline_eval plan), folded or not as each model says.
    ExecConfig cfg = gpu_exec(p).for_inference();
    cfg.deterministic = true;
    const double tol = 10 * tolerance(p);
    const std::string prec = std::string(" [") + precision_name(p) + "]";
    auto make = [&](bool fold) {
      auto m = build_model("resnet18", mo, 5);
      m->root().for_each_layer([](Layer& l, const std::string&) {
        if (auto* bn = dynamic_cast<BatchNorm2d*>(&l)) {
          testing::fill_uniform(bn->weight, 13, 0.5f, 1.5f);
          testing::fill_uniform(bn->bias, 14, -0.2f, 0.2f);
          testing::fill_uniform(bn->running_mean, 15, -0.2f, 0.2f);
          testing::fill_uniform(bn->running_var, 16, 0.5f, 1.5f);
        }
      });
      m->to(Device::CUDA);
      m->set_training(false);
      ExecConfig c = cfg;
      c.fold = fold;  // taken when the model plans
      m->plan(in, c);
      return m;
    };
    auto plain = make(false), folded = make(true);
    const Tensor values = host_copy(folded->params().values());
    const Tensor buffers = host_copy(folded->params().buffers());
    expect_near("resnet18 folded eval logits" + prec, folded->forward(x), plain->forward(x), tol);
    expect_near("resnet18 folded eval logits, batch 3" + prec, folded->forward(x3),
                plain->forward(x3), tol);
    // The fold wrote its own copy: the model's weights and statistics (its checkpoint) are as
    // they were, bit for bit.
    const auto same = [](const Tensor& a, const Tensor& b) {
      return a.numel() == b.numel() &&
             std::memcmp(a.data(), b.data(), size_t(a.numel()) * sizeof(real)) == 0;
    };
    CHECK(same(host_copy(folded->params().values()), values));
    CHECK(same(host_copy(folded->params().buffers()), buffers));

    // Back to training: the unfolded layers, the same bits as the model that never folded
    // (deterministic algorithms: both planned the same ones), and a backward is allowed again.
    plain->set_training(true);
    folded->set_training(true);
    CHECK(same(host_copy(folded->forward(x)), host_copy(plain->forward(x))));
    folded->params().zero_grad();
    folded->backward(on_gpu_copy(testing::random_tensor({4, 10}, 12)));
    // The training forward moved the running statistics: entering eval mode folds them anew.
    plain->set_training(false);
    folded->set_training(false);
    expect_near("resnet18 folded eval logits after a training forward" + prec,
                folded->forward(x), plain->forward(x), tol);
    // New weights loaded in eval mode are folded anew too (Model::load_state_dict).
    Tensor scaled = host_copy(plain->params().values());
    for (int64_t i = 0; i < scaled.numel(); ++i) scaled[i] *= 0.9f;
    plain->params().values().copy_from(scaled);
    plain->save_state_dict(dir / "scaled.safetensors");
    folded->load_state_dict(dir / "scaled.safetensors");
    expect_near("resnet18 folded eval logits after loading weights" + prec, folded->forward(x),
                plain->forward(x), tol);
  }
}

// The channels-last typed path folded: FoldedConv in each type against the CPU, and resnet18's
// folded eval logits against its unfolded ones on the same path (where BatchNorm runs as its
// own NHWC kernel after each convolution).
TEST_CASE("cuda: folded inference on the channels-last typed path") {
  REQUIRE_GPU("folded inference nhwc");
  ModelOptions mo;
  mo.num_classes = 10;
  const Shape in{4, 3, 64, 64};
  for (const Precision p : {Precision::kTf32, Precision::kBf16, Precision::kFp16}) {
    const Format f = nhwc_format(p);
    check_folded_conv(gpu_exec(p, f), tolerance(p));
    // The models' inference plan on the typed path: precision p, 4-D activations in f.
    const ExecConfig cfg = gpu_exec(p, f).for_inference();
    auto make = [&](bool fold) {
      auto m = build_model("resnet18", mo, 5);
      m->root().for_each_layer([](Layer& l, const std::string&) {
        if (auto* bn = dynamic_cast<BatchNorm2d*>(&l)) {
          testing::fill_uniform(bn->running_mean, 15, -0.2f, 0.2f);
          testing::fill_uniform(bn->running_var, 16, 0.5f, 1.5f);
        }
      });
      m->to(Device::CUDA);
      m->set_training(false);
      ExecConfig c = cfg;
      c.fold = fold;
      m->plan(in, c);
      return m;
    };
    auto plain = make(false), folded = make(true);
    const Tensor x = to_gpu_as(testing::random_tensor(in, 11), f);
    expect_near(std::string("resnet18 folded eval logits [") + format_name(f) + "]",
                folded->forward(x), plain->forward(x), 10 * tolerance(p));
  }
}

// conv_plan searches each distinct convolution once per process: ResNet-50's 53 convolutions
// take fewer searches than convolutions, and a second model of the same shapes takes none.
TEST_CASE("cuda: a convolution shape is searched once per process") {
  REQUIRE_GPU("conv plan cache");
  const ExecConfig cfg = gpu_exec(Precision::kTf32);
  ModelOptions mo;
  mo.num_classes = 10;
  const Shape in{3, 3, 72, 72};  // a batch and size no other test plans ResNet-50 at
  gpu::Backend& g = gpu::backend();
  auto planned = [&] {
    auto m = build_model("resnet50", mo, 5);
    m->to(Device::CUDA);
    m->plan(in, cfg);
    return m;
  };
  const int64_t before = g.conv_searches();
  auto a = planned();
  const int64_t first = g.conv_searches() - before;
  int convs = 0;
  a->root().for_each_layer([&](Layer& l, const std::string&) { convs += dynamic_cast<Conv2d*>(&l) != nullptr; });
  INFO("searches ", first, " for ", convs, " convolutions");
  CHECK(first > 0);
  CHECK(first < convs);
  auto b = planned();
  CHECK(g.conv_searches() - before == first);
  // The reused choices run: the second model's logits equal the first's (same weights).
  const Tensor x = on_gpu_copy(testing::random_tensor(in, 3));
  a->set_training(false);
  b->set_training(false);
  expect_near("resnet50 on reused convolution plans", b->forward(x), a->forward(x), 0);
}

TEST_CASE("cuda: resnet18 in fp16 and bf16 stays near fp32") {
  REQUIRE_GPU("resnet18 fp16/bf16");
  ModelOptions mo;
  mo.num_classes = 10;
  auto cpu = build_model("resnet18", mo, 5);
  cpu->plan({2, 3, 32, 32}, testing::exec());
  const Tensor x = testing::random_tensor({2, 3, 32, 32}, 9);
  const Tensor want = cpu->forward(x);
  for (Precision p : {Precision::kFp16, Precision::kBf16}) {
    auto dev = build_model("resnet18", mo, 5);
    dev->to(Device::CUDA);
    dev->plan({2, 3, 32, 32}, gpu_exec(p));
    expect_near(std::string("resnet18 logits [") + precision_name(p) + "]",
                dev->forward(on_gpu_copy(x)), want, 10 * tolerance(p));
  }
}

TEST_CASE("cuda: fused SGD and AdamW over the slab match the CPU bit for bit") {
  REQUIRE_GPU("optimizers");
  auto model_pair = [] {
    ModelOptions mo;
    mo.num_classes = 10;
    mo.in_channels = 1;
    return std::pair{build_model("lenet", mo, 3), build_model("lenet", mo, 3)};
  };
  for (int which = 0; which < 3; ++which) {
    auto [c, g] = model_pair();
    g->to(Device::CUDA);
    std::unique_ptr<Optimizer> oc, og;
    if (which == 0) {
      oc = std::make_unique<SGD>(c->params(), SgdOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-3, .nesterov = true});
      og = std::make_unique<SGD>(g->params(), SgdOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-3, .nesterov = true});
    } else {
      AdamWOptions a{.lr = 1e-3, .weight_decay = 0.05, .amsgrad = which == 2};
      oc = std::make_unique<AdamW>(c->params(), a);
      og = std::make_unique<AdamW>(g->params(), a);
    }
    for (int step = 0; step < 3; ++step) {
      testing::fill_uniform(c->params().grads(), 50 + uint64_t(step));
      g->params().grads().copy_from(c->params().grads());
      oc->step();
      og->step();
    }
    expect_near(std::string(oc->name()) + (which == 2 ? " amsgrad" : ""), g->params().values(),
                c->params().values(), 0);
  }
}

TEST_CASE("cuda: a training step allocates no device memory") {
  REQUIRE_GPU("step allocation");
  ModelOptions mo;
  mo.num_classes = 10;
  auto m = build_model("resnet18", mo, 1);
  m->to(Device::CUDA);
  m->plan({4, 3, 32, 32}, gpu_exec(Precision::kFp32));
  SGD opt(m->params(), {.lr = 0.1, .momentum = 0.9});
  SoftmaxCrossEntropy xent;
  xent.plan(4, 10, Device::CUDA);
  const Tensor x = on_gpu_copy(testing::random_tensor({4, 3, 32, 32}, 1));
  Tensor dl = Tensor::empty({4, 10}, Device::CUDA);
  const int32_t labels[4] = {1, 2, 3, 4};
  auto step = [&] {
    xent.forward(m->forward(x), labels);
    xent.backward(dl, labels);
    m->params().zero_grad();
    m->backward(dl);
    opt.step();
  };
  step();  // first touch
  const int64_t before = gpu::backend().allocation_count();
  const int64_t host_before = host_allocation_count();
  step();
  step();
  gpu::backend().synchronize();
  CHECK(gpu::backend().allocation_count() == before);
  CHECK(host_allocation_count() == host_before);
}

TEST_CASE("cuda: the per-layer profile times every layer's forward and backward on the GPU") {
  REQUIRE_GPU("profile");
  ModelOptions mo;
  mo.num_classes = 10;
  auto m = build_model("resnet20", mo, 3);
  m->to(Device::CUDA);
  m->plan({8, 3, 32, 32}, gpu_exec(Precision::kFp32));
  m->set_training(true);
  const Tensor x = on_gpu_copy(testing::random_tensor({8, 3, 32, 32}, 8));
  const Tensor dl = on_gpu_copy(testing::random_tensor({8, 10}, 9));
  m->forward(x);  // first touch, not profiled
  gpu::backend().synchronize();
  profile::reset();
  profile::set_enabled(true, /*gpu=*/true);
  Timer wall;
  m->params().zero_grad();
  m->forward(x);
  m->backward(dl);
  gpu::backend().synchronize();
  const double wall_s = wall.seconds();
  profile::set_enabled(false);
  const std::vector<profile::Row> rows = profile::rows();
  testing::check_profile_rows(rows, *m);
  double total_s = 0;
  for (const profile::Row& r : rows) {
    INFO(r.name);
    // Every convolution's kernels take GPU time both ways.
    if (r.kind == "Conv2d") CHECK((r.forward_s > 0 && r.backward_s > 0));
    total_s += r.forward_s + r.backward_s;
  }
  // The layers' GPU times lie within the step (they do not overlap: one stream).
  CHECK(total_s > 0);
  CHECK(total_s <= wall_s);
  profile::reset();
}

TEST_CASE("cuda: uint8 -> float normalisation with flips matches the formula") {
  REQUIRE_GPU("normalize_u8");
  const int N = 2, C = 3, H = 4, W = 5;
  std::vector<uint8_t> pix(size_t(N * H * W * C));
  for (size_t i = 0; i < pix.size(); ++i) pix[i] = uint8_t((i * 37 + 11) % 256);
  const float mean[3] = {0.485f, 0.456f, 0.406f}, stdv[3] = {0.229f, 0.224f, 0.225f};
  const uint8_t flip[2] = {0, 1};
  gpu::Backend& g = gpu::backend();
  auto in = g.alloc(pix.size()), fl = g.alloc(2);
  g.copy(in.get(), true, pix.data(), false, pix.size());
  g.copy(fl.get(), true, flip, false, 2);
  Tensor out = Tensor::empty({N, C, H, W}, Device::CUDA);
  g.normalize_u8(Format{}, out.raw(), static_cast<uint8_t*>(in.get()), static_cast<uint8_t*>(fl.get()), N, C, H, W, mean, stdv);
  const Tensor h = to_host(out);
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c)
      for (int y = 0; y < H; ++y)
        for (int x = 0; x < W; ++x) {
          const int sx = flip[n] ? W - 1 - x : x;
          const float v = (float(pix[size_t(((n * H + y) * W + sx) * C + c)]) / 255.0f - mean[c]) / stdv[c];
          CHECK(h[((n * C + c) * H + y) * W + x] == v);
        }
}

TEST_CASE("cuda: an 8-bit training batch normalised on the GPU equals the CPU transform") {
  REQUIRE_GPU("input stage");
  // What the trainer does on a GPU: the loader's windows and flips, InputStage::put_u8.
  // Five batches in a row, of two sizes, the loader's buffer rewritten for each: the stage's
  // two page-locked copies are each reused, and an upload never reads the next batch's bytes.
  const data::Transform tf(testing::imagenet_train(9, 40));
  InputStage stage(Device::CUDA, 8, Shape{3, 40, 40});
  std::vector<uint8_t> pixels(size_t(8) * tf.output_numel());
  for (int round = 0; round < 5; ++round) {
    const int N = round % 2 ? 8 : 6;
    std::vector<uint8_t> flips(static_cast<size_t>(N));
    Tensor want = Tensor::empty(Shape{N, 3, 40, 40});
    for (int n = 0; n < N; ++n) {
      data::Image img(50 + 7 * n, 64, n % 2 ? 3 : 1);  // gray ones are replicated to 3 channels
      for (size_t i = 0; i < img.pixels.size(); ++i)
        img.pixels[i] = uint8_t((i * 31 + size_t(n) * 17 + size_t(round) * 101) % 256);
      const uint64_t key = uint64_t(n + 10 * round);
      flips[size_t(n)] = tf.window(pixels.data() + size_t(n) * tf.output_numel(), img, 1, key);
      tf.apply(want.data() + int64_t(n) * int64_t(tf.output_numel()), img, 1, key);
    }
    const Tensor got_dev = stage.put_u8(pixels.data(), flips, tf.mean(), tf.stddev());
    std::fill(pixels.begin(), pixels.end(), uint8_t(0));  // the loader reuses its buffer at once
    const Tensor got = to_host(got_dev);
    REQUIRE(got.shape() == want.shape());
    INFO("batch ", round + 1);
    CHECK(std::memcmp(got.data(), want.data(), size_t(want.numel()) * sizeof(float)) == 0);
    if (round == 0) {
      const Tensor again = to_host(stage.put(want));  // the float path: one copy up
      CHECK(std::memcmp(again.data(), want.data(), size_t(want.numel()) * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("cuda: channels-last conversions give the host's bits, and add into float32") {
  REQUIRE_GPU("nhwc convert");
  const Shape s{3, 5, 7, 6};
  const Tensor x = testing::random_tensor(s, 31, -70000.f, 70000.f);
  const Tensor xg = on_gpu_copy(x);
  gpu::Backend& g = gpu::backend();
  for (Precision p : {Precision::kTf32, Precision::kBf16, Precision::kFp16}) {
    const Format f = nhwc_format(p);
    Tensor t = Tensor::empty(s, Device::CUDA, f);
    g.convert(t.raw(), f, xg.data(), Format{}, 3, 5, 7, 6, false);
    const Tensor want = convert_host(x, f), got = to_host(t);
    CHECK(std::memcmp(got.raw(), want.raw(), want.bytes()) == 0);
    // Back, added into a float32 NCHW tensor: y + widen(t).
    Tensor acc = on_gpu_copy(x);
    g.convert(acc.data(), Format{}, t.raw(), f, 3, 5, 7, 6, true);
    const Tensor w = convert_host(want, Format{}), a = to_host(acc);
    int wrong = 0;
    for (int64_t i = 0; i < x.numel(); ++i) wrong += a[i] != x[i] + w[i];
    CHECK(wrong == 0);
    // Typed elementwise: add, accumulate, ReLU forward and backward against the float math
    // rounded once.
    const Tensor b = rounded_to(testing::random_tensor(s, 32), f), bg = to_gpu_as(b, f);
    const Tensor xr = rounded_to(x, f);
    Tensor sum = Tensor::empty(s, Device::CUDA, f);
    g.add(f.elem, sum.raw(), t.raw(), bg.raw(), x.numel());
    Tensor sum_want = Tensor::empty(s);
    for (int64_t i = 0; i < x.numel(); ++i) sum_want[i] = xr[i] + b[i];
    sum_want = convert_host(rounded_to(sum_want, Format{f.elem, Order::NCHW}), Format{});
    CHECK(rel_error(to_plain_host(sum), sum_want) == 0);
  }
}

TEST_CASE("cuda: the 8-bit input stage writes NHWC in the precision's type") {
  REQUIRE_GPU("nhwc input");
  const int N = 2, C = 3, H = 4, W = 5;
  std::vector<uint8_t> pix(size_t(N * H * W * C));
  for (size_t i = 0; i < pix.size(); ++i) pix[i] = uint8_t((i * 37 + 11) % 256);
  const std::vector<float> mean = {0.485f, 0.456f, 0.406f}, stdv = {0.229f, 0.224f, 0.225f};
  const std::vector<uint8_t> flips = {0, 1};
  InputStage plain(Device::CUDA, N, Shape{C, H, W});
  const Tensor want = to_host(plain.put_u8(pix.data(), flips, mean, stdv));
  for (Precision p : {Precision::kTf32, Precision::kBf16, Precision::kFp16}) {
    const Format f = nhwc_format(p);
    InputStage typed(Device::CUDA, N, Shape{C, H, W}, f);
    const Tensor got = to_host(typed.put_u8(pix.data(), flips, mean, stdv));
    CHECK(got.format() == f);
    const Tensor w = convert_host(want, f);
    CHECK(std::memcmp(got.raw(), w.raw(), w.bytes()) == 0);
    const Tensor again = to_host(typed.put(want));  // the float path: up, then converted
    CHECK(std::memcmp(again.raw(), w.raw(), w.bytes()) == 0);
  }
}

TEST_CASE("cuda: every layer of the channels-last typed path matches the CPU") {
  REQUIRE_GPU("nhwc layers");
  for (Precision p : {Precision::kTf32, Precision::kBf16, Precision::kFp16}) {
    const Format f = nhwc_format(p);
    const ExecConfig gpu = gpu_exec(p, f);  // precision p, 4-D activations in f
    const double tol = tolerance(p);
    using C = Conv2dOptions;
    const std::vector<std::pair<std::string, C>> convs = {
        {"conv 3x3 s1 p1 bias", C{.in_channels = 8, .out_channels = 16, .kernel = 3, .padding = 1}},
        {"conv 7x7 s2 p3 (3 channels)", C{.in_channels = 3, .out_channels = 8, .kernel = 7, .stride = 2, .padding = 3, .bias = false}},
        {"conv 1x1", C{.in_channels = 16, .out_channels = 8, .kernel = 1, .bias = false}},
        {"conv 1x1 s2", C{.in_channels = 16, .out_channels = 32, .kernel = 1, .stride = 2, .bias = false}},
        {"conv grouped", C{.in_channels = 8, .out_channels = 8, .kernel = 3, .padding = 1, .groups = 4}},
        // 40 channels: two blocks of 32 for the bias sums; 572 rows: three chunks of them.
        {"conv 1x1 bias, 40 channels", C{.in_channels = 8, .out_channels = 40, .kernel = 1}},
    };
    for (const auto& [name, o] : convs)
      check_unary<Conv2d>(
          name, [o = o] { return std::make_unique<Conv2d>(o); }, Shape{4, o.in_channels, 13, 11},
          tol, true, gpu);
    for (const Shape& s : {Shape{4, 6, 9, 7}, Shape{8, 3, 32, 32}, Shape{5, 2, 37, 41}, Shape{2, 4100, 2, 2}}) {
      const int64_t c = s[1];
      check_unary<BatchNorm2d>(
          "batchnorm train " + s.str(), [c] { return std::make_unique<BatchNorm2d>(c); }, s, tol,
          true, gpu);
      check_unary<BatchNorm2d>(
          "batchnorm eval " + s.str(), [c] { return std::make_unique<BatchNorm2d>(c); }, s, tol,
          false, gpu);
    }
    check_unary<ReLU>(
        "relu", [] { return std::make_unique<ReLU>(); }, Shape{3, 5, 7, 7}, tol, true, gpu);
    check_unary<MaxPool2d>(
        "maxpool 3/2/1", [] { return std::make_unique<MaxPool2d>(3, 2, 1); }, Shape{2, 3, 11, 10},
        tol, true, gpu);
    check_unary<MaxPool2d>(
        "maxpool ceil dilated",
        [] {
          return std::make_unique<MaxPool2d>(MaxPool2dOptions{.kernel = {3, 2},
                                                              .stride = {2, 2},
                                                              .padding = {1, 1},
                                                              .dilation = {2, 1},
                                                              .ceil_mode = true});
        },
        Shape{2, 3, 12, 9}, tol, true, gpu);
    check_unary<AvgPool2d>(
        "avgpool 3/1/1 (Inception's branch pool)",
        [] {
          return std::make_unique<AvgPool2d>(
              AvgPool2dOptions{.kernel = {3, 3}, .stride = {1, 1}, .padding = {1, 1}});
        },
        Shape{2, 5, 9, 8}, tol, true, gpu);
    check_unary<AvgPool2d>(
        "avgpool ceil no-pad-count",
        [] {
          return std::make_unique<AvgPool2d>(AvgPool2dOptions{.kernel = {3, 2},
                                                              .stride = {2, 2},
                                                              .padding = {1, 1},
                                                              .ceil_mode = true,
                                                              .count_include_pad = false});
        },
        Shape{2, 3, 11, 10}, tol, true, gpu);
    check_unary<AvgPool2d>(
        "avgpool divisor",
        [] {
          return std::make_unique<AvgPool2d>(
              AvgPool2dOptions{.kernel = {2, 2}, .stride = {2, 2}, .divisor_override = 3});
        },
        Shape{2, 6, 8, 8}, tol, true, gpu);
    check_unary<AdaptiveAvgPool2d>(
        "adaptive 7->1", [] { return std::make_unique<AdaptiveAvgPool2d>(1); }, Shape{2, 64, 7, 7},
        tol, true, gpu);
    check_unary<AdaptiveAvgPool2d>(
        "adaptive 7->3", [] { return std::make_unique<AdaptiveAvgPool2d>(3); }, Shape{2, 4, 7, 7},
        tol, true, gpu);
    check_unary<Flatten>(
        "flatten 1x1", [] { return std::make_unique<Flatten>(); }, Shape{3, 40, 1, 1}, tol, true,
        gpu);
    check_unary<Flatten>(
        "flatten 3x2 (NCHW order out)", [] { return std::make_unique<Flatten>(); },
        Shape{3, 4, 3, 2}, tol, true, gpu);
    check_unary<Dropout>(
        "dropout (the CPU's mask by NCHW index)",
        [] {
          auto d = std::make_unique<Dropout>(0.3f);
          d->set_draw(7, 3, 100);
          return d;
        },
        Shape{4, 3, 5, 5}, tol, true, gpu);
    {  // Concat of three parts along the channels, and its backward
      const Shape sa{3, 4, 5, 5}, sb{3, 2, 5, 5}, sc{3, 6, 5, 5}, so{3, 12, 5, 5};
      const Tensor a = rounded_to(testing::random_tensor(sa, 51), f), b = rounded_to(testing::random_tensor(sb, 52), f),
                   c = rounded_to(testing::random_tensor(sc, 53), f);
      Tensor out = Tensor::empty(so), outg = Tensor::empty(so, Device::CUDA, f);
      Concat concat;
      concat.forward(out, {&a, &b, &c});
      const Tensor ag = to_gpu_as(a, f), bg = to_gpu_as(b, f), cg = to_gpu_as(c, f);
      concat.forward(outg, {&ag, &bg, &cg});
      expect_near_typed("concat", outg, out, 0);
      Tensor da = Tensor::empty(sa), db = Tensor::empty(sb), dc = Tensor::empty(sc);
      Tensor dag = Tensor::empty(sa, Device::CUDA, f), dbg = Tensor::empty(sb, Device::CUDA, f),
             dcg = Tensor::empty(sc, Device::CUDA, f);
      concat.backward({&da, &db, &dc}, out);
      concat.backward({&dag, &dbg, &dcg}, outg);
      expect_near_typed("concat backward a", dag, da, 0);
      expect_near_typed("concat backward b", dbg, db, 0);
      expect_near_typed("concat backward c", dcg, dc, 0);
    }
    // BatchNorm fused with the residual add and the ReLU (a residual block's last), both ways.
    const Shape s{4, 8, 6, 5};
    BatchNorm2d bc(8), bg(8);
    ParamStore sc, sg;
    bc.register_state(sc, "b.");
    bg.register_state(sg, "b.");
    sc.allocate();
    sg.allocate();
    testing::fill_uniform(sc.values(), 13, 0.5f, 1.5f);
    sg.values().copy_from(sc.values());
    sg.buffers().copy_from(sc.buffers());
    sg.to(Device::CUDA);
    bc.set_fused_relu(true);
    bg.set_fused_relu(true);
    bc.plan(s, testing::exec());
    bg.plan(s, gpu);
    const Tensor x = rounded_to(testing::random_tensor(s, 41), f), r = rounded_to(testing::random_tensor(s, 42), f);
    Tensor y = Tensor::empty(s), yg = Tensor::empty(s, Device::CUDA, f);
    bc.forward(y, x, r);
    const Tensor xg = to_gpu_as(x, f), rg = to_gpu_as(r, f);
    bg.forward(yg, xg, rg);
    expect_near_typed("batchnorm + add + relu forward", yg, y, tol);
    const Tensor dy = rounded_to(testing::random_tensor(s, 43), f);
    Tensor dx = Tensor::empty(s), dxg = Tensor::empty(s, Device::CUDA, f);
    bc.backward(dx, dy, x, y);
    bg.backward(dxg, to_gpu_as(dy, f), xg, yg);
    expect_near_typed("batchnorm + add + relu backward", dxg, dx, tol);
    expect_near_entries("batchnorm + add + relu parameter gradients", sc, sg.grads(), sc.grads(), tol);
  }
}

// Whole models on the typed path: logits near the CPU's float32 ones (as the fp16/bf16 test
// above), the gradient pointing the CPU's way, the loss falling over SGD steps on one batch,
// and no allocation inside a step.
TEST_CASE("cuda: every model the channels-last typed path covers trains on it") {
  REQUIRE_GPU("nhwc models");
  for (const char* name : {"resnet18", "resnet50", "vgg11_bn", "alexnet", "googlenet", "squeezenet1_1",
                           "inception_v3"}) {
    ModelOptions mo;
    mo.num_classes = 10;
    mo.dropout = 0.f;
    mo.aux_dropout = 0.f;
    const int hw = std::max(32, model_spec(name).min_size);
    const Shape in{4, 3, hw, hw};
    for (Precision p : {Precision::kTf32, Precision::kBf16, Precision::kFp16}) {
      auto cpu = build_model(name, mo, 5);  // fresh running statistics, as dev's
      cpu->plan(in, testing::exec());
      const Format f = nhwc_format(p);
      const std::string tag = std::string(name) + " [" + format_name(f) + "]";
      auto dev = build_model(name, mo, 5);
      dev->to(Device::CUDA);
      dev->plan(in, gpu_exec(p, f));  // precision p, 4-D activations in f
      const Tensor x = rounded_to(testing::random_tensor(in, 9), f);
      const Tensor xg = to_gpu_as(x, f);
      dev->set_training(false);  // eval logits first (no batch statistics, no auxiliary heads)
      cpu->set_training(false);
      expect_near(tag + " eval logits", dev->forward(xg), cpu->forward(x), 10 * tolerance(p));
      dev->set_training(true);
      cpu->set_training(true);
      const int32_t labels[4] = {1, 7, 3, 3};
      SoftmaxCrossEntropy xc, xg_loss;
      xc.plan(4, 10);
      xg_loss.plan(4, 10, Device::CUDA);
      AuxLosses aux_c, aux_g;  // GoogLeNet's heads, as the trainer's step
      aux_c.plan(*cpu, 4, 0.f, Device::CPU);
      aux_g.plan(*dev, 4, 0.f, Device::CUDA);
      Tensor dl = Tensor::empty({4, 10}), dlg = Tensor::empty({4, 10}, Device::CUDA);
      // One training step's gradient on both (the GPU's first step below): the same batch
      // statistics on both.
      xc.forward(cpu->forward(x), labels);
      aux_c.forward(*cpu, labels);
      xc.backward(dl, labels);
      cpu->params().zero_grad();
      cpu->backward(dl, aux_c.backward(labels, 1.f));
      SGD opt(dev->params(), {.lr = 0.05, .momentum = 0.9});
      std::vector<double> losses;
      int64_t allocations = 0;
      for (int step = 0; step < 6; ++step) {
        if (step == 2) gpu::backend().synchronize(), allocations = gpu::backend().allocation_count();
        xg_loss.forward(dev->forward(xg), labels);
        aux_g.forward(*dev, labels);
        xg_loss.backward(dlg, labels);
        dev->params().zero_grad();
        dev->backward(dlg, aux_g.backward(labels, 1.f));
        if (step == 0) {
          const double c = cosine(dev->params().grads(), cpu->params().grads());
          INFO(tag, ": gradient cosine ", c);
          CHECK(c > 0.95);
        }
        opt.step();
        losses.push_back(xg_loss.loss());
      }
      gpu::backend().synchronize();
      CHECK(gpu::backend().allocation_count() == allocations);
      INFO(tag, ": loss ", losses.front(), " -> ", losses.back());
      CHECK(losses.back() < losses.front());
    }
  }
}

}  // TEST_SUITE
