// What kernels/conv2d.cu (plans, descriptors, the calls that run them) and
// kernels/conv_search.cu (the choice of cuDNN's algorithms) share: one convolution's plan and
// the search's entry points. Internal to kernels/.
#pragma once
#include <map>
#include <string>

#include "common.cuh"

namespace mpicnn::gpu {

// The convolution in cuDNN's int sizes (PyTorch's Conv2d on NCHW), for up to `n` images of
// (c, h, w); made from Conv2d's geometry by conv_plan.
struct ConvDesc {
  int n = 0, c = 0, h = 0, w = 0;  // planned input (N, C, H, W)
  int oc = 0, kh = 1, kw = 1;
  int stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dil_h = 1, dil_w = 1, groups = 1;
  int oh = 0, ow = 0;              // output size (the layer computed it)
};

struct ConvPlan {
  // Descriptors and algorithms for one batch size. Each algorithm keeps the math type cuDNN
  // reported with it: since cuDNN 7.4 the algorithm and the math type together pick the
  // kernel, so the convolution descriptor is set to that math type before each call.
  struct Shape {
    cudnnTensorDescriptor_t x = nullptr;  // (n, c, h, w)
    cudnnTensorDescriptor_t y = nullptr;  // (n, oc, oh, ow)
    cudnnConvolutionFwdAlgo_t fwd{};
    cudnnMathType_t fwd_math = CUDNN_DEFAULT_MATH;
    cudnnConvolutionBwdDataAlgo_t bwd_data{};
    cudnnMathType_t bwd_data_math = CUDNN_DEFAULT_MATH;
    cudnnConvolutionBwdFilterAlgo_t bwd_filter{};
    cudnnMathType_t bwd_filter_math = CUDNN_DEFAULT_MATH;
    size_t workspace = 0;  // bytes the three algorithms need at most
    // Folded inference's fused call (conv_bias_act_forward): its workspace, asked on first use.
    size_t fused_workspace = 0;
    bool fused_sized = false;
  };

  ConvDesc d;
  Format format;                          // of x, y, w, bias (core/format.h)
  Precision precision = Precision::kFp32;  // settings the algorithms were chosen under
  bool deterministic = false;
  cudnnFilterDescriptor_t w = nullptr;          // (oc, c / groups, kh, kw)
  cudnnConvolutionDescriptor_t conv = nullptr;  // padding, stride, dilation, groups
  cudnnTensorDescriptor_t bias = nullptr;       // (1, oc, 1, 1)
  // The fused call's activations (conv_bias_act_plan makes them): ReLU, and none.
  cudnnActivationDescriptor_t relu = nullptr, identity = nullptr;
  std::map<int, Shape> shapes;                  // by batch size; d.n is the measured one

  ConvPlan() = default;
  ConvPlan(const ConvPlan&) = delete;
  ConvPlan& operator=(const ConvPlan&) = delete;
  // Destroys every descriptor (statuses ignored: a destructor must not throw, and destroying a
  // descriptor cannot fail on a valid one).
  ~ConvPlan() {
    for (auto& [n, s] : shapes) {
      if (s.x) cudnnDestroyTensorDescriptor(s.x);
      if (s.y) cudnnDestroyTensorDescriptor(s.y);
    }
    if (bias) cudnnDestroyTensorDescriptor(bias);
    if (relu) cudnnDestroyActivationDescriptor(relu);
    if (identity) cudnnDestroyActivationDescriptor(identity);
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
    if (w) cudnnDestroyFilterDescriptor(w);
  }
};

namespace conv {

// The workspace the search may give an algorithm: a quarter of the free device memory, within
// [256 MiB, 2 GiB]. 256 MiB (the old fixed cap) made ResNet-50's NCHW tf32 convolutions 2x
// slower per training step than 2 GiB (bench/conv_gpu_bench on an H200, bench/RESULTS.md).
// Only the chosen algorithms' needs stay allocated (the shared workspace).
constexpr size_t kMinSearchWorkspace = size_t(256) << 20, kMaxSearchWorkspace = size_t(2) << 30;
size_t search_workspace_cap();

// The math type conv_plan asks cuDNN for, under precision p on tensors of type t.
cudnnMathType_t requested_math(Precision p, Elem t);
// The math type a chosen result runs under: the one it reports, except that FP32 always runs
// FMA (DEFAULT would permit TF32).
cudnnMathType_t exec_math(const ConvPlan& p, cudnnMathType_t reported);
// Sets the plan's convolution descriptor to math type m (before each call: see ConvPlan).
void set_math(const ConvPlan& p, cudnnMathType_t m);
// Workspace bytes of forward algorithm `algo` under math type m at shape s; false where cuDNN
// refuses the combination.
bool forward_workspace(const ConvPlan& p, const ConvPlan::Shape& s, cudnnConvolutionFwdAlgo_t algo,
                       cudnnMathType_t m, size_t* bytes);
// The three directions' algorithms for batch n from cuDNN's heuristics (best first): in each,
// the first acceptable one whose workspace fits in `room` bytes; s.workspace grows to theirs.
void choose_heuristic(const ConvPlan& p, ConvPlan::Shape& s, int n, size_t room);
// The three directions measured at the planned batch (cudnnFind*Ex, workspace up to cap
// bytes): the fastest acceptable of each, and s.workspace sized for them.
void choose_measured(const ConvPlan& p, ConvPlan::Shape& s, size_t cap);

// "conv (n, c, h, w) -> (n, oc, oh, ow), kernel ..., stride ..., groups ...": error messages.
std::string shape_str(const ConvDesc& d, int n);

}  // namespace conv
}  // namespace mpicnn::gpu
