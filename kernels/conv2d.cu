// Conv2d on cuDNN 9's legacy convolution API (NCHW float32, PyTorch Conv2d semantics): the
// per-shape plan (descriptors, chosen algorithms) and forward/backward. Not an implementation of
// convolution of our own, and not the CPU path (src/layers/conv2d.cpp, im2col + sgemm).
//
// Algorithms: conv_plan measures every forward / backward-data / backward-filter algorithm once
// at the planned batch d.n (cudnnFind*AlgorithmEx on temporary buffers, with a workspace cap of
// max(256 MiB, the current workspace)) and keeps the fastest that succeeded (under FP32 never
// TF32). Under set_deterministic it measures nothing: it takes cuDNN's heuristic order (fixed,
// unlike timings) and the first deterministic algorithm that fits the cap. A smaller batch
// (the last partial batch of an evaluation) gets its descriptors on first use, with algorithms
// from cuDNN's heuristics that fit the workspace already there: no measuring, no allocation.
// Workspace: the one shared ctx().workspace, grown by conv_plan (ensure_workspace) to what the
// chosen algorithms need; convolutions run one at a time on ctx().stream, so sharing is safe.
#include <algorithm>
#include <map>
#include <vector>

#include "common.cuh"

namespace mpicnn::gpu {

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
  };

  ConvDesc d;
  Precision precision = Precision::FP32;  // settings the algorithms were chosen under
  bool deterministic = false;
  cudnnFilterDescriptor_t w = nullptr;          // (oc, c / groups, kh, kw)
  cudnnConvolutionDescriptor_t conv = nullptr;  // padding, stride, dilation, groups
  cudnnTensorDescriptor_t bias = nullptr;       // (1, oc, 1, 1)
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
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
    if (w) cudnnDestroyFilterDescriptor(w);
  }
};

namespace {

constexpr size_t kFindWorkspaceCap = size_t(256) << 20;

// The math type conv_plan asks cuDNN for. FP32 forbids TF32 (FMA only). TF32 is cuDNN's default
// for float tensors. BF16 runs TF32 too: cuDNN has no math mode converting fp32 tensors to bf16
// (ALLOW_CONVERSION converts to fp16 only), so the nearest it offers is TF32. FP16 lets the
// tensor cores run on fp16 conversions of the fp32 data.
cudnnMathType_t requested_math(Precision p) {
  switch (p) {
    case Precision::FP32: return CUDNN_FMA_MATH;
    case Precision::TF32: return CUDNN_DEFAULT_MATH;
    case Precision::BF16: return CUDNN_DEFAULT_MATH;
    case Precision::FP16: return CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
  }
  return CUDNN_FMA_MATH;
}

// Whether a Find / heuristic result may be used under the plan's settings. Under FP32 no
// tensor-op results (asked for FMA math, cuDNN should report FMA; a result it labels DEFAULT
// still runs under FMA math, see exec_math).
template <typename Perf>
bool acceptable(const Perf& r, const ConvPlan& p) {
  if (r.status != CUDNN_STATUS_SUCCESS) return false;
  if (p.deterministic && r.determinism != CUDNN_DETERMINISTIC) return false;
  if (p.precision == Precision::FP32 && r.mathType != CUDNN_FMA_MATH &&
      r.mathType != CUDNN_DEFAULT_MATH)
    return false;
  return true;
}

// The math type a chosen result runs under: the one it reports, except that FP32 always runs
// FMA (DEFAULT would permit TF32).
cudnnMathType_t exec_math(const ConvPlan& p, cudnnMathType_t reported) {
  return p.precision == Precision::FP32 ? CUDNN_FMA_MATH : reported;
}

// The fastest acceptable measured result, or null.
template <typename Perf>
const Perf* fastest(const std::vector<Perf>& results, int count, const ConvPlan& p,
                    size_t cap) {
  const Perf* best = nullptr;
  for (int i = 0; i < count; ++i) {
    const Perf& r = results[size_t(i)];
    if (!acceptable(r, p) || r.memory > cap) continue;
    if (!best || r.time < best->time) best = &r;
  }
  return best;
}

void set_math(const ConvPlan& p, cudnnMathType_t m) {
  CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv, m));
}

// Workspace bytes of each direction's algorithm under math type m; false where cuDNN refuses
// the combination (heuristic candidates are skipped then, not fatal).
bool fwd_workspace(const ConvPlan& p, const ConvPlan::Shape& s,
                   cudnnConvolutionFwdAlgo_t algo, cudnnMathType_t m, size_t* bytes) {
  set_math(p, m);
  return cudnnGetConvolutionForwardWorkspaceSize(ctx().cudnn, s.x, p.w, p.conv, s.y, algo,
                                                 bytes) == CUDNN_STATUS_SUCCESS;
}
bool bwd_data_workspace(const ConvPlan& p, const ConvPlan::Shape& s,
                        cudnnConvolutionBwdDataAlgo_t algo, cudnnMathType_t m, size_t* bytes) {
  set_math(p, m);
  return cudnnGetConvolutionBackwardDataWorkspaceSize(ctx().cudnn, p.w, s.y, p.conv, s.x, algo,
                                                      bytes) == CUDNN_STATUS_SUCCESS;
}
bool bwd_filter_workspace(const ConvPlan& p, const ConvPlan::Shape& s,
                          cudnnConvolutionBwdFilterAlgo_t algo, cudnnMathType_t m,
                          size_t* bytes) {
  set_math(p, m);
  return cudnnGetConvolutionBackwardFilterWorkspaceSize(ctx().cudnn, s.x, s.y, p.conv, p.w,
                                                        algo, bytes) == CUDNN_STATUS_SUCCESS;
}

std::string shape_str(const ConvDesc& d, int n) {
  return detail::concat("conv (", n, ", ", d.c, ", ", d.h, ", ", d.w, ") -> (", n, ", ", d.oc,
                        ", ", d.oh, ", ", d.ow, "), kernel ", d.kh, "x", d.kw, ", stride ",
                        d.stride_h, "x", d.stride_w, ", groups ", d.groups);
}

// Creates s.x and s.y for batch n (s is already in the plan, so a throw leaves nothing leaked).
void make_tensors(const ConvPlan& p, ConvPlan::Shape& s, int n) {
  const ConvDesc& d = p.d;
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&s.x));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(s.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, d.c, d.h,
                                         d.w));
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&s.y));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(s.y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, d.oc, d.oh,
                                         d.ow));
}

// Algorithms from cuDNN's heuristics (best first): for each direction the first acceptable one
// whose workspace fits in `room` bytes.
void choose_heuristic(const ConvPlan& p, ConvPlan::Shape& s, int n, size_t room) {
  cudnnHandle_t h = ctx().cudnn;
  const cudnnMathType_t math = requested_math(p.precision);
  int max_count = 0, count = 0;
  bool found = false;

  CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &max_count));
  std::vector<cudnnConvolutionFwdAlgoPerf_t> fwd(size_t(std::max(max_count, 1)));
  set_math(p, math);
  CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, s.x, p.w, p.conv, s.y, max_count, &count,
                                                     fwd.data()));
  for (int i = 0; i < count && !found; ++i) {
    const auto& r = fwd[size_t(i)];
    size_t bytes = 0;
    if (!acceptable(r, p) || !fwd_workspace(p, s, r.algo, exec_math(p, r.mathType), &bytes) || bytes > room)
      continue;
    s.fwd = r.algo, s.fwd_math = exec_math(p, r.mathType), s.workspace = std::max(s.workspace, bytes);
    found = true;
  }
  CHECK(found, "cuDNN: no usable forward algorithm for ", shape_str(p.d, n), " within ", room,
        " workspace bytes");

  found = false;
  CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &max_count));
  std::vector<cudnnConvolutionBwdDataAlgoPerf_t> bd(size_t(std::max(max_count, 1)));
  set_math(p, math);
  CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p.w, s.y, p.conv, s.x, max_count,
                                                          &count, bd.data()));
  for (int i = 0; i < count && !found; ++i) {
    const auto& r = bd[size_t(i)];
    size_t bytes = 0;
    if (!acceptable(r, p) || !bwd_data_workspace(p, s, r.algo, exec_math(p, r.mathType), &bytes) ||
        bytes > room)
      continue;
    s.bwd_data = r.algo, s.bwd_data_math = exec_math(p, r.mathType), s.workspace = std::max(s.workspace, bytes);
    found = true;
  }
  CHECK(found, "cuDNN: no usable backward-data algorithm for ", shape_str(p.d, n), " within ",
        room, " workspace bytes");

  found = false;
  CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &max_count));
  std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> bf(size_t(std::max(max_count, 1)));
  set_math(p, math);
  CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, s.x, s.y, p.conv, p.w, max_count,
                                                            &count, bf.data()));
  for (int i = 0; i < count && !found; ++i) {
    const auto& r = bf[size_t(i)];
    size_t bytes = 0;
    if (!acceptable(r, p) || !bwd_filter_workspace(p, s, r.algo, exec_math(p, r.mathType), &bytes) ||
        bytes > room)
      continue;
    s.bwd_filter = r.algo, s.bwd_filter_math = exec_math(p, r.mathType);
    s.workspace = std::max(s.workspace, bytes);
    found = true;
  }
  CHECK(found, "cuDNN: no usable backward-filter algorithm for ", shape_str(p.d, n), " within ",
        room, " workspace bytes");
}

// The descriptors and algorithms for batch n: measured at d.n, made on first use below it.
ConvPlan::Shape& shape_for(ConvPlan& p, int n) {
  const Context& c = ctx();
  CHECK(n > 0 && n <= p.d.n, "conv: batch ", n, " outside the planned 1..", p.d.n);
  CHECK(p.precision == c.precision && p.deterministic == c.deterministic,
        "conv: plan made under precision ", precision_name(p.precision),
        p.deterministic ? " (deterministic)" : "", ", used under ", precision_name(c.precision),
        c.deterministic ? " (deterministic)" : "",
        ": set precision and determinism before planning");
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

}  // namespace

std::shared_ptr<ConvPlan> CudaBackend::conv_plan(const ConvDesc& d) {
  Context& c = ctx();
  CHECK(d.n > 0 && d.c > 0 && d.h > 0 && d.w > 0 && d.oc > 0 && d.oh > 0 && d.ow > 0,
        "conv_plan: empty shape, ", shape_str(d, d.n));
  CHECK(d.groups > 0 && d.c % d.groups == 0 && d.oc % d.groups == 0, "conv_plan: groups ",
        d.groups, " must divide ", d.c, " input and ", d.oc, " output channels");
  auto plan = std::make_shared<ConvPlan>();  // owns each descriptor as soon as it exists
  ConvPlan& p = *plan;
  p.d = d;
  p.precision = c.precision;
  p.deterministic = c.deterministic;

  CUDNN_CHECK(cudnnCreateFilterDescriptor(&p.w));
  CUDNN_CHECK(cudnnSetFilter4dDescriptor(p.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, d.oc,
                                         d.c / d.groups, d.kh, d.kw));
  CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&p.conv));
  CUDNN_CHECK(cudnnSetConvolution2dDescriptor(p.conv, d.pad_h, d.pad_w, d.stride_h, d.stride_w,
                                              d.dil_h, d.dil_w, CUDNN_CROSS_CORRELATION,
                                              CUDNN_DATA_FLOAT));
  CUDNN_CHECK(cudnnSetConvolutionGroupCount(p.conv, d.groups));
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&p.bias));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(p.bias, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, d.oc, 1,
                                         1));
  ConvPlan::Shape& s = p.shapes[d.n];
  make_tensors(p, s, d.n);

  int on = 0, oc = 0, oh = 0, ow = 0;
  CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(p.conv, s.x, p.w, &on, &oc, &oh, &ow));
  CHECK(on == d.n && oc == d.oc && oh == d.oh && ow == d.ow, "conv_plan: cuDNN gives output (",
        on, ", ", oc, ", ", oh, ", ", ow, ") for ", shape_str(d, d.n));

  const size_t cap = std::max(kFindWorkspaceCap, c.workspace_bytes);
  if (p.deterministic) {
    // Bit-identical reruns: Find's timings may rank two deterministic algorithms (which round
    // differently) either way from one run to the next; the heuristics' order is fixed.
    choose_heuristic(p, s, d.n, cap);
    ensure_workspace(s.workspace);
    return plan;
  }

  // Temporary operands of the planned sizes, zeroed so no NaN or denormal skews the timings.
  // Backward-data writes its dx into the x buffer and backward-filter its dw into the w
  // buffer: the contents are scratch either way. Freed when this returns.
  const size_t x_bytes = size_t(d.n) * d.c * d.h * d.w * sizeof(float);
  const size_t y_bytes = size_t(d.n) * d.oc * d.oh * d.ow * sizeof(float);
  const size_t w_bytes = size_t(d.oc) * (d.c / d.groups) * d.kh * d.kw * sizeof(float);
  std::shared_ptr<void> xb = backend().alloc(x_bytes), yb = backend().alloc(y_bytes),
                        wb = backend().alloc(w_bytes);
  CUDA_CHECK(cudaMemsetAsync(xb.get(), 0, x_bytes, c.stream));
  CUDA_CHECK(cudaMemsetAsync(yb.get(), 0, y_bytes, c.stream));
  CUDA_CHECK(cudaMemsetAsync(wb.get(), 0, w_bytes, c.stream));
  void* find_ws = ensure_workspace(cap);
  const cudnnMathType_t math = requested_math(p.precision);

  int max_count = 0, count = 0;
  CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(c.cudnn, &max_count));
  std::vector<cudnnConvolutionFwdAlgoPerf_t> fwd(size_t(std::max(max_count, 1)));
  set_math(p, math);
  CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(c.cudnn, s.x, xb.get(), p.w, wb.get(),
                                                     p.conv, s.y, yb.get(), max_count, &count,
                                                     fwd.data(), find_ws, cap));
  const auto* f = fastest(fwd, count, p, cap);
  CHECK(f, "cuDNN: no usable forward algorithm for ", shape_str(d, d.n),
        p.deterministic ? " (deterministic)" : "");

  CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(c.cudnn, &max_count));
  std::vector<cudnnConvolutionBwdDataAlgoPerf_t> bd(size_t(std::max(max_count, 1)));
  set_math(p, math);
  CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(c.cudnn, p.w, wb.get(), s.y, yb.get(),
                                                          p.conv, s.x, xb.get(), max_count,
                                                          &count, bd.data(), find_ws, cap));
  const auto* b = fastest(bd, count, p, cap);
  CHECK(b, "cuDNN: no usable backward-data algorithm for ", shape_str(d, d.n),
        p.deterministic ? " (deterministic)" : "");

  CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(c.cudnn, &max_count));
  std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> bf(size_t(std::max(max_count, 1)));
  set_math(p, math);
  CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(c.cudnn, s.x, xb.get(), s.y,
                                                            yb.get(), p.conv, p.w, wb.get(),
                                                            max_count, &count, bf.data(),
                                                            find_ws, cap));
  const auto* g = fastest(bf, count, p, cap);
  CHECK(g, "cuDNN: no usable backward-filter algorithm for ", shape_str(d, d.n),
        p.deterministic ? " (deterministic)" : "");

  s.fwd = f->algo, s.fwd_math = exec_math(p, f->mathType);
  s.bwd_data = b->algo, s.bwd_data_math = exec_math(p, b->mathType);
  s.bwd_filter = g->algo, s.bwd_filter_math = exec_math(p, g->mathType);
  // The workspace each needs, as reported by Find and as asked again under its own math type
  // (the larger, to be safe).
  size_t fb = 0, bb = 0, gb = 0;
  CHECK(fwd_workspace(p, s, s.fwd, s.fwd_math, &fb), "cuDNN: forward workspace size for ",
        shape_str(d, d.n));
  CHECK(bwd_data_workspace(p, s, s.bwd_data, s.bwd_data_math, &bb),
        "cuDNN: backward-data workspace size for ", shape_str(d, d.n));
  CHECK(bwd_filter_workspace(p, s, s.bwd_filter, s.bwd_filter_math, &gb),
        "cuDNN: backward-filter workspace size for ", shape_str(d, d.n));
  s.workspace = std::max({f->memory, b->memory, g->memory, fb, bb, gb});
  // Find ran on the stream: let it finish before the workspace may move and the temporaries
  // go back.
  CUDA_CHECK(cudaStreamSynchronize(c.stream));
  ensure_workspace(s.workspace);
  return plan;
}

void CudaBackend::conv_forward(ConvPlan& plan, float* y, const float* x, const float* w,
                               const float* bias, int n) {
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

void CudaBackend::conv_backward(ConvPlan& plan, float* dx, float* dw, float* dbias,
                                const float* dy, const float* x, const float* w, int n) {
  if (n == 0) return;  // dx is empty, and dw / dbias gain nothing
  const Context& c = ctx();
  const ConvPlan::Shape& s = shape_for(plan, n);
  CHECK(s.workspace <= c.workspace_bytes, "conv: workspace of ", c.workspace_bytes,
        " bytes, the algorithms need ", s.workspace);
  const float one = 1.f, zero = 0.f;
  // dbias (1, oc, 1, 1) += sum of dy (n, oc, oh, ow) over n, oh, ow
  if (dbias)
    CUDNN_CHECK(cudnnConvolutionBackwardBias(c.cudnn, &one, s.y, dy, &one, plan.bias, dbias));
  // dw (oc, c / groups, kh, kw) += correlation of x with dy
  if (dw) {
    set_math(plan, s.bwd_filter_math);
    CUDNN_CHECK(cudnnConvolutionBackwardFilter(c.cudnn, &one, s.x, x, s.y, dy, plan.conv,
                                               s.bwd_filter, c.workspace, c.workspace_bytes,
                                               &one, plan.w, dw));
  }
  // dx (n, c, h, w) = transposed convolution of dy with w
  if (dx) {
    set_math(plan, s.bwd_data_math);
    CUDNN_CHECK(cudnnConvolutionBackwardData(c.cudnn, &one, plan.w, w, s.y, dy, plan.conv,
                                             s.bwd_data, c.workspace, c.workspace_bytes, &zero,
                                             s.x, dx));
  }
}

}  // namespace mpicnn::gpu
