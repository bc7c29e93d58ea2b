// Conv2d as torch.nn.Conv2d (zero padding, stride, dilation, groups, optional bias): the layer's
// parameters and shapes; plan() picks how it runs (conv_choice.h's table) and builds that
// implementation (conv_engine.h: the direct kernels, Winograd, im2col + GEMM on the CPU, cuDNN
// on CUDA tensors), which forward and backward then call. Not a transposed convolution.
#pragma once
#include <string>

#include "core/gpu.h"
#include "layers/conv_choice.h"
#include "layers/conv_cudnn.h"
#include "layers/conv_im2col.h"
#include "layers/layer.h"

namespace mpicnn {

struct Conv2dOptions {
  // (height, width) pair; a single number means both, as in PyTorch.
  struct Hw {
    int h = 1, w = 1;
    Hw(int both) : h(both), w(both) {}  // NOLINT: implicit, so `.stride = 2` reads naturally
    Hw(int h_, int w_) : h(h_), w(w_) {}
  };
  int in_channels = 0;
  int out_channels = 0;
  Hw kernel = 1;
  Hw stride = 1;
  Hw padding = 0;
  Hw dilation = 1;
  int groups = 1;
  bool bias = true;
};

class Conv2d : public UnaryLayer {
 public:
  // Conv2d({.in_channels = 64, .out_channels = 128, .kernel = 3, .stride = 2, .padding = 1,
  //         .bias = false})
  explicit Conv2d(const Conv2dOptions& options);
  const char* kind() const override { return "Conv2d"; }
  // "weight" (OC, IC/groups, KH, KW), then "bias" (OC) when bias is on.
  void register_state(ParamStore& store, const std::string& prefix) override;
  // PyTorch's default: weight and bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)),
  // fan_in = IC/groups * KH * KW.
  void reset_parameters(uint64_t seed) override;

  Shape output_shape(const Shape& in) const override;  // (N, IC, H, W) -> (N, OC, OH, OW)
  // Plans for inputs of this shape (kernels, workspaces, descriptors); forward/backward then
  // accept any batch up to in[0] of the same (IC, H, W) and allocate nothing.
  // Chooses how each pass runs from cfg (core/exec.h): on the GPU a cuDNN plan in cfg's
  // precision and format; on the CPU the direct kernels, Winograd or im2col (cfg.conv and the
  // layer's geometry: choose_conv), in fp32 or bf16.
  void plan(const Shape& in, const ExecConfig& cfg) override;
  void forward(Tensor& out, const Tensor& in) override;  // out (N, OC, OH, OW), in (N, IC, H, W)
  // din '=' (skipped when undefined); grad_weight and grad_bias '+='. Recomputes the columns
  // of `in` rather than keeping those of forward.
  void backward(Tensor& din, const Tensor& dout, const Tensor& in, const Tensor& out) override;

  const Conv2dOptions& options() const { return opt_; }
  // The implementation plan() chose (choose_conv), and in plan_note how it runs and why not
  // the direct kernels where it did not take them.
  const ConvChoice& choice() const { return choice_; }
  std::string plan_note() const override;
  // Whether plan() chose the direct kernels: for all three passes in fp32; in bf16 for forward
  // and the input gradient, and the weight gradient where direct_weight_grad() (else on
  // im2col's bf16 GEMMs).
  bool direct() const { return runs(ConvImpl::kDirect) || runs(ConvImpl::kDirectForward); }
  bool direct_weight_grad() const { return runs(ConvImpl::kDirect); }
  // Whether plan() chose Winograd for forward and the input gradient.
  bool winograd() const { return runs(ConvImpl::kWinograd); }
  // The im2col part's plan (conv_im2col.h), where the layer has one: images per GEMM (1
  // without), chunks side by side (a small layer), bf16 1x1 layers as one GEMM per image, bf16
  // chunks in groups side by side, and how the input is unfolded.
  int64_t chunk() const { return im2col() ? im2col()->chunk() : 1; }
  bool parallel_chunks() const { return im2col() && im2col()->parallel_chunks(); }
  bool per_image() const { return im2col() && im2col()->per_image(); }
  int64_t grad_groups() const { return im2col() ? im2col()->grad_groups() : 0; }
  const ColumnPlan& columns() const;
  // The precision plan() took from its config: on the CPU, bf16 runs the direct kernels' bf16
  // forward and input gradient where DirectConv::fits, else im2col's bf16 GEMMs.
  Precision precision() const { return precision_; }
  // Geometry of the planned input (valid after plan() or note_input()).
  const ConvGeometry& geometry() const { return geo_; }
  // Records the geometry of inputs of this shape and the precision its GEMMs take under cfg,
  // without planning anything: for a convolution its owner computes itself (DenseBlock's 1x1
  // bottleneck is one GEMM over the concatenated features), so that geometry(), precision() and
  // Model::forward_macs describe it. forward still needs plan().
  void note_input(const Shape& in, const ExecConfig& cfg) {
    geo_ = geometry_for(in);
    precision_ = cfg.precision;
    computed_by_owner_ = true;
    engine_.reset();
  }
  // The cuDNN plan made by plan() on the GPU (null on the CPU): folded inference (layers/fold.h)
  // runs its fused call on the same descriptors.
  gpu::ConvPlan* gpu_plan() const { return cudnn() ? &cudnn()->plan() : nullptr; }
  // The activations' format the GPU plan was made for (plain, or NHWC of a type; plain on the
  // CPU).
  Format gpu_format() const { return cudnn() ? cudnn()->format() : Format{}; }

  Tensor weight, grad_weight;  // (OC, IC/groups, KH, KW)
  Tensor bias, grad_bias;      // (OC), undefined without bias

 private:
  ConvGeometry geometry_for(const Shape& in) const;  // checks the input shape
  void check_ready(const Tensor& in, bool on_gpu) const;
  bool runs(ConvImpl impl) const { return engine_ && choice_.impl == impl; }
  const Im2colEngine* im2col() const { return engine_ ? engine_->im2col() : nullptr; }
  const CudnnEngine* cudnn() const { return engine_ ? engine_->cudnn() : nullptr; }

  Conv2dOptions opt_;
  std::string weight_name_, bias_name_;
  Shape planned_;        // (N, IC, H, W) given to plan()
  ConvGeometry geo_;     // of planned_
  Precision precision_ = Precision::kFp32;
  ConvChoice choice_;                      // choose_conv's, at plan
  std::unique_ptr<ConvEngine> engine_;     // what choice_ names, planned for planned_
  bool computed_by_owner_ = false;         // note_input(), not plan()
};

}  // namespace mpicnn
