// Conv2d on cuDNN 9's legacy convolution API (PyTorch Conv2d semantics): the per-shape plan
// (descriptors, chosen algorithms) and forward/backward, the GPU side of src/layers/conv2d.cpp.
// Not a convolution of our own, and not the CPU path (im2col + GEMM). Tensors are NCHW float32,
// or in the plan's channels-last format (--gpu-layout nhwc: NHWC float32, bfloat16 or float16
// data and KRSC filters of that type, float math; 16-bit data on the tensor cores).
// The algorithms are chosen by kernels/conv_search.cu (measured at the planned batch, or from
// cuDNN's heuristics when deterministic and for smaller batches), once per distinct
// convolution in the process.
// Workspace: the one shared ctx().workspace, grown by conv_plan (ensure_workspace) to what the
// chosen algorithms need; convolutions run one at a time on ctx().stream, so sharing is safe.
// Folded inference (layers/fold.h): conv_bias_act_forward runs convolution + bias (+ residual)
// (+ ReLU) as one cudnnConvolutionBiasActivationForward on the same plan's descriptors.
#include <algorithm>
#include <array>
#include <map>

#include "conv2d.cuh"
#include "layers/im2col.h"

namespace mpicnn::gpu {

std::string conv::shape_str(const ConvDesc& d, int n) {
  return detail::concat("conv (", n, ", ", d.c, ", ", d.h, ", ", d.w, ") -> (", n, ", ", d.oc,
                        ", ", d.oh, ", ", d.ow, "), kernel ", d.kh, "x", d.kw, ", stride ",
                        d.stride_h, "x", d.stride_w, ", groups ", d.groups);
}

using namespace conv;  // kernels/conv2d.cuh: the search and the helpers it shares

namespace {

// cuDNN's names for a format's memory order and element type.
cudnnTensorFormat_t cudnn_layout(Format f) {
  return f.order == Order::NHWC ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
}
cudnnDataType_t cudnn_dtype(Format f) {
  switch (f.elem) {
    case Elem::F32: return CUDNN_DATA_FLOAT;
    case Elem::BF16: return CUDNN_DATA_BFLOAT16;
    case Elem::F16: return CUDNN_DATA_HALF;
  }
  return CUDNN_DATA_FLOAT;
}

// Creates s.x and s.y for batch n (s is already in the plan, so a throw leaves nothing leaked).
void make_tensors(const ConvPlan& p, ConvPlan::Shape& s, int n) {
  const ConvDesc& d = p.d;
  const cudnnTensorFormat_t layout = cudnn_layout(p.format);
  const cudnnDataType_t type = cudnn_dtype(p.format);
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&s.x));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(s.x, layout, type, n, d.c, d.h, d.w));
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&s.y));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(s.y, layout, type, n, d.oc, d.oh, d.ow));
}


// The descriptors and algorithms for batch n: measured at d.n, made on first use below it.
ConvPlan::Shape& shape_for(ConvPlan& p, int n) {
  CHECK(n > 0 && n <= p.d.n, "conv: batch ", n, " outside the planned 1..", p.d.n);
  auto it = p.shapes.find(n);
  if (it != p.shapes.end()) return it->second;
  ConvPlan::Shape& s = p.shapes[n];
  try {
    make_tensors(p, s, n);
    // A batch below the planned one: the shared workspace as it is (a step may not grow it).
    choose_heuristic(p, s, n, ctx().workspace_bytes);
  } catch (...) {  // leave no half-made entry for the next call to find
    if (s.x) cudnnDestroyTensorDescriptor(s.x);
    if (s.y) cudnnDestroyTensorDescriptor(s.y);
    p.shapes.erase(n);
    throw;
  }
  return s;
}


// The filter, convolution and bias descriptors of p.d (owned by p as soon as they exist).
void make_descriptors(ConvPlan& p) {
  const ConvDesc& d = p.d;
  CUDNN_CHECK(cudnnCreateFilterDescriptor(&p.w));
  CUDNN_CHECK(cudnnSetFilter4dDescriptor(p.w, cudnn_dtype(p.format), cudnn_layout(p.format),
                                         d.oc, d.c / d.groups, d.kh, d.kw));
  CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&p.conv));
  CUDNN_CHECK(cudnnSetConvolution2dDescriptor(p.conv, d.pad_h, d.pad_w, d.stride_h, d.stride_w,
                                              d.dil_h, d.dil_w, CUDNN_CROSS_CORRELATION,
                                              CUDNN_DATA_FLOAT));  // float sums for every type
  CUDNN_CHECK(cudnnSetConvolutionGroupCount(p.conv, d.groups));
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&p.bias));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(p.bias, CUDNN_TENSOR_NCHW, cudnn_dtype(p.format), 1,
                                         d.oc, 1, 1));
}

// The fused call's algorithm: implicit precomputed GEMM, the one cuDNN documents for
// cudnnConvolutionBiasActivationForward with either activation (the identity only with it);
// the forward algorithm measured for the plain convolution may be refused by the fused call.
constexpr cudnnConvolutionFwdAlgo_t kFusedAlgo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;

// The math type the fused call runs under (the plan's precision, as the plain forward).
cudnnMathType_t fused_math(const ConvPlan& p) {
  return exec_math(p, requested_math(p.precision, p.format.elem));
}

// Workspace bytes of the fused call at batch n (shape s), asked once per shape.
size_t fused_workspace(const ConvPlan& p, ConvPlan::Shape& s, int n) {
  if (!s.fused_sized) {
    CHECK(forward_workspace(p, s, kFusedAlgo, fused_math(p), &s.fused_workspace),
          "cuDNN: implicit precomputed GEMM refused for ", shape_str(p.d, n));
    s.fused_sized = true;
  }
  return s.fused_workspace;
}

void make_activation(cudnnActivationDescriptor_t* a, cudnnActivationMode_t mode) {
  CUDNN_CHECK(cudnnCreateActivationDescriptor(a));
  // NaN not propagated: the ReLU maps NaN to 0, as ReLU::forward's x > 0 ? x : 0 does.
  CUDNN_CHECK(cudnnSetActivationDescriptor(*a, mode, CUDNN_NOT_PROPAGATE_NAN, 0.0));
}

// The algorithms chosen for one planned convolution, kept per distinct convolution so that a
// model's repeated shapes (ResNet-50 has 53 convolutions of 22 shapes) are searched once.
struct Choice {
  cudnnConvolutionFwdAlgo_t fwd;
  cudnnMathType_t fwd_math;
  cudnnConvolutionBwdDataAlgo_t bwd_data;
  cudnnMathType_t bwd_data_math;
  cudnnConvolutionBwdFilterAlgo_t bwd_filter;
  cudnnMathType_t bwd_filter_math;
  size_t workspace;
  static Choice of(const ConvPlan::Shape& s) {
    return {s.fwd, s.fwd_math, s.bwd_data, s.bwd_data_math, s.bwd_filter, s.bwd_filter_math,
            s.workspace};
  }
  void apply(ConvPlan::Shape& s) const {
    s.fwd = fwd, s.fwd_math = fwd_math, s.bwd_data = bwd_data, s.bwd_data_math = bwd_data_math;
    s.bwd_filter = bwd_filter, s.bwd_filter_math = bwd_filter_math, s.workspace = workspace;
  }
};
// What a choice depends on: the convolution at its planned batch, the tensors' format and the
// settings the search ran under.
using ChoiceKey = std::array<int, 20>;
ChoiceKey choice_key(const ConvPlan& p) {
  const ConvDesc& d = p.d;
  return {d.n, d.c, d.h, d.w, d.oc, d.kh, d.kw, d.stride_h, d.stride_w, d.pad_h, d.pad_w,
          d.dil_h, d.dil_w, d.groups, d.oh, d.ow, int(p.format.elem), int(p.format.order),
          int(p.precision), int(p.deterministic)};
}
// The process's choices (one GPU per process; plans are made on the host thread that plans).
std::map<ChoiceKey, Choice>& chosen() {
  static std::map<ChoiceKey, Choice> m;
  return m;
}

}  // namespace

std::shared_ptr<ConvPlan> CudaBackend::conv_plan(const ConvGeometry& g, int64_t n, int out_channels,
                                                 int groups, Format format, Precision precision,
                                                 bool deterministic) {
  Context& c = ctx();
  ConvDesc d;  // g in the int sizes of cuDNN's descriptors
  d.n = int(n), d.c = int(g.channels), d.h = int(g.height), d.w = int(g.width);
  d.oc = out_channels, d.kh = int(g.kernel_h), d.kw = int(g.kernel_w);
  d.stride_h = int(g.stride_h), d.stride_w = int(g.stride_w), d.pad_h = int(g.pad_h);
  d.pad_w = int(g.pad_w), d.dil_h = int(g.dilation_h), d.dil_w = int(g.dilation_w);
  d.groups = groups, d.oh = int(g.out_h), d.ow = int(g.out_w);
  CHECK(d.n > 0 && d.c > 0 && d.h > 0 && d.w > 0 && d.oc > 0 && d.oh > 0 && d.ow > 0,
        "conv_plan: empty shape, ", shape_str(d, d.n));
  CHECK(d.groups > 0 && d.c % d.groups == 0 && d.oc % d.groups == 0, "conv_plan: groups ",
        d.groups, " must divide ", d.c, " input and ", d.oc, " output channels");
  auto plan = std::make_shared<ConvPlan>();  // owns each descriptor as soon as it exists
  ConvPlan& p = *plan;
  p.d = d;
  p.format = format;
  CHECK(format.plain() || format.order == Order::NHWC, "conv_plan: ", format_name(format),
        " tensors (plain or NHWC only)");
  p.precision = precision;
  p.deterministic = deterministic;
  make_descriptors(p);
  ConvPlan::Shape& s = p.shapes[d.n];
  make_tensors(p, s, d.n);

  int on = 0, oc = 0, oh = 0, ow = 0;
  CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(p.conv, s.x, p.w, &on, &oc, &oh, &ow));
  CHECK(on == d.n && oc == d.oc && oh == d.oh && ow == d.ow, "conv_plan: cuDNN gives output (",
        on, ", ", oc, ", ", oh, ", ", ow, ") for ", shape_str(d, d.n));

  // Deterministic: a fixed cap, so that the heuristic's choice cannot change with the free
  // memory from one run to the next.
  const size_t cap = std::max(p.deterministic ? kMinSearchWorkspace : search_workspace_cap(),
                              c.workspace_bytes);
  const ChoiceKey key = choice_key(p);
  if (const auto hit = chosen().find(key); hit != chosen().end()) {
    hit->second.apply(s);  // a convolution of this shape was planned before: its choice
  } else {
    if (p.deterministic) {
      // Bit-identical reruns: Find's timings may rank two deterministic algorithms (which
      // round differently) either way from one run to the next; the heuristics' order is fixed.
      choose_heuristic(p, s, d.n, cap);
    } else {
      choose_measured(p, s, cap);
    }
    ++searches_;
    chosen().emplace(key, Choice::of(s));
  }
  ensure_workspace(s.workspace);
  return plan;
}

int64_t CudaBackend::conv_searches() const { return searches_; }

void CudaBackend::conv_forward(ConvPlan& plan, void* y, const void* x, const void* w,
                               const void* bias, int n) {
  if (n == 0) return;
  const Context& c = ctx();
  const ConvPlan::Shape& s = shape_for(plan, n);
  CHECK(s.workspace <= c.workspace_bytes, "conv: workspace of ", c.workspace_bytes,
        " bytes, the algorithms need ", s.workspace);
  const float one = 1.f, zero = 0.f;
  set_math(plan, s.fwd_math);
  // y (n, oc, oh, ow) = conv(x (n, c, h, w), w (oc, c / groups, kh, kw))
  CUDNN_CHECK(cudnnConvolutionForward(c.cudnn, &one, s.x, x, plan.w, w, plan.conv, s.fwd,
                                      c.workspace, c.workspace_bytes, &zero, s.y, y));
  // y += bias (1, oc, 1, 1) broadcast
  if (bias) CUDNN_CHECK(cudnnAddTensor(c.cudnn, &one, plan.bias, bias, &one, s.y, y));
}

void CudaBackend::conv_backward(ConvPlan& plan, void* dx, void* dw, void* dbias,
                                const void* dy, const void* x, const void* w, int n,
                                bool accumulate_params) {
  if (n == 0) return;  // dx is empty, and dw / dbias gain nothing
  const Context& c = ctx();
  const ConvPlan::Shape& s = shape_for(plan, n);
  CHECK(s.workspace <= c.workspace_bytes, "conv: workspace of ", c.workspace_bytes,
        " bytes, the algorithms need ", s.workspace);
  const float one = 1.f, zero = 0.f, param_beta = accumulate_params ? 1.f : 0.f;
  // dbias (1, oc, 1, 1) += (or =) sum of dy (n, oc, oh, ow) over n, oh, ow
  if (dbias)
    CUDNN_CHECK(cudnnConvolutionBackwardBias(c.cudnn, &one, s.y, dy, &param_beta, plan.bias,
                                             dbias));
  // dw (oc, c / groups, kh, kw) += (or =) correlation of x with dy
  if (dw) {
    set_math(plan, s.bwd_filter_math);
    CUDNN_CHECK(cudnnConvolutionBackwardFilter(c.cudnn, &one, s.x, x, s.y, dy, plan.conv,
                                               s.bwd_filter, c.workspace, c.workspace_bytes,
                                               &param_beta, plan.w, dw));
  }
  // dx (n, c, h, w) = transposed convolution of dy with w
  if (dx) {
    set_math(plan, s.bwd_data_math);
    CUDNN_CHECK(cudnnConvolutionBackwardData(c.cudnn, &one, plan.w, w, s.y, dy, plan.conv,
                                             s.bwd_data, c.workspace, c.workspace_bytes, &zero,
                                             s.x, dx));
  }
}

void CudaBackend::conv_bias_act_plan(ConvPlan& plan) {
  if (!plan.relu) make_activation(&plan.relu, CUDNN_ACTIVATION_RELU);
  if (!plan.identity) make_activation(&plan.identity, CUDNN_ACTIVATION_IDENTITY);
  ensure_workspace(fused_workspace(plan, shape_for(plan, plan.d.n), plan.d.n));
  if (plan.format.plain()) return;
  // cuDNN documents the fused call for float and half data; whether it takes this type in
  // NHWC is its own choice. Asked here, at plan time, by one call on one zeroed image, so that
  // a refusal stops the plan with one line instead of the first folded forward.
  struct Trial {  // descriptors of batch 1, destroyed however this ends
    ConvPlan::Shape s;
    ~Trial() {
      if (s.x) cudnnDestroyTensorDescriptor(s.x);
      if (s.y) cudnnDestroyTensorDescriptor(s.y);
    }
  } t;
  make_tensors(plan, t.s, 1);
  const ConvDesc& d = plan.d;
  const size_t e = elem_bytes(plan.format.elem);
  const size_t xb = size_t(d.c) * d.h * d.w * e, yb = size_t(d.oc) * d.oh * d.ow * e;
  const size_t wb = size_t(d.oc) * (d.c / d.groups) * d.kh * d.kw * e, bb = size_t(d.oc) * e;
  size_t wsb = 0;
  CHECK(forward_workspace(plan, t.s, kFusedAlgo, fused_math(plan), &wsb),
        "folded inference: cuDNN refuses implicit precomputed GEMM for ",
        format_name(plan.format), " ", shape_str(d, 1));
  const Context& c = ctx();
  std::shared_ptr<void> x = alloc(xb), y = alloc(yb), z = alloc(yb), w = alloc(wb),
                        b = alloc(bb), ws = wsb ? alloc(wsb) : nullptr;
  for (auto& [p, n] : {std::pair{x.get(), xb}, {y.get(), yb}, {z.get(), yb}, {w.get(), wb},
                       {b.get(), bb}})
    CUDA_CHECK(cudaMemsetAsync(p, 0, n, c.stream));
  set_math(plan, fused_math(plan));
  // Every form conv_bias_act_forward calls: with and without the ReLU, with and without a
  // residual (alpha2 1 on z, or 0 with y standing in).
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  const float one = 1.f, zero = 0.f;
  for (int form = 0; form < 4 && st == CUDNN_STATUS_SUCCESS; ++form) {
    const bool relu = form & 1, residual = form & 2;
    st = cudnnConvolutionBiasActivationForward(
        c.cudnn, &one, t.s.x, x.get(), plan.w, w.get(), plan.conv, kFusedAlgo, ws.get(), wsb,
        residual ? &one : &zero, t.s.y, residual ? z.get() : y.get(), plan.bias, b.get(),
        relu ? plan.relu : plan.identity, t.s.y, y.get());
  }
  CUDA_CHECK(cudaStreamSynchronize(c.stream));  // before the temporaries go back
  CHECK(st == CUDNN_STATUS_SUCCESS, "folded inference (MPICNN_GPU_FOLD): cuDNN's fused "
        "convolution refuses ", format_name(plan.format), " tensors (", cudnnGetErrorString(st),
        ") for ", shape_str(d, 1), "; unset MPICNN_GPU_FOLD or run with --gpu-layout nchw");
}

void CudaBackend::conv_bias_act_forward(ConvPlan& plan, void* y, const void* x, const void* w,
                                        const void* bias, const void* z, bool relu, int n) {
  if (n == 0) return;
  CHECK(plan.relu && bias, "conv_bias_act_forward: ",
        plan.relu ? "no bias" : "the plan was not readied (conv_bias_act_plan)");
  const Context& c = ctx();
  ConvPlan::Shape& s = shape_for(plan, n);
  const size_t need = fused_workspace(plan, s, n);
  CHECK(need <= c.workspace_bytes, "conv: workspace of ", c.workspace_bytes,
        " bytes, the fused convolution needs ", need);
  const float one = 1.f, alpha2 = z ? 1.f : 0.f;
  set_math(plan, fused_math(plan));
  // y (n, oc, oh, ow) = act(conv(x, w) + alpha2 * z + bias (1, oc, 1, 1)); without z, alpha2 = 0
  // and y stands in for z, as TensorFlow passes its output when it has no side input. All in
  // the plan's format (the bias of its type), float compute.
  CUDNN_CHECK(cudnnConvolutionBiasActivationForward(
      c.cudnn, &one, s.x, x, plan.w, w, plan.conv, kFusedAlgo, c.workspace, c.workspace_bytes,
      &alpha2, s.y, z ? z : y, plan.bias, bias, relu ? plan.relu : plan.identity, s.y, y));
}

}  // namespace mpicnn::gpu
