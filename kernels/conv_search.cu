// The choice of cuDNN's algorithms for one convolution plan (kernels/conv2d.cuh), for
// kernels/conv2d.cu's conv_plan and its smaller batches.
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
#include <algorithm>
#include <vector>

#include "conv2d.cuh"

namespace mpicnn::gpu::conv {

size_t search_workspace_cap() {
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return std::clamp(free_bytes / 4, kMinSearchWorkspace, kMaxSearchWorkspace);
}

// FP32 forbids TF32 (FMA only). TF32 is cuDNN's default for float tensors. BF16 runs TF32 too:
// cuDNN has no math mode converting fp32 tensors to bf16 (ALLOW_CONVERSION converts to fp16
// only), so the nearest it offers is TF32. FP16 lets the tensor cores run on fp16 conversions
// of the fp32 data.
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

cudnnMathType_t exec_math(const ConvPlan& p, cudnnMathType_t reported) {
  return p.precision == Precision::kFp32 ? CUDNN_FMA_MATH : reported;
}

void set_math(const ConvPlan& p, cudnnMathType_t m) {
  CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv, m));
}

namespace {

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


}  // namespace

bool forward_workspace(const ConvPlan& p, const ConvPlan::Shape& s, cudnnConvolutionFwdAlgo_t algo,
                       cudnnMathType_t m, size_t* bytes) {
  return workspace<Forward>(p, s, algo, m, bytes);
}

void choose_heuristic(const ConvPlan& p, ConvPlan::Shape& s, int n, size_t room) {
  choose_heuristic<Forward>(p, s, n, room);
  choose_heuristic<BackwardData>(p, s, n, room);
  choose_heuristic<BackwardFilter>(p, s, n, room);
}


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

}  // namespace mpicnn::gpu::conv
