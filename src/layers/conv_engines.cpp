// The CPU convolutions built on the direct kernels and Winograd (see conv_engine.h), the table's
// constructor (make_conv_engine) and what the CPU implementations share: the workspace and the
// bias gradient. The im2col path is conv_im2col.cpp, cuDNN's conv_cudnn.cpp.
#include <algorithm>

#include "core/check.h"
#include "layers/conv_choice.h"
#include "layers/conv_cudnn.h"
#include "layers/conv_direct.h"
#include "layers/conv_im2col.h"
#include "layers/winograd.h"

namespace mpicnn {

namespace {

// Floats Winograd's chunks may take (its weights included): 32 MiB.
constexpr int64_t kWinogradBudget = int64_t(8) << 20;

thread_local Tensor t_workspace;

// All three passes on the direct kernels (ConvImpl::kDirect).
class DirectEngine final : public ConvEngine {
 public:
  DirectEngine(const ConvSpec& s, const ExecConfig& cfg)
      : direct_(s.geo, s.out_channels, s.batch, cfg.precision != Precision::kFp32, cfg.isa),
        precision_(cfg.precision) {
    CHECK(precision_ == Precision::kFp32 || direct_.bf16_weight_grad(),
          "Conv2d: the direct kernels' plan disagrees with choose_conv (internal error)");
    conv_workspace(direct_.workspace_floats());  // sized now, so that the step allocates nothing
  }
  void forward(Tensor& out, const Tensor& in, const Tensor& weight, const Tensor* bias) override {
    direct_.forward(out.data(), in.data(), weight.data(), bias ? bias->data() : nullptr,
                    in.size(0), conv_workspace(direct_.workspace_floats()));
  }
  void backward(Tensor& din, Tensor* gw, Tensor* gb, const Tensor& dout, const Tensor& in,
                const Tensor& weight) override {
    if (gb) conv_bias_grad(*gb, dout);
    direct_.backward(din.defined() ? din.data() : nullptr, gw ? gw->data() : nullptr,
                     dout.data(), in.data(), weight.data(), in.size(0),
                     conv_workspace(direct_.workspace_floats()));
  }
  std::string note() const override {
    return std::string("direct ") + direct_.isa() + " " + precision_name(precision_);
  }

 private:
  DirectConv direct_;
  Precision precision_;
};

// bf16: forward and the input gradient on the direct kernels, the weight gradient on im2col's
// bf16 GEMMs (ConvImpl::kDirectForward: the direct bf16 weight gradient does not fit).
class DirectForwardEngine final : public ConvEngine {
 public:
  DirectForwardEngine(const ConvSpec& s, const ExecConfig& cfg)
      : direct_(s.geo, s.out_channels, s.batch, /*bf16=*/true, cfg.isa),
        im2col_(s, cfg, Im2colPasses::kWeightGradBesideDirect),
        precision_(cfg.precision),
        workspace_floats_(std::max(direct_.workspace_floats(), im2col_.workspace_floats())) {
    CHECK(!direct_.bf16_weight_grad(),
          "Conv2d: the direct kernels' plan disagrees with choose_conv (internal error)");
    conv_workspace(workspace_floats_);
  }
  void forward(Tensor& out, const Tensor& in, const Tensor& weight, const Tensor* bias) override {
    direct_.forward(out.data(), in.data(), weight.data(), bias ? bias->data() : nullptr,
                    in.size(0), conv_workspace(workspace_floats_));
  }
  void backward(Tensor& din, Tensor* gw, Tensor* gb, const Tensor& dout, const Tensor& in,
                const Tensor& weight) override {
    if (gb) conv_bias_grad(*gb, dout);
    if (din.defined())
      direct_.backward(din.data(), nullptr, dout.data(), in.data(), weight.data(), in.size(0),
                       conv_workspace(workspace_floats_));
    if (!gw) return;
    Tensor none;
    im2col_.backward(none, gw, nullptr, dout, in, weight);
  }
  std::string note() const override {
    return std::string("direct ") + direct_.isa() + " " + precision_name(precision_) +
           " forward and input gradient, weight gradient on " + im2col_.note() +
           " (the direct bf16 weight gradient needs stride 1, rows of 8+)";
  }
  const Im2colEngine* im2col() const override { return &im2col_; }

 private:
  DirectConv direct_;
  Im2colEngine im2col_;
  Precision precision_;
  int64_t workspace_floats_;
};

// float32 Winograd F(2x2,3x3): forward, and the input gradient as the transposed convolution
// (dout through the rotated, transposed weights, padded 2 - p); the weight gradient on im2col
// (ConvImpl::kWinograd).
class WinogradEngine final : public ConvEngine {
 public:
  WinogradEngine(const ConvSpec& s, const ExecConfig& cfg)
      : s_(s),
        fwd_(s.geo.channels, s.out_channels, s.geo.height, s.geo.width, s.geo.pad_h, s.geo.pad_w,
             s.batch, kWinogradBudget),
        bwd_(s.out_channels, s.geo.channels, s.geo.out_h, s.geo.out_w, 2 - s.geo.pad_h,
             2 - s.geo.pad_w, s.batch, kWinogradBudget),
        im2col_(s, cfg, Im2colPasses::kWeightGradBesideWinograd),
        workspace_floats_(std::max({im2col_.workspace_floats(), fwd_.workspace_floats(),
                                    bwd_.workspace_floats()})) {
    conv_workspace(workspace_floats_);
  }
  void forward(Tensor& out, const Tensor& in, const Tensor& weight, const Tensor* bias) override {
    real* ws = conv_workspace(workspace_floats_);
    winograd_weights(ws, weight.data(), s_.out_channels, s_.geo.channels, /*transposed=*/false);
    fwd_.forward(out.data(), in.data(), bias ? bias->data() : nullptr, in.size(0), ws);
  }
  void backward(Tensor& din, Tensor* gw, Tensor* gb, const Tensor& dout, const Tensor& in,
                const Tensor& weight) override {
    if (gb) conv_bias_grad(*gb, dout);
    if (gw) {
      Tensor none;
      im2col_.backward(none, gw, nullptr, dout, in, weight);
    }
    if (!din.defined()) return;
    real* ws = conv_workspace(workspace_floats_);
    winograd_weights(ws, weight.data(), s_.out_channels, s_.geo.channels, /*transposed=*/true);
    bwd_.forward(din.data(), dout.data(), nullptr, in.size(0), ws);
  }
  std::string note() const override { return "winograd + " + im2col_.note(); }
  const Im2colEngine* im2col() const override { return &im2col_; }

 private:
  ConvSpec s_;
  WinogradConv fwd_;  // forward: C = IC, K = OC
  WinogradConv bwd_;  // input gradient: C = OC, K = IC on dout, padding 2 - p
  Im2colEngine im2col_;
  int64_t workspace_floats_;
};

}  // namespace

real* conv_workspace(int64_t floats) {
  if (!t_workspace.defined() || t_workspace.numel() < floats)
    t_workspace = Tensor::empty({std::max<int64_t>(floats, 1)}, Device::CPU);
  return t_workspace.data();
}

void conv_bias_grad(Tensor& gb, const Tensor& dout) {
  const int64_t N = dout.size(0), OC = dout.size(1), P = dout.size(2) * dout.size(3);
  const real* dy = dout.data();
  real* g = gb.data();
  // Double accumulators: a channel of a large batch sums ~1e6 terms.
#pragma omp parallel for schedule(static) if (N * OC * P > kConvParallelMin)
  for (int64_t oc = 0; oc < OC; ++oc) {
    double acc = 0;
    for (int64_t n = 0; n < N; ++n) {
      const real* s = dy + (n * OC + oc) * P;
      real part = 0.f;
#pragma omp simd reduction(+ : part)
      for (int64_t p = 0; p < P; ++p) part += s[p];
      acc += part;
    }
    g[oc] += real(acc);
  }
}

std::unique_ptr<ConvEngine> make_conv_engine(ConvImpl impl, const ConvSpec& s,
                                             const ExecConfig& cfg) {
  switch (impl) {
    case ConvImpl::kCudnn: return std::make_unique<CudnnEngine>(s, cfg);
    case ConvImpl::kDirect: return std::make_unique<DirectEngine>(s, cfg);
    case ConvImpl::kDirectForward: return std::make_unique<DirectForwardEngine>(s, cfg);
    case ConvImpl::kWinograd: return std::make_unique<WinogradEngine>(s, cfg);
    case ConvImpl::kIm2col: return std::make_unique<Im2colEngine>(s, cfg);
  }
  FAIL("Conv2d: unknown implementation (internal error)");
}

}  // namespace mpicnn
