// Tensor formats (core/format.h) without a GPU: the host conversion every GPU check of the
// channels-last path compares against (its NHWC order and its rounding), the format rules of
// Tensor (16-bit tensors refuse data(), byte offsets of views, reshapes that keep the element
// order), the activation scope models plan under, and the refusals: --gpu-layout nhwc off the
// GPU, and a layer without a channels-last path given a typed tensor. tests/test_cuda.cpp runs
// the GPU kernels against these.
#include <cstring>
#include <string>

#include "core/device.h"
#include "core/half.h"
#include "layers/flatten.h"
#include "layers/relu.h"
#include "models/module.h"
#include "testing.h"

using namespace mpicnn;

namespace {
// The one line an Error carries, or "" when f does not throw.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.message();
  }
  return "";
}
uint16_t bits16(const Tensor& t, int64_t i) {
  uint16_t v;
  std::memcpy(&v, static_cast<const char*>(t.raw()) + 2 * i, 2);
  return v;
}
}  // namespace

TEST_CASE("format: names, element sizes, plain") {
  CHECK(Format{}.plain());
  CHECK_FALSE((Format{Elem::F32, Order::NHWC}).plain());
  CHECK_FALSE((Format{Elem::BF16, Order::NCHW}).plain());
  CHECK(elem_bytes(Elem::BF16) == 2);
  CHECK(elem_bytes(Elem::F16) == 2);
  CHECK(elem_bytes(Elem::F32) == sizeof(real));
  CHECK(std::string(format_name({Elem::BF16, Order::NHWC})) == "bf16 NHWC");
  CHECK(std::string(format_name({Elem::F16, Order::NCHW})) == "f16 NCHW");
  CHECK(std::string(format_name({})) == "f32 NCHW");
}

TEST_CASE("format: convert_host puts (n, c, h, w) at NHWC's offset and rounds to nearest even") {
  const Shape s{2, 3, 4, 5};
  const Tensor x = testing::random_tensor(s, 3, -70000.f, 70000.f);  // past fp16's range too
  const int64_t C = 3, H = 4, W = 5;
  for (Elem e : {Elem::F32, Elem::BF16, Elem::F16}) {
    const Tensor y = convert_host(x, Format{e, Order::NHWC});
    CHECK(y.format() == (Format{e, Order::NHWC}));
    CHECK(y.bytes() == size_t(x.numel()) * elem_bytes(e));
    int wrong = 0;
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t w = 0; w < W; ++w) {
            const real v = x[((n * C + c) * H + h) * W + w];
            const int64_t k = ((n * H + h) * W + w) * C + c;
            if (e == Elem::F32) wrong += static_cast<const real*>(y.raw())[k] != v;
            if (e == Elem::BF16) wrong += bits16(y, k) != float_to_bf16(float(v));
            if (e == Elem::F16) wrong += bits16(y, k) != float_to_half(float(v));
          }
    CHECK(wrong == 0);
    // Back to plain: the element's 16-bit value widened exactly, in NCHW order.
    const Tensor back = convert_host(y, Format{});
    CHECK(back.format().plain());
    wrong = 0;
    for (int64_t i = 0; i < x.numel(); ++i) {
      const float want = e == Elem::F32    ? float(x[i])
                         : e == Elem::BF16 ? bf16_to_float(float_to_bf16(float(x[i])))
                                           : half_to_float(float_to_half(float(x[i])));
      wrong += float(back[i]) != want;
    }
    CHECK(wrong == 0);
  }
  // Not 4-D: no NHWC; other dimensions convert element by element.
  const Tensor v = testing::random_tensor({7}, 4);
  CHECK(error_of([&] { (void)convert_host(v, Format{Elem::BF16, Order::NHWC}); })
            .find("NHWC needs 4 dimensions") != std::string::npos);
  const Tensor v16 = convert_host(v, Format{Elem::BF16, Order::NCHW});
  CHECK(bits16(v16, 6) == float_to_bf16(float(v[6])));
}

TEST_CASE("format: a typed tensor refuses data(), and its views count bytes") {
  const Format f{Elem::BF16, Order::NHWC};
  Tensor t = Tensor::empty({4, 8, 3, 3}, Device::CPU, f);
  CHECK(t.bytes() == size_t(4 * 8 * 9 * 2));
  const std::string e = error_of([&] { (void)t.data(); });
  CHECK(e.find("bf16 NHWC tensor (4, 8, 3, 3)") != std::string::npos);
  CHECK(e.find("--gpu-layout") != std::string::npos);
  const auto* base = static_cast<const char*>(t.raw());
  CHECK(static_cast<const char*>(t.slice0(1, 3).raw()) == base + 8 * 9 * 2);
  CHECK(static_cast<const char*>(t.view_at(5, {2}).raw()) == base + 10);
  CHECK(t.slice0(1, 3).format() == f);
  // Reshapes keep the element order only where NHWC and NCHW agree.
  const Tensor pooled = Tensor::empty({4, 8, 1, 1}, Device::CPU, f);
  const Tensor flat = pooled.reshape({4, 8});
  CHECK(flat.format() == (Format{Elem::BF16, Order::NCHW}));
  CHECK(error_of([&] { (void)t.reshape({4, 72}); }).find("its element order is not NCHW's") !=
        std::string::npos);
  CHECK(t.reshape({4, 8, 3, 3}).format() == f);  // the same shape: no change
  // reinterpret: the first bytes in another format; they must fit.
  const Tensor r = t.reinterpret({2, 8, 3, 3}, Format{});
  CHECK(r.raw() == t.raw());
  CHECK(r.format().plain());
  CHECK_THROWS_AS((void)t.reinterpret({4, 8, 3, 3}, Format{}), Error);  // twice the bytes
  // copy_from copies bytes between equal formats only.
  Tensor u = Tensor::empty({4, 8, 3, 3}, Device::CPU, f);
  std::memset(t.raw(), 0x5A, t.bytes());
  u.copy_from(t);
  CHECK(std::memcmp(u.raw(), t.raw(), t.bytes()) == 0);
  CHECK(error_of([&] { Tensor p = Tensor::empty({4, 8, 3, 3}); p.copy_from(t); })
            .find("copy_from: bf16 NHWC into f32 NCHW") != std::string::npos);
}

TEST_CASE("format: a config's activation format types 4-D activations only") {
  CHECK(ExecConfig{}.activations.plain());
  const Format f{Elem::F16, Order::NHWC};
  ExecConfig cfg;
  cfg.activations = f;
  CHECK(cfg.activation({2, 3, 4, 4}).format() == f);
  CHECK(cfg.activation({2, 48}).format().plain());  // logits, the classifier head
  CHECK(cfg.format_for({1, 2, 3}).plain());
  CHECK(ExecConfig{}.activation({2, 3, 4, 4}).format().plain());
}

TEST_CASE("format: --gpu-layout nhwc off the GPU, and a layer without the path, refuse by name") {
  std::string e = error_of([] {
    (void)make_exec_config({.device = "cpu", .precision = "fp32", .gpu_layout = "nhwc"}, 0);
  });
  CHECK(e.find("--gpu-layout nhwc: the model runs on the CPU (--device cpu)") == 0);
  e = error_of([] { (void)make_exec_config({.device = "cpu", .gpu_layout = "chw"}, 0); });
  CHECK(e == "--gpu-layout: 'chw' is not a layout (accepted: nchw, nhwc)");
  const ExecConfig c = make_exec_config({.device = "cpu", .precision = "fp32"}, 0);
  CHECK(c.activations.plain());
  // A CPU layer given a typed tensor: the element type is refused before any arithmetic.
  const Format f{Elem::BF16, Order::NHWC};
  Tensor x = Tensor::empty({2, 3, 1, 1}, Device::CPU, f), y = Tensor::empty({2, 3});
  Flatten flatten;
  e = error_of([&] { flatten.forward(y, x); });
  CHECK(e.find("bf16 NHWC") != std::string::npos);
  ReLU relu;
  Tensor z = Tensor::empty({2, 3, 1, 1}, Device::CPU, f);
  e = error_of([&] { relu.forward(z, x); });
  CHECK(e == "a bf16 NHWC tensor (2, 3, 1, 1) read as float32 (a layer without a path for this "
           "format; see --gpu-layout)");
}
