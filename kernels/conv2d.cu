// Conv2d on cuDNN 9's legacy convolution API (PyTorch Conv2d semantics): the per-shape plan
// (descriptors, chosen algorithms) and forward/backward, the GPU side of src/layers/conv2d.cpp.
// Not a convolution of our own, and not the CPU path (im2col + GEMM). Tensors are NCHW float32,
// or in the plan's channels-last format (--gpu-layout nhwc: NHWC float32, bfloat16 or float16
// data and KRSC filters of that type, float math; 16-bit data on the tensor cores).
//
// Algorithms: conv_plan measures every forward / backward-data / backward-filter algorithm once
// at the planned batch d.n (cudnnFind*AlgorithmEx on temporary buffers and a temporary
// workspace of a quarter of the free memory within [256 MiB, 2 GiB], or the current workspace
// if larger) and keeps the fastest that succeeded (under FP32 never TF32). Under
// set_deterministic it measures nothing: it takes cuDNN's heuristic order (fixed,
// unlike timings) and the first deterministic algorithm that fits 256 MiB. A smaller batch
// (the last partial batch of an evaluation) gets its descriptors on first use, with algorithms
// from cuDNN's heuristics that fit the workspace already there: no measuring, no allocation.
// The search is written once, over a traits struct per direction (Forward, BackwardData,
// BackwardFilter: cuDNN's algorithm and result types, its count / heuristic / Find / workspace
// calls with their descriptor order, and where the choice is kept).
// Workspace: the one shared ctx().workspace, grown by conv_plan (ensure_workspace) to what the
// chosen algorithms need; convolutions run one at a time on ctx().stream, so sharing is safe.
// Folded inference (layers/fold.h): conv_bias_act_forward runs convolution + bias (+ residual)
// (+ ReLU) as one cudnnConvolutionBiasActivationForward on the same plan's descriptors.
// Over 500 lines: the plan (descriptors, the search over the three directions, the workspace)
// and the calls that run it are one cuDNN object's life; split, each half would restate the
// descriptor layout.
#include <algorithm>
#include <array>
#include <map>
#include <vector>

#include "common.cuh"
#include "layers/im2col.h"

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

namespace {

// The workspace the search may give an algorithm: a quarter of the free device memory, within
// [256 MiB, 2 GiB]. 256 MiB (the old fixed cap) made ResNet-50's NCHW tf32 convolutions 2x
// slower per training step than 2 GiB (bench/conv_gpu_bench on an H200, bench/RESULTS.md).
// Only the chosen algorithms' needs stay allocated (the shared workspace).
constexpr size_t kMinSearchWorkspace = size_t(256) << 20, kMaxSearchWorkspace = size_t(2) << 30;
size_t search_workspace_cap() {
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return std::clamp(free_bytes / 4, kMinSearchWorkspace, kMaxSearchWorkspace);
}

// The math type conv_plan asks cuDNN for. FP32 forbids TF32 (FMA only). TF32 is cuDNN's default
// for float tensors. BF16 runs TF32 too: cuDNN has no math mode converting fp32 tensors to bf16
// (ALLOW_CONVERSION converts to fp16 only), so the nearest it offers is TF32. FP16 lets the
// tensor cores run on fp16 conversions of the fp32 data.
cudnnMathType_t requested_math(Precision p, Elem t) {
  if (t != Elem::F32) return CUDNN_TENSOR_OP_MATH;  // 16-bit data: tensor cores, float sums
  switch (p) {
    case Precision::kFp32: return CUDNN_FMA_MATH;
    case Precision::kTf32: return CUDNN_DEFAULT_MATH;
    case Precision::kBf16: return CUDNN_DEFAULT_MATH;
    case Precision::kFp16: return CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
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
  if (p.precision == Precision::kFp32 && r.mathType != CUDNN_FMA_MATH &&
      r.mathType != CUDNN_DEFAULT_MATH)
    return false;
  return true;
}

// The math type a chosen result runs under: the one it reports, except that FP32 always runs
// FMA (DEFAULT would permit TF32).
cudnnMathType_t exec_math(const ConvPlan& p, cudnnMathType_t reported) {
  return p.precision == Precision::kFp32 ? CUDNN_FMA_MATH : reported;
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

// The temporary operands the measured search runs on (device memory of the planned sizes).
struct Operands {
  void* x;  // (n, c, h, w)
  void* y;  // (n, oc, oh, ow)
  void* w;  // (oc, c / groups, kh, kw)
};

// One direction of the convolution as the algorithm search sees it: cuDNN's algorithm and
// result types, its calls that count, rank (heuristics), measure (Find) and size (workspace)
// the algorithms, and the Shape fields that keep the choice. The search below is written once
// over these; the three directions differ only in which descriptors go where.
struct Forward {
  using Algo = cudnnConvolutionFwdAlgo_t;
  using Perf = cudnnConvolutionFwdAlgoPerf_t;
  static constexpr const char* kName = "forward";
  static cudnnStatus_t max_count(cudnnHandle_t h, int* count) {
    return cudnnGetConvolutionForwardAlgorithmMaxCount(h, count);
  }
  static cudnnStatus_t heuristic(cudnnHandle_t h, const ConvPlan& p, const ConvPlan::Shape& s,
                                 int max_count, int* count, Perf* results) {
    return cudnnGetConvolutionForwardAlgorithm_v7(h, s.x, p.w, p.conv, s.y, max_count, count,
                                                  results);
  }
  static cudnnStatus_t find(cudnnHandle_t h, const ConvPlan& p, const ConvPlan::Shape& s,
                            const Operands& o, int max_count, int* count, Perf* results,
                            void* ws, size_t ws_bytes) {
    return cudnnFindConvolutionForwardAlgorithmEx(h, s.x, o.x, p.w, o.w, p.conv, s.y, o.y,
                                                  max_count, count, results, ws, ws_bytes);
  }
  static cudnnStatus_t workspace(cudnnHandle_t h, const ConvPlan& p, const ConvPlan::Shape& s,
                                 Algo algo, size_t* bytes) {
    return cudnnGetConvolutionForwardWorkspaceSize(h, s.x, p.w, p.conv, s.y, algo, bytes);
  }
  static Algo& algo(ConvPlan::Shape& s) { return s.fwd; }
  static cudnnMathType_t& math(ConvPlan::Shape& s) { return s.fwd_math; }
};

struct BackwardData {
  using Algo = cudnnConvolutionBwdDataAlgo_t;
  using Perf = cudnnConvolutionBwdDataAlgoPerf_t;
  static constexpr const char* kName = "backward-data";
  static cudnnStatus_t max_count(cudnnHandle_t h, int* count) {
    return cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, count);
  }
  static cudnnStatus_t heuristic(cudnnHandle_t h, const ConvPlan& p, const ConvPlan::Shape& s,
                                 int max_count, int* count, Perf* results) {
    return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p.w, s.y, p.conv, s.x, max_count,
                                                       count, results);
  }
  // dx is written into the x buffer: scratch.
  static cudnnStatus_t find(cudnnHandle_t h, const ConvPlan& p, const ConvPlan::Shape& s,
                            const Operands& o, int max_count, int* count, Perf* results,
                            void* ws, size_t ws_bytes) {
    return cudnnFindConvolutionBackwardDataAlgorithmEx(h, p.w, o.w, s.y, o.y, p.conv, s.x, o.x,
                                                       max_count, count, results, ws,
                                                       ws_bytes);
  }
  static cudnnStatus_t workspace(cudnnHandle_t h, const ConvPlan& p, const ConvPlan::Shape& s,
                                 Algo algo, size_t* bytes) {
    return cudnnGetConvolutionBackwardDataWorkspaceSize(h, p.w, s.y, p.conv, s.x, algo, bytes);
  }
  static Algo& algo(ConvPlan::Shape& s) { return s.bwd_data; }
  static cudnnMathType_t& math(ConvPlan::Shape& s) { return s.bwd_data_math; }
};

struct BackwardFilter {
  using Algo = cudnnConvolutionBwdFilterAlgo_t;
  using Perf = cudnnConvolutionBwdFilterAlgoPerf_t;
  static constexpr const char* kName = "backward-filter";
  static cudnnStatus_t max_count(cudnnHandle_t h, int* count) {
    return cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, count);
  }
  static cudnnStatus_t heuristic(cudnnHandle_t h, const ConvPlan& p, const ConvPlan::Shape& s,
                                 int max_count, int* count, Perf* results) {
    return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, s.x, s.y, p.conv, p.w, max_count,
                                                         count, results);
  }
  // dw is written into the w buffer: scratch.
  static cudnnStatus_t find(cudnnHandle_t h, const ConvPlan& p, const ConvPlan::Shape& s,
                            const Operands& o, int max_count, int* count, Perf* results,
                            void* ws, size_t ws_bytes) {
    return cudnnFindConvolutionBackwardFilterAlgorithmEx(h, s.x, o.x, s.y, o.y, p.conv, p.w,
                                                         o.w, max_count, count, results, ws,
                                                         ws_bytes);
  }
  static cudnnStatus_t workspace(cudnnHandle_t h, const ConvPlan& p, const ConvPlan::Shape& s,
                                 Algo algo, size_t* bytes) {
    return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, s.x, s.y, p.conv, p.w, algo,
                                                          bytes);
  }
  static Algo& algo(ConvPlan::Shape& s) { return s.bwd_filter; }
  static cudnnMathType_t& math(ConvPlan::Shape& s) { return s.bwd_filter_math; }
};

// Workspace bytes of direction Dir's algorithm under math type m; false where cuDNN refuses
// the combination (heuristic candidates are skipped then, not fatal).
template <typename Dir>
bool workspace(const ConvPlan& p, const ConvPlan::Shape& s, typename Dir::Algo algo,
               cudnnMathType_t m, size_t* bytes) {
  set_math(p, m);
  return Dir::workspace(ctx().cudnn, p, s, algo, bytes) == CUDNN_STATUS_SUCCESS;
}

std::string shape_str(const ConvDesc& d, int n) {
  return detail::concat("conv (", n, ", ", d.c, ", ", d.h, ", ", d.w, ") -> (", n, ", ", d.oc,
                        ", ", d.oh, ", ", d.ow, "), kernel ", d.kh, "x", d.kw, ", stride ",
                        d.stride_h, "x", d.stride_w, ", groups ", d.groups);
}

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

// Direction Dir's algorithm from cuDNN's heuristics (best first): the first acceptable one
// whose workspace fits in `room` bytes.
template <typename Dir>
void choose_heuristic(const ConvPlan& p, ConvPlan::Shape& s, int n, size_t room) {
  cudnnHandle_t h = ctx().cudnn;
  int max_count = 0, count = 0;
  CUDNN_CHECK(Dir::max_count(h, &max_count));
  std::vector<typename Dir::Perf> results(size_t(std::max(max_count, 1)));
  set_math(p, requested_math(p.precision, p.format.elem));
  CUDNN_CHECK(Dir::heuristic(h, p, s, max_count, &count, results.data()));
  bool found = false;
  for (int i = 0; i < count && !found; ++i) {
    const auto& r = results[size_t(i)];
    const cudnnMathType_t m = exec_math(p, r.mathType);
    size_t bytes = 0;
    if (!acceptable(r, p) || !workspace<Dir>(p, s, r.algo, m, &bytes) || bytes > room) continue;
    Dir::algo(s) = r.algo, Dir::math(s) = m, s.workspace = std::max(s.workspace, bytes);
    found = true;
  }
  CHECK(found, "cuDNN: no usable ", Dir::kName, " algorithm for ", shape_str(p.d, n),
        " within ", room, " workspace bytes");
}

// All three directions from the heuristics, forward first.
void choose_heuristic(const ConvPlan& p, ConvPlan::Shape& s, int n, size_t room) {
  choose_heuristic<Forward>(p, s, n, room);
  choose_heuristic<BackwardData>(p, s, n, room);
  choose_heuristic<BackwardFilter>(p, s, n, room);
}

// Direction Dir's algorithms measured by cudnnFind*Ex at the planned batch on the operands o
// (workspace ws of cap bytes): the fastest acceptable result.
template <typename Dir>
typename Dir::Perf find_fastest(const ConvPlan& p, const ConvPlan::Shape& s, const Operands& o,
                                void* ws, size_t cap) {
  cudnnHandle_t h = ctx().cudnn;
  int max_count = 0, count = 0;
  CUDNN_CHECK(Dir::max_count(h, &max_count));
  std::vector<typename Dir::Perf> results(size_t(std::max(max_count, 1)));
  set_math(p, requested_math(p.precision, p.format.elem));
  CUDNN_CHECK(Dir::find(h, p, s, o, max_count, &count, results.data(), ws, cap));
  const auto* best = fastest(results, count, p, cap);
  CHECK(best, "cuDNN: no usable ", Dir::kName, " algorithm for ", shape_str(p.d, p.d.n),
        p.deterministic ? " (deterministic)" : "");
  return *best;
}

// Keeps a measured result in s, and returns the workspace it needs: as reported by Find and
// as asked again under its own math type (the larger, to be safe).
template <typename Dir>
size_t keep_measured(const ConvPlan& p, ConvPlan::Shape& s, const typename Dir::Perf& r) {
  Dir::algo(s) = r.algo, Dir::math(s) = exec_math(p, r.mathType);
  size_t bytes = 0;
  CHECK(workspace<Dir>(p, s, Dir::algo(s), Dir::math(s), &bytes), "cuDNN: ", Dir::kName,
        " workspace size for ", shape_str(p.d, p.d.n));
  return std::max(r.memory, bytes);
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

// Measures the three directions at the planned batch (not deterministic: see conv_plan) and
// sizes s.workspace for the fastest of each.
void choose_measured(const ConvPlan& p, ConvPlan::Shape& s, size_t cap) {
  const ConvDesc& d = p.d;
  const Context& c = ctx();
  // Temporary operands of the planned sizes, zeroed so no NaN or denormal skews the timings.
  // Backward-data writes its dx into the x buffer and backward-filter its dw into the w
  // buffer: the contents are scratch either way. Freed when this returns.
  const size_t e = elem_bytes(p.format.elem);
  const size_t x_bytes = size_t(d.n) * d.c * d.h * d.w * e;
  const size_t y_bytes = size_t(d.n) * d.oc * d.oh * d.ow * e;
  const size_t w_bytes = size_t(d.oc) * (d.c / d.groups) * d.kh * d.kw * e;
  std::shared_ptr<void> xb = backend().alloc(x_bytes), yb = backend().alloc(y_bytes),
                        wb = backend().alloc(w_bytes);
  CUDA_CHECK(cudaMemsetAsync(xb.get(), 0, x_bytes, c.stream));
  CUDA_CHECK(cudaMemsetAsync(yb.get(), 0, y_bytes, c.stream));
  CUDA_CHECK(cudaMemsetAsync(wb.get(), 0, w_bytes, c.stream));
  // The search's own workspace, freed when this returns.
  std::shared_ptr<void> find_ws_owner = backend().alloc(cap);
  void* find_ws = find_ws_owner.get();
  const Operands o{xb.get(), yb.get(), wb.get()};

  const auto f = find_fastest<Forward>(p, s, o, find_ws, cap);
  const auto b = find_fastest<BackwardData>(p, s, o, find_ws, cap);
  const auto g = find_fastest<BackwardFilter>(p, s, o, find_ws, cap);
  const size_t fb = keep_measured<Forward>(p, s, f);
  const size_t bb = keep_measured<BackwardData>(p, s, b);
  const size_t gb = keep_measured<BackwardFilter>(p, s, g);
  s.workspace = std::max({fb, bb, gb});
  // Find ran on the stream: let it finish before the workspace may move and the temporaries
  // go back.
  CUDA_CHECK(cudaStreamSynchronize(c.stream));
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
    CHECK(workspace<Forward>(p, s, kFusedAlgo, fused_math(p), &s.fused_workspace),
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
  CHECK(workspace<Forward>(plan, t.s, kFusedAlgo, fused_math(plan), &wsb),
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
