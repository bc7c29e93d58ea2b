// Conv2d: its parameters, shapes and checks; how it runs is the implementation plan() builds
// (conv_choice.h picks it, conv_engine.h lists them).
#include "layers/conv2d.h"

#include <cmath>

#include "core/check.h"
#include "core/mutant.h"
#include "core/rng.h"

namespace mpicnn {

Conv2d::Conv2d(const Conv2dOptions& o) : opt_(o) {
  CHECK(o.in_channels >= 1 && o.out_channels >= 1, "Conv2d: channels must be >= 1, got ",
        o.in_channels, " -> ", o.out_channels);
  CHECK(o.groups >= 1, "Conv2d: groups must be >= 1, got ", o.groups);
  CHECK(o.in_channels % o.groups == 0 && o.out_channels % o.groups == 0,
        "Conv2d: in_channels (", o.in_channels, ") and out_channels (", o.out_channels,
        ") must both be divisible by groups (", o.groups, ")");
  CHECK(o.kernel.h >= 1 && o.kernel.w >= 1, "Conv2d: kernel must be >= 1, got ", o.kernel.h,
        "x", o.kernel.w);
  CHECK(o.stride.h >= 1 && o.stride.w >= 1, "Conv2d: stride must be >= 1, got ", o.stride.h,
        "x", o.stride.w);
  CHECK(o.padding.h >= 0 && o.padding.w >= 0, "Conv2d: padding must be >= 0, got ",
        o.padding.h, "x", o.padding.w);
  CHECK(o.dilation.h >= 1 && o.dilation.w >= 1, "Conv2d: dilation must be >= 1, got ",
        o.dilation.h, "x", o.dilation.w);
}

void Conv2d::register_state(ParamStore& store, const std::string& prefix) {
  weight_name_ = prefix + "weight";
  store.param(weight_name_,
              {opt_.out_channels, opt_.in_channels / opt_.groups, opt_.kernel.h, opt_.kernel.w},
              &weight, &grad_weight);
  if (opt_.bias) {
    bias_name_ = prefix + "bias";
    store.param(bias_name_, {opt_.out_channels}, &bias, &grad_bias, /*decay=*/false);
  }
}

void Conv2d::reset_parameters(uint64_t seed) {
  CHECK(weight.defined(), "Conv2d: parameters not allocated (ParamStore::allocate)");
  const int64_t fan_in = int64_t(opt_.in_channels / opt_.groups) * opt_.kernel.h * opt_.kernel.w;
  const real bound = 1.0f / std::sqrt(real(fan_in));
  fill_uniform(Rng(seed, weight_name_), weight.data(), weight.numel(), -bound, bound);
  if (opt_.bias) fill_uniform(Rng(seed, bias_name_), bias.data(), bias.numel(), -bound, bound);
}

ConvGeometry Conv2d::geometry_for(const Shape& in) const {
  CHECK(in.ndim == 4 && in[1] == opt_.in_channels, "Conv2d(", opt_.in_channels, " -> ",
        opt_.out_channels, "): input must be (N, ", opt_.in_channels, ", H, W), got ", in.str());
  ConvGeometry g;
  g.channels = in[1];
  g.height = in[2];
  g.width = in[3];
  g.kernel_h = opt_.kernel.h, g.kernel_w = opt_.kernel.w;
  g.stride_h = opt_.stride.h, g.stride_w = opt_.stride.w;
  g.pad_h = opt_.padding.h, g.pad_w = opt_.padding.w;
  g.dilation_h = opt_.dilation.h, g.dilation_w = opt_.dilation.w;
  // Floor division on a possibly negative numerator: the check below rejects those anyway.
  const int64_t span_h = g.dilation_h * (g.kernel_h - 1) + 1;
  const int64_t span_w = g.dilation_w * (g.kernel_w - 1) + 1;
  const int64_t num_h = g.height + 2 * g.pad_h - span_h, num_w = g.width + 2 * g.pad_w - span_w;
  CHECK(num_h >= 0 && num_w >= 0, "Conv2d: input ", g.height, "x", g.width, " with padding ",
        g.pad_h, "x", g.pad_w, " is smaller than the dilated kernel ", span_h, "x", span_w);
  g.out_h = num_h / g.stride_h + 1;
  g.out_w = num_w / g.stride_w + 1;
  return g;
}

Shape Conv2d::output_shape(const Shape& in) const {
  const ConvGeometry g = geometry_for(in);
  return {in[0], opt_.out_channels, g.out_h, g.out_w};
}

void Conv2d::plan(const Shape& in, const ExecConfig& cfg) {
  const ConvGeometry g = geometry_for(in);
  CHECK(in[0] >= 1, "Conv2d: plan needs a batch of at least 1, got ", in.str());
  engine_.reset();  // the old plan's buffers go before the new one's are made
  geo_ = g;
  planned_ = in;
  precision_ = cfg.precision;
  computed_by_owner_ = false;
  choice_ = choose_conv(g, opt_.groups, cfg);
  engine_ = make_conv_engine(choice_.impl, {g, in[0], opt_.out_channels, opt_.groups}, cfg);
}

std::string Conv2d::plan_note() const {
  if (computed_by_owner_) return precision_name(precision_) + std::string(" GEMM run by its block");
  if (!engine_) return "not planned";
  std::string s = engine_->note();
  if (choice_.why_not_direct) s += std::string(" (not direct: ") + choice_.why_not_direct + ")";
  return s;
}

const ColumnPlan& Conv2d::columns() const {
  CHECK(im2col(), "Conv2d: no im2col plan (", plan_note(), ")");
  return im2col()->columns();
}

void Conv2d::check_ready(const Tensor& in, bool on_gpu) const {
  CHECK(weight.defined(), "Conv2d: parameters not allocated (ParamStore::allocate)");
  CHECK(planned_.ndim == 4 && engine_, "Conv2d: call plan() before forward/backward");
  CHECK(in.dim() == 4 && in.size(1) == planned_[1] && in.size(2) == planned_[2] &&
            in.size(3) == planned_[3] && in.size(0) >= 1 && in.size(0) <= planned_[0],
        "Conv2d: input ", in.shape().str(), " does not fit the plan for ", planned_.str(),
        " (same C, H, W and at most ", planned_[0], " images)");
  CHECK(on_gpu == (cudnn() != nullptr), "Conv2d: planned on the ", on_gpu ? "CPU" : "GPU",
        ", called with ", on_gpu ? "GPU" : "CPU", " tensors");
}

void Conv2d::forward(Tensor& out, const Tensor& in) {
  const bool gpu = on_gpu_as("Conv2d", gpu_format(), {&out, &in}, {&weight});
  check_ready(in, gpu);
  CHECK_SHAPE(out, {in.size(0), opt_.out_channels, geo_.out_h, geo_.out_w});
  engine_->forward(out, in, weight, opt_.bias ? &bias : nullptr);
}

void Conv2d::backward(Tensor& din, const Tensor& dout, const Tensor& in, const Tensor& /*out*/) {
  const bool gpu = on_gpu_as("Conv2d backward", gpu_format(), {&din, &dout, &in}, {&weight});
  check_ready(in, gpu);
  const int64_t N = in.size(0);
  CHECK_SHAPE(dout, {N, opt_.out_channels, geo_.out_h, geo_.out_w});
  if (din.defined()) CHECK_SHAPE(din, {N, geo_.channels, geo_.height, geo_.width});
  if (frozen_ && !din.defined()) return;
  const bool wgrad = !frozen_;  // frozen: no filter gradient
  engine_->backward(din, wgrad ? &grad_weight : nullptr,
                    wgrad && opt_.bias ? &grad_bias : nullptr, dout, in, weight);
  if (MUTANT(1) && wgrad && !gpu && weight_name_ == "conv1.weight") {
    real* gw = grad_weight.data();
    for (int64_t e = 0; e < grad_weight.numel(); ++e) gw[e] *= real(1.001);
  }
}

}  // namespace mpicnn
