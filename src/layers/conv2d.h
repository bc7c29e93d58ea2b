// Conv2d as torch.nn.Conv2d (zero padding, stride, dilation, groups, optional bias) on CPU:
// blocked direct kernels (conv_direct.h), or im2col + OpenBLAS GEMM over chunks of images,
// workspaces sized once by plan().
// On CUDA tensors it runs cuDNN (kernels/conv2d.cu) with algorithms chosen once by plan().
// Not a transposed convolution.
#pragma once
#include <string>

#include "core/gpu.h"
#include "layers/conv_choice.h"
#include "layers/conv_direct.h"
#include "layers/im2col.h"
#include "layers/layer.h"
#include "layers/winograd.h"

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
  // Sizes the column workspace for inputs of this shape; forward/backward then accept any
  // batch up to in[0] of the same (IC, H, W) and allocate nothing.
  // Chooses how each pass runs from cfg (core/exec.h): on the GPU a cuDNN plan in cfg's
  // precision and format; on the CPU the direct kernels, Winograd or im2col (cfg.conv and the
  // layer's geometry; see the top of conv2d.cpp), in fp32 or bf16.
  void plan(const Shape& in, const ExecConfig& cfg) override;
  void forward(Tensor& out, const Tensor& in) override;  // out (N, OC, OH, OW), in (N, IC, H, W)
  // din '=' (skipped when undefined); grad_weight and grad_bias '+='. Recomputes the columns
  // of `in` rather than keeping those of forward.
  void backward(Tensor& din, const Tensor& dout, const Tensor& in, const Tensor& out) override;

  const Conv2dOptions& options() const { return opt_; }
  // Images per GEMM chosen by plan() (1 before plan).
  int64_t chunk() const { return chunk_; }
  // Whether plan() chose Winograd for forward and the input gradient.
  bool winograd() const { return use_winograd_; }
  // Whether plan() chose the direct kernels: for all three passes in fp32; in bf16 for forward
  // and the input gradient, and the weight gradient where direct_weight_grad() (else on
  // im2col's bf16 GEMMs).
  bool direct() const { return direct_.planned(); }
  bool direct_weight_grad() const {
    return direct_.planned() && (precision_ == Precision::kFp32 || direct_.bf16_weight_grad());
  }
  // Whether plan() chose to run the chunks in parallel (a small layer).
  bool parallel_chunks() const { return parallel_chunks_; }
  bool per_image() const { return per_image_; }  // bf16 1x1: one GEMM per image (see below)
  int64_t grad_groups() const { return grad_groups_; }  // bf16 chunks side by side (see below)
  // The implementation plan() chose (choose_conv), and in plan_note how it runs and why not
  // the direct kernels where it did not take them.
  const ConvChoice& choice() const { return choice_; }
  std::string plan_note() const override;
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
  }
  // How the planned input is unfolded (valid after plan()).
  const ColumnPlan& columns() const { return cols_; }
  // The cuDNN plan made by plan() on the GPU (null on the CPU): folded inference (layers/fold.h)
  // runs its fused call on the same descriptors.
  gpu::ConvPlan* gpu_plan() const { return gpu_plan_.get(); }
  // The activations' format the GPU plan was made for (plain, or NHWC of a type).
  Format gpu_format() const { return gpu_format_; }

  Tensor weight, grad_weight;  // (OC, IC/groups, KH, KW)
  Tensor bias, grad_bias;      // (OC), undefined without bias

 private:
  ConvGeometry geometry_for(const Shape& in) const;  // checks the input shape
  // plan()'s parts for choice_'s implementation, on geo_, planned_ and chunk_.
  void plan_cudnn(const ExecConfig& cfg);
  void plan_direct(const ExecConfig& cfg);
  void plan_im2col(const ExecConfig& cfg);
  void check_ready(const Tensor& in) const;
  void add_bias_grad(const Tensor& dout);
  // The GEMMs' (OC, IC/groups * live taps) weight matrix: the weights themselves when every
  // tap is live, else their live columns gathered into live_weight_.
  const real* gemm_weight();
  // One chunk of images from n0 (at most chunk_ images): forward's GEMMs, and backward's
  // weight gradient into gw ('= beta * gw +', skipped when null) and input gradient (if data).
  void forward_chunk(Tensor& out, const Tensor& in, const real* w, const real* b, int64_t n0);
  void backward_chunk(Tensor& din, const Tensor& dout, const Tensor& in, const real* w, real* gw,
                      real beta, bool data, int64_t n0);

  Conv2dOptions opt_;
  std::string weight_name_, bias_name_;
  Shape planned_;        // (N, IC, H, W) given to plan()
  ConvGeometry geo_;     // of planned_
  ColumnPlan cols_;      // how geo_ is unfolded (live taps, small-plane table)
  int64_t chunk_ = 1;    // images per GEMM
  // The column matrix (IC*T, chunk*OH*OW), 0 floats when the input is its own column, and the
  // GEMM output/gradient rows (OC, chunk*OH*OW) when chunk > 1, both in this thread's
  // workspace, which every Conv2d shares (see conv2d.cpp).
  int64_t col_floats_ = 0, rows_floats_ = 0;
  int64_t workspace_floats_ = 0;  // the largest of the columns + rows and Winograd's needs
  real* workspace_base();         // this thread's workspace, at least workspace_floats_
  bool use_winograd_ = false;
  Precision precision_ = Precision::kFp32;
  ConvChoice choice_;                     // choose_conv's, at plan
  bool computed_by_owner_ = false;        // note_input(), not plan()
  // Small layers (plan's rule): the chunks run in parallel, one thread each, rather than one
  // chunk at a time on multi-threaded GEMMs; chunk_grads_ (chunks, OC, IC/groups * live taps)
  // holds each chunk's weight gradient until they are summed in chunk order.
  bool parallel_chunks_ = false;
  Tensor chunk_grads_;
  // bf16 layers that run in chunks but are not small: the chunks side by side too when they
  // share out over the threads (one thread each; the weight gradient in grad_groups_ fixed
  // groups of chunks, each summed apart into a shared buffer, then added in group order);
  // 0 groups: one chunk at a time on all threads. See plan.
  int64_t grad_groups_ = 0;
  // bf16 1x1 layers (stride 1, ungrouped) with planes of kPerImagePlane pixels or more: all
  // three passes as one GEMM per image straight from and to NCHW, not chunked through the
  // column and rows buffers; forward and the input gradient on the weights (or their
  // transpose) packed once per pass into the workspace (core/gemm_bf16.h's
  // gemm_bf16_packed_a), giving the chunked GEMMs' bits; the weight gradient summed image by
  // image in fixed groups of images (weight_grad_per_image: K = one image's pixels per GEMM, so
  // its bits are its own). Images run one per thread when there are enough of them.
  bool per_image_ = false;
  void forward_per_image(Tensor& out, const Tensor& in, const real* b);
  void backward_per_image(Tensor& din, const Tensor& dout, const Tensor& in, bool wgrad);
  void weight_grad_per_image(const Tensor& dout, const Tensor& in);
  DirectConv direct_;      // planned when the direct kernels run this layer
  WinogradConv wino_fwd_;  // forward: C = IC, K = OC
  WinogradConv wino_bwd_;  // input gradient: C = OC, K = IC on dout, padding 2 - p
  Tensor live_weight_, live_grad_;  // (OC, IC/groups * live taps), only when a tap is dead
  std::shared_ptr<gpu::ConvPlan> gpu_plan_;  // planned on the GPU: cuDNN descriptors, algorithms
  // The GPU's channels-last path (activations in gpu_format_, NHWC): cuDNN takes the filters in
  // that type as (OC, KH, KW, IC/groups), so forward converts the float weights into
  // gpu_weight_ each call, and backward writes the weight gradient fresh into gpu_grad_weight_
  // and adds it, converted, into the float slab. The bias stays float (our NHWC bias kernels).
  Format gpu_format_;
  Tensor gpu_weight_, gpu_grad_weight_;
};

}  // namespace mpicnn
