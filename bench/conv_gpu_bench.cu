// cuDNN convolution benchmark over ResNet-50's distinct convolution shapes, to size the gain of an
// NHWC 16-bit path before building it. For each shape x configuration x direction (forward, data
// gradient, weight gradient; alpha = 1, beta = 0) it runs cudnnFind*AlgorithmEx with a large
// workspace on random device data, keeps the fastest successful algorithm (never a tensor-op one
// under nchw-fp32), sets the convolution's math type to the one that result reports, and times
// that algorithm itself with CUDA events: the median of --reps calls after --warmup calls. The
// timed calls are queued back to back behind a short spin kernel, so each event interval is the
// call's GPU time, without the host's launch overhead (a cell where the GPU still ran out of
// queued work is marked '*'). The host's time to enqueue each call (cuDNN's per-call overhead)
// is measured too: in the verbose log and, summed, in the totals.
//
// Configurations (columns), all with compute type float:
//   nchw-fp32  NCHW float, CUDNN_FMA_MATH (no TF32)
//   nchw-tf32  NCHW float, CUDNN_DEFAULT_MATH (TF32): the engine's path today (kernels/conv2d.cu)
//   nhwc-tf32  NHWC float, CUDNN_DEFAULT_MATH
//   nhwc-bf16  NHWC bfloat16, CUDNN_TENSOR_OP_MATH
//   nhwc-fp16  NHWC half, CUDNN_TENSOR_OP_MATH
// A combination cuDNN refuses is a cell "n/a", its status listed under the table. The totals are
// the per-training-step convolution time (sum over shapes of count x (fwd + dgrad + wgrad),
// without the stem's dgrad: no gradient w.r.t. the images) and the forward-only (inference) time.
//
// Shapes: torchvision's resnet50 (v1.5: stride on each bottleneck's 3x3), 224x224 input; the
// table's forward MACs per image are checked against 4.087e9 before any CUDA call.
//
// Built by `make cuda-build` as build/release/cuda/bench/conv_gpu_bench (bench/gpu_bundle.sh
// carries it; bench/gpu_checks.sh runs it in its conv group).
//   conv_gpu_bench [--batch 256] [--reps 10] [--warmup 2] [--workspace-mib 2048]
//                  [--shapes 0,3,5-9] [--configs nchw-tf32,nhwc-bf16] [--dirs fwd,dgrad,wgrad]
//                  [--time-budget-s 90] [--verbose 1] [--check-shapes-only 1]
// The defaults take about 30 s on an H200 (cuDNN 9.14); --time-budget-s skips the shapes left
// once it is spent (cells "skip", totals marked incomplete).
// Exit status: 0 on success, 1 on a failed shape check or a CUDA error (no device included),
// 2 on a bad command line.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

// ---------------------------------------------------------------------------------------------
// Errors: a cuDNN refusal makes one cell n/a; a CUDA error ends the run.

struct CudnnError : std::runtime_error {
  cudnnStatus_t status;
  CudnnError(cudnnStatus_t st, const std::string& call)
      : std::runtime_error(std::string(cudnnGetErrorString(st)) + " in " + call), status(st) {}
};

struct CudaError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The called function's name: the checked expression up to its '('.
std::string call_name(const char* expr) {
  const std::string s(expr);
  return s.substr(0, s.find('('));
}

#define CUDNN_CHECK(expr)                                                     \
  do {                                                                        \
    const cudnnStatus_t st_ = (expr);                                         \
    if (st_ != CUDNN_STATUS_SUCCESS) throw CudnnError(st_, call_name(#expr)); \
  } while (0)

#define CUDA_CHECK(expr)                                                               \
  do {                                                                                 \
    const cudaError_t err_ = (expr);                                                   \
    if (err_ != cudaSuccess)                                                           \
      throw CudaError(std::string("CUDA error ") + cudaGetErrorString(err_) + " in " + \
                      call_name(#expr) + " (line " + std::to_string(__LINE__) + ")");  \
  } while (0)

// ---------------------------------------------------------------------------------------------
// ResNet-50's convolutions.

struct ConvShape {
  const char* stage;     // stem, l1..l4 (ds: the block's downsample)
  int c, k, r, s, p, h;  // in / out channels, r x r kernel, stride, padding, input H = W
  int count;             // occurrences in ResNet-50 (0: extra row, outside the totals)
  bool input_grad;       // false for the stem: no gradient w.r.t. the images

  int out() const { return (h + 2 * p - r) / s + 1; }
  double macs() const { return double(c) * k * r * r * out() * out(); }  // per image
  std::string label() const {
    std::string t = std::string(stage) + " " + std::to_string(r) + "x" + std::to_string(r);
    if (s > 1) t += "/" + std::to_string(s);
    return t + " " + std::to_string(c) + "->" + std::to_string(k) + " @" + std::to_string(h);
  }
};

// Bottleneck i of a stage with width w, out 4w: 1x1 (in->w), 3x3 (w->w, stride on block 0's),
// 1x1 (w->4w); block 0 also has the 1x1 downsample (in->4w, the stage's stride). Stages: layer1
// 3 blocks w 64 at 56 (stride 1), layer2 4 x w 128 from 56, layer3 6 x w 256 from 28, layer4
// 3 x w 512 from 14. Total: 1 + 10 + 13 + 19 + 10 = 53 convolutions.
constexpr ConvShape kShapes[] = {
    {"stem", 3, 64, 7, 2, 3, 224, 1, false},
    // layer1, 56x56 (3 blocks)
    {"l1", 64, 64, 1, 1, 0, 56, 1, true},   // block 0's 1x1 in
    {"l1", 64, 64, 3, 1, 1, 56, 3, true},   // every 3x3
    {"l1", 64, 256, 1, 1, 0, 56, 4, true},  // 3 x 1x1 out + the downsample
    {"l1", 256, 64, 1, 1, 0, 56, 2, true},  // blocks 1-2's 1x1 in
    // layer2, 56 -> 28 (4 blocks)
    {"l2", 256, 128, 1, 1, 0, 56, 1, true},    // block 0's 1x1 in
    {"l2", 128, 128, 3, 2, 1, 56, 1, true},    // block 0's 3x3, stride 2
    {"l2", 128, 512, 1, 1, 0, 28, 4, true},    // every 1x1 out
    {"l2ds", 256, 512, 1, 2, 0, 56, 1, true},  // downsample
    {"l2", 512, 128, 1, 1, 0, 28, 3, true},    // blocks 1-3's 1x1 in
    {"l2", 128, 128, 3, 1, 1, 28, 3, true},    // blocks 1-3's 3x3
    // layer3, 28 -> 14 (6 blocks)
    {"l3", 512, 256, 1, 1, 0, 28, 1, true},
    {"l3", 256, 256, 3, 2, 1, 28, 1, true},
    {"l3", 256, 1024, 1, 1, 0, 14, 6, true},
    {"l3ds", 512, 1024, 1, 2, 0, 28, 1, true},
    {"l3", 1024, 256, 1, 1, 0, 14, 5, true},
    {"l3", 256, 256, 3, 1, 1, 14, 5, true},
    // layer4, 14 -> 7 (3 blocks)
    {"l4", 1024, 512, 1, 1, 0, 14, 1, true},
    {"l4", 512, 512, 3, 2, 1, 14, 1, true},
    {"l4", 512, 2048, 1, 1, 0, 7, 3, true},
    {"l4ds", 1024, 2048, 1, 2, 0, 14, 1, true},
    {"l4", 2048, 512, 1, 1, 0, 7, 2, true},
    {"l4", 512, 512, 3, 1, 1, 7, 2, true},
    // Extra: the stem with its images padded to 4 channels (16-bit NHWC kernels want C % 4 == 0).
    {"stem c=4", 4, 64, 7, 2, 3, 224, 0, false},
};
constexpr int kNumShapes = int(std::size(kShapes));
constexpr int kStemRow = 0, kStemC4Row = kNumShapes - 1;

constexpr double kExpectedMacs = 4.087e9;  // torchvision: 4.09 GMACs, fc's 2.05M included
constexpr int kExpectedConvs = 53;

// Prints the check's line; false where the table disagrees with ResNet-50.
bool check_shapes() {
  double macs = 0;
  int convs = 0;
  for (const ConvShape& s : kShapes) {
    macs += s.count * s.macs();
    convs += s.count;
  }
  const double rel = macs / kExpectedMacs - 1;
  const bool ok = std::fabs(rel) <= 0.005 && convs == kExpectedConvs;
  std::printf(
      "shape check: %d convolutions in %d distinct shapes (+1 extra row), %.6e forward MACs "
      "per image\n  (expected %d and %.3e +- 0.5%%): %s\n",
      convs, kNumShapes - 1, macs, kExpectedConvs, kExpectedMacs, ok ? "ok" : "FAILED");
  return ok;
}

// ---------------------------------------------------------------------------------------------
// Configurations and directions.

struct Config {
  const char* name;
  cudnnTensorFormat_t format;
  cudnnDataType_t dtype;
  cudnnMathType_t math;  // set before Find; FMA also rejects tensor-op results
};

constexpr Config kConfigs[] = {
    {"nchw-fp32", CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, CUDNN_FMA_MATH},
    {"nchw-tf32", CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, CUDNN_DEFAULT_MATH},
    {"nhwc-tf32", CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, CUDNN_DEFAULT_MATH},
    {"nhwc-bf16", CUDNN_TENSOR_NHWC, CUDNN_DATA_BFLOAT16, CUDNN_TENSOR_OP_MATH},
    {"nhwc-fp16", CUDNN_TENSOR_NHWC, CUDNN_DATA_HALF, CUDNN_TENSOR_OP_MATH},
};
constexpr int kNumConfigs = int(std::size(kConfigs));
constexpr int kRefConfig = 1;  // nchw-tf32: the ratios' reference
constexpr int kBf16Config = 3, kFp16Config = 4;

int config_index(const char* name) {
  for (int i = 0; i < kNumConfigs; ++i)
    if (std::strcmp(kConfigs[i].name, name) == 0) return i;
  return -1;
}

enum Dir { kFwd, kDgrad, kWgrad, kNumDirs };
constexpr const char* kDirNames[kNumDirs] = {"fwd", "dgrad", "wgrad"};
constexpr const char* kDirTitles[kNumDirs] = {
    "forward (y from x, w)", "data gradient (dx from dy, w)", "weight gradient (dw from x, dy)"};

const char* math_name(cudnnMathType_t m) {
  switch (m) {
    case CUDNN_DEFAULT_MATH:
      return "DEFAULT";
    case CUDNN_TENSOR_OP_MATH:
      return "TENSOR_OP";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION:
      return "TENSOR_OP_ALLOW_CONVERSION";
    case CUDNN_FMA_MATH:
      return "FMA";
  }
  return "?";
}

// ---------------------------------------------------------------------------------------------
// Device data: random values (not zeros, which can skew timings) in the configuration's dtype.

__device__ float hash_uniform(uint64_t i, uint32_t seed) {  // in [-1, 1)
  uint32_t x = (uint32_t(i) * 0x9E3779B1u) ^ (uint32_t(i >> 32) * 0x85EBCA77u) ^ seed;
  x ^= x >> 16;
  x *= 0x7FEB352Du;
  x ^= x >> 15;
  x *= 0x846CA68Bu;
  x ^= x >> 16;
  return float(x >> 8) * (1.0f / 8388608.0f) - 1.0f;
}

__device__ void store(float* p, float v) { *p = v; }
__device__ void store(__half* p, float v) { *p = __float2half(v); }
__device__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16(v); }

template <typename T>
__global__ void fill_kernel(T* p, int64_t n, uint32_t seed) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    store(p + i, hash_uniform(uint64_t(i), seed));
}

void fill_random(void* p, int64_t n, cudnnDataType_t dtype, uint32_t seed) {
  const int threads = 256;
  const int blocks = int(std::min<int64_t>((n + threads - 1) / threads, 4096));
  switch (dtype) {
    case CUDNN_DATA_HALF:
      fill_kernel<<<blocks, threads>>>(static_cast<__half*>(p), n, seed);
      break;
    case CUDNN_DATA_BFLOAT16:
      fill_kernel<<<blocks, threads>>>(static_cast<__nv_bfloat16*>(p), n, seed);
      break;
    default:
      fill_kernel<<<blocks, threads>>>(static_cast<float*>(p), n, seed);
      break;
  }
  CUDA_CHECK(cudaGetLastError());
}

// Element counts of one shape's operands at batch n.
int64_t x_elems(const ConvShape& s, int n) { return int64_t(n) * s.c * s.h * s.h; }
int64_t y_elems(const ConvShape& s, int n) { return int64_t(n) * s.k * s.out() * s.out(); }
int64_t w_elems(const ConvShape& s) { return int64_t(s.k) * s.c * s.r * s.r; }

// The operand buffers (sized for the largest selected shape in float) and the workspace.
struct Buffers {
  void *x = nullptr, *w = nullptr, *dy = nullptr;   // inputs, random
  void *y = nullptr, *dx = nullptr, *dw = nullptr;  // outputs
  void* ws = nullptr;
  size_t ws_bytes = 0;

  Buffers() = default;
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;
  ~Buffers() {
    for (void* p : {x, w, dy, y, dx, dw, ws})
      if (p) cudaFree(p);
  }
};

void* device_alloc(size_t bytes, const char* what) {
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  if (err != cudaSuccess)
    throw CudaError(std::string("cannot allocate ") + std::to_string(bytes >> 20) + " MiB for " +
                    what + ": " + cudaGetErrorString(err));
  CUDA_CHECK(cudaMemset(p, 0, bytes));
  return p;
}

// The workspace: the requested size, halved until cudaMalloc succeeds.
void alloc_workspace(Buffers& b, size_t bytes) {
  for (; bytes >= (size_t(1) << 20); bytes /= 2) {
    if (cudaMalloc(&b.ws, bytes) == cudaSuccess) {
      b.ws_bytes = bytes;
      return;
    }
    (void)cudaGetLastError();  // clear the allocation failure
  }
  b.ws = nullptr;
  b.ws_bytes = 0;
}

void alloc_operands(Buffers& b, const std::vector<int>& shapes, int batch) {
  int64_t xn = 0, yn = 0, wn = 0;
  for (int i : shapes) {
    xn = std::max(xn, x_elems(kShapes[i], batch));
    yn = std::max(yn, y_elems(kShapes[i], batch));
    wn = std::max(wn, w_elems(kShapes[i]));
  }
  const size_t f = sizeof(float);
  b.x = device_alloc(xn * f, "x");
  b.dx = device_alloc(xn * f, "dx");
  b.y = device_alloc(yn * f, "y");
  b.dy = device_alloc(yn * f, "dy");
  b.w = device_alloc(wn * f, "w");
  b.dw = device_alloc(wn * f, "dw");
}

// ---------------------------------------------------------------------------------------------
// One shape under one configuration: its descriptors, with the buffers they describe.

struct Problem {
  cudnnHandle_t handle = nullptr;
  const Buffers* buf = nullptr;
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;  // y also describes dy; x also dx
  cudnnFilterDescriptor_t w = nullptr;               // also dw
  cudnnConvolutionDescriptor_t conv = nullptr;

  Problem(cudnnHandle_t h, const Buffers& b, const ConvShape& s, const Config& cfg, int n)
      : handle(h), buf(&b) {
    try {
      CUDNN_CHECK(cudnnCreateTensorDescriptor(&x));
      CUDNN_CHECK(cudnnCreateTensorDescriptor(&y));
      CUDNN_CHECK(cudnnCreateFilterDescriptor(&w));
      CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv));
      CUDNN_CHECK(cudnnSetTensor4dDescriptor(x, cfg.format, cfg.dtype, n, s.c, s.h, s.h));
      CUDNN_CHECK(cudnnSetFilter4dDescriptor(w, cfg.dtype, cfg.format, s.k, s.c, s.r, s.r));
      CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv, s.p, s.p, s.s, s.s, 1, 1,
                                                  CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
      int on = 0, oc = 0, oh = 0, ow = 0;
      CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(conv, x, w, &on, &oc, &oh, &ow));
      if (on != n || oc != s.k || oh != s.out() || ow != s.out())
        throw std::runtime_error("cuDNN's output size disagrees with the table for " + s.label());
      CUDNN_CHECK(cudnnSetTensor4dDescriptor(y, cfg.format, cfg.dtype, n, s.k, oh, ow));
    } catch (...) {
      destroy();
      throw;
    }
  }
  Problem(const Problem&) = delete;
  Problem& operator=(const Problem&) = delete;
  ~Problem() { destroy(); }

 private:
  void destroy() {  // statuses ignored: destroying a valid descriptor cannot fail
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (x) cudnnDestroyTensorDescriptor(x);
    conv = nullptr, w = nullptr, y = nullptr, x = nullptr;
  }
};

// One direction as the measurement sees it: cuDNN's algorithm and result types, and its count,
// Find and run calls with their descriptor order (alpha = 1, beta = 0, compute in float).
constexpr float kAlpha = 1.0f, kBeta = 0.0f;

struct Forward {
  using Algo = cudnnConvolutionFwdAlgo_t;
  using Perf = cudnnConvolutionFwdAlgoPerf_t;
  static constexpr const char* kAlgoNames[] = {
      "IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING",
      "WINOGRAD",      "WINOGRAD_NONFUSED"};
  static cudnnStatus_t max_count(cudnnHandle_t h, int* n) {
    return cudnnGetConvolutionForwardAlgorithmMaxCount(h, n);
  }
  static cudnnStatus_t find(const Problem& p, int max, int* n, Perf* r) {
    const Buffers& b = *p.buf;
    return cudnnFindConvolutionForwardAlgorithmEx(p.handle, p.x, b.x, p.w, b.w, p.conv, p.y, b.y,
                                                  max, n, r, b.ws, b.ws_bytes);
  }
  static cudnnStatus_t run(const Problem& p, Algo a) {
    const Buffers& b = *p.buf;
    return cudnnConvolutionForward(p.handle, &kAlpha, p.x, b.x, p.w, b.w, p.conv, a, b.ws,
                                   b.ws_bytes, &kBeta, p.y, b.y);
  }
};

struct BackwardData {
  using Algo = cudnnConvolutionBwdDataAlgo_t;
  using Perf = cudnnConvolutionBwdDataAlgoPerf_t;
  static constexpr const char* kAlgoNames[] = {"ALGO_0",     "ALGO_1",   "FFT",
                                               "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
  static cudnnStatus_t max_count(cudnnHandle_t h, int* n) {
    return cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, n);
  }
  static cudnnStatus_t find(const Problem& p, int max, int* n, Perf* r) {
    const Buffers& b = *p.buf;
    return cudnnFindConvolutionBackwardDataAlgorithmEx(p.handle, p.w, b.w, p.y, b.dy, p.conv, p.x,
                                                       b.dx, max, n, r, b.ws, b.ws_bytes);
  }
  static cudnnStatus_t run(const Problem& p, Algo a) {
    const Buffers& b = *p.buf;
    return cudnnConvolutionBackwardData(p.handle, &kAlpha, p.w, b.w, p.y, b.dy, p.conv, a, b.ws,
                                        b.ws_bytes, &kBeta, p.x, b.dx);
  }
};

struct BackwardFilter {
  using Algo = cudnnConvolutionBwdFilterAlgo_t;
  using Perf = cudnnConvolutionBwdFilterAlgoPerf_t;
  static constexpr const char* kAlgoNames[] = {
      "ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED", "FFT_TILING"};
  static cudnnStatus_t max_count(cudnnHandle_t h, int* n) {
    return cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, n);
  }
  static cudnnStatus_t find(const Problem& p, int max, int* n, Perf* r) {
    const Buffers& b = *p.buf;
    return cudnnFindConvolutionBackwardFilterAlgorithmEx(p.handle, p.x, b.x, p.y, b.dy, p.conv, p.w,
                                                         b.dw, max, n, r, b.ws, b.ws_bytes);
  }
  static cudnnStatus_t run(const Problem& p, Algo a) {
    const Buffers& b = *p.buf;
    return cudnnConvolutionBackwardFilter(p.handle, &kAlpha, p.x, b.x, p.y, b.dy, p.conv, a, b.ws,
                                          b.ws_bytes, &kBeta, p.w, b.dw);
  }
};

// ---------------------------------------------------------------------------------------------
// Measuring one cell.

struct Cell {
  bool measured = false;    // false: n/a (why says so) or skipped
  bool skipped = false;     // not run: the time budget ran out
  bool host_bound = false;  // the GPU ran out of queued work: the times include host overhead
  double host_us = 0;       // host time to enqueue one call
  double ms = 0;            // median of the timed calls
  double min_ms = 0, max_ms = 0;
  float find_ms = 0;  // the chosen result's time as Find reported it
  int algo = -1;
  const char* algo_name = "";
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  size_t workspace = 0;  // bytes the chosen algorithm needs
  std::string why;       // the cuDNN status of an n/a cell
};

// The events around the timed calls: events[i] before call i, events[reps] after the last.
struct Timing {
  int reps = 10, warmup = 2;
  std::vector<cudaEvent_t> events;

  Timing(int r, int w) : reps(r), warmup(w), events(size_t(r) + 1, nullptr) {
    for (cudaEvent_t& e : events) CUDA_CHECK(cudaEventCreate(&e));
  }
  Timing(const Timing&) = delete;
  Timing& operator=(const Timing&) = delete;
  ~Timing() {
    for (cudaEvent_t e : events)
      if (e) cudaEventDestroy(e);
  }
};

// Holds the GPU for `ns` nanoseconds, so that the host queues every timed call behind it: the
// events then measure the calls' GPU time, not the host's time to launch them.
__global__ void spin_kernel(uint64_t ns) {
  uint64_t start = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

double median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (double(v[n / 2 - 1]) + v[n / 2]);
}

// The fastest usable Find result, or null with the reason in *why.
template <typename Perf>
const Perf* fastest(const std::vector<Perf>& results, int count, bool fma_only, size_t ws_bytes,
                    std::string* why) {
  const Perf* best = nullptr;
  cudnnStatus_t first_failure = CUDNN_STATUS_SUCCESS;
  bool rejected_math = false;
  for (int i = 0; i < count; ++i) {
    const Perf& r = results[size_t(i)];
    if (r.status != CUDNN_STATUS_SUCCESS) {
      if (first_failure == CUDNN_STATUS_SUCCESS) first_failure = r.status;
      continue;
    }
    if (fma_only && (r.mathType == CUDNN_TENSOR_OP_MATH ||
                     r.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION)) {
      rejected_math = true;
      continue;
    }
    if (r.memory > ws_bytes) continue;
    if (!best || r.time < best->time) best = &r;
  }
  if (!best) {
    if (count == 0)
      *why = "Find returned no algorithm";
    else if (rejected_math)
      *why = "only tensor-op algorithms succeeded (FMA required)";
    else
      *why = std::string("no algorithm succeeded, first: ") + cudnnGetErrorString(first_failure);
  }
  return best;
}

// Find, then time the chosen algorithm. A cuDNN refusal throws CudnnError (the caller's n/a).
template <typename D>
Cell measure(const Problem& p, const Config& cfg, const Timing& t) {
  Cell cell;
  CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv, cfg.math));
  int max_count = 0;
  CUDNN_CHECK(D::max_count(p.handle, &max_count));
  std::vector<typename D::Perf> results(size_t(std::max(max_count, 1)));
  int count = 0;
  CUDNN_CHECK(D::find(p, max_count, &count, results.data()));
  CUDA_CHECK(cudaDeviceSynchronize());
  const bool fma_only = cfg.math == CUDNN_FMA_MATH;
  const auto* best = fastest(results, count, fma_only, p.buf->ws_bytes, &cell.why);
  if (!best) return cell;

  // Since cuDNN 7.4 the algorithm and the math type together pick the kernel. Under FMA keep FMA
  // (a result labelled DEFAULT would otherwise permit TF32), as kernels/conv2d.cu does.
  cell.math = fma_only ? CUDNN_FMA_MATH : best->mathType;
  CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv, cell.math));
  for (int i = 0; i < t.warmup; ++i) CUDNN_CHECK(D::run(p, best->algo));
  CUDA_CHECK(cudaDeviceSynchronize());

  // The timed calls back to back behind a spin long enough for the host to queue them all.
  spin_kernel<<<1, 1>>>(uint64_t(4'000'000) + uint64_t(t.reps) * 1'000'000);
  CUDA_CHECK(cudaGetLastError());
  const auto h0 = std::chrono::steady_clock::now();
  for (int i = 0; i < t.reps; ++i) {
    CUDA_CHECK(cudaEventRecord(t.events[size_t(i)]));
    CUDNN_CHECK(D::run(p, best->algo));
  }
  CUDA_CHECK(cudaEventRecord(t.events[size_t(t.reps)]));
  cell.host_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - h0).count() /
      t.reps;
  const cudaError_t first = cudaEventQuery(t.events[0]);  // reached: the spin ended too soon
  if (first != cudaErrorNotReady) CUDA_CHECK(first);
  cell.host_bound = first == cudaSuccess;
  CUDA_CHECK(cudaEventSynchronize(t.events[size_t(t.reps)]));
  std::vector<float> times(size_t(t.reps));
  for (size_t i = 0; i < times.size(); ++i)
    CUDA_CHECK(cudaEventElapsedTime(&times[i], t.events[i], t.events[i + 1]));
  cell.measured = true;
  cell.ms = median(times);
  cell.min_ms = *std::min_element(times.begin(), times.end());
  cell.max_ms = *std::max_element(times.begin(), times.end());
  cell.find_ms = best->time;
  cell.algo = int(best->algo);
  cell.algo_name = cell.algo < int(std::size(D::kAlgoNames)) ? D::kAlgoNames[cell.algo] : "?";
  cell.workspace = best->memory;
  return cell;
}

template <typename D>
Cell measure_or_na(const Problem& p, const Config& cfg, const Timing& t) {
  try {
    return measure<D>(p, cfg, t);
  } catch (const CudnnError& e) {
    Cell cell;
    cell.why = e.what();
    return cell;
  }
}

// ---------------------------------------------------------------------------------------------
// Options.

struct Options {
  int batch = 256, reps = 10, warmup = 2, verbose = 0;
  size_t workspace_mib = 2048;
  double time_budget_s = 90;
  bool check_only = false;
  std::vector<int> shapes, configs, dirs;  // selected indices, in table order
};

[[noreturn]] void usage(const std::string& error) {
  std::fprintf(
      stderr,
      "conv_gpu_bench: %s\n"
      "usage: conv_gpu_bench [--batch 256] [--reps 10] [--warmup 2] [--workspace-mib 2048]\n"
      "       [--shapes 0,3,5-9] [--configs nchw-fp32,nchw-tf32,nhwc-tf32,nhwc-bf16,"
      "nhwc-fp16]\n"
      "       [--dirs fwd,dgrad,wgrad] [--time-budget-s 90] [--verbose 0|1]"
      " [--check-shapes-only 0|1]\n",
      error.c_str());
  std::exit(2);
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t end = std::min(s.find(',', start), s.size());
    if (end > start) parts.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return parts;
}

long parse_int(const std::string& s, const char* flag) {
  char* end = nullptr;
  const long v = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0') usage(std::string("bad number '") + s + "' for " + flag);
  return v;
}

// "0,3,5-9" -> sorted, distinct row indices.
std::vector<int> parse_rows(const std::string& text) {
  std::vector<int> rows;
  for (const std::string& part : split(text)) {
    const size_t dash = part.find('-');
    const long lo = parse_int(part.substr(0, dash), "--shapes");
    const long hi = dash == std::string::npos ? lo : parse_int(part.substr(dash + 1), "--shapes");
    if (lo < 0 || hi >= kNumShapes || lo > hi)
      usage("--shapes: rows are 0.." + std::to_string(kNumShapes - 1) + ", got '" + part + "'");
    for (long i = lo; i <= hi; ++i) rows.push_back(int(i));
  }
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  if (rows.empty()) usage("--shapes selects nothing");
  return rows;
}

template <typename Lookup>
std::vector<int> parse_names(const std::string& text, const char* flag, Lookup index) {
  std::vector<int> out;
  for (const std::string& name : split(text)) {
    const int i = index(name);
    if (i < 0) usage(std::string(flag) + ": unknown name '" + name + "'");
    out.push_back(i);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  if (out.empty()) usage(std::string(flag) + " selects nothing");
  return out;
}

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 0; i < kNumShapes; ++i) o.shapes.push_back(i);
  for (int i = 0; i < kNumConfigs; ++i) o.configs.push_back(i);
  for (int i = 0; i < kNumDirs; ++i) o.dirs.push_back(i);
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") usage("help");
    if (i + 1 >= argc) usage("missing value for " + flag);
    const std::string v = argv[++i];
    if (flag == "--batch")
      o.batch = int(parse_int(v, "--batch"));
    else if (flag == "--reps")
      o.reps = int(parse_int(v, "--reps"));
    else if (flag == "--warmup")
      o.warmup = int(parse_int(v, "--warmup"));
    else if (flag == "--workspace-mib")
      o.workspace_mib = size_t(parse_int(v, "--workspace-mib"));
    else if (flag == "--time-budget-s")
      o.time_budget_s = double(parse_int(v, "--time-budget-s"));
    else if (flag == "--verbose")
      o.verbose = int(parse_int(v, "--verbose"));
    else if (flag == "--check-shapes-only")
      o.check_only = parse_int(v, flag.c_str()) != 0;
    else if (flag == "--shapes")
      o.shapes = parse_rows(v);
    else if (flag == "--configs")
      o.configs =
          parse_names(v, "--configs", [](const std::string& n) { return config_index(n.c_str()); });
    else if (flag == "--dirs")
      o.dirs = parse_names(v, "--dirs", [](const std::string& n) {
        for (int d = 0; d < kNumDirs; ++d)
          if (n == kDirNames[d]) return d;
        return -1;
      });
    else
      usage("unknown option " + flag);
  }
  if (o.batch < 1 || o.reps < 1 || o.warmup < 0 || o.time_budget_s <= 0)
    usage("--batch, --reps, --time-budget-s must be positive and --warmup >= 0");
  return o;
}

// ---------------------------------------------------------------------------------------------
// The run: every selected shape x configuration x direction, shapes outermost, so that a run cut
// short by the time budget lacks whole rows rather than whole columns.

using Results = std::vector<std::vector<std::vector<Cell>>>;  // [shape][config][dir]

std::string mib(size_t bytes) {
  char s[32];
  std::snprintf(s, sizeof s, "%.1f MiB", double(bytes) / (1 << 20));
  return s;
}

void print_cell_log(int row, const Config& cfg, int dir, const Cell& c, int batch) {
  const ConvShape& s = kShapes[row];
  if (!c.measured) {
    std::printf("  #%-2d %-24s %-9s %-5s n/a: %s\n", row, s.label().c_str(), cfg.name,
                kDirNames[dir], c.why.c_str());
    return;
  }
  const double tflops = 2.0 * s.macs() * batch / (c.ms * 1e-3) / 1e12;
  std::printf(
      "  #%-2d %-24s %-9s %-5s algo %d %s, math %s, workspace %s, Find %.3f ms, "
      "median %.3f ms (min %.3f, max %.3f), %.1f TFLOP/s, host %.0f us/call%s\n",
      row, s.label().c_str(), cfg.name, kDirNames[dir], c.algo, c.algo_name, math_name(c.math),
      mib(c.workspace).c_str(), c.find_ms, c.ms, c.min_ms, c.max_ms, tflops, c.host_us,
      c.host_bound ? " (HOST-BOUND)" : "");
}

Results run_all(const Options& o, cudnnHandle_t handle, const Buffers& buf, const Timing& t) {
  Results res(kNumShapes, std::vector<std::vector<Cell>>(kNumConfigs, std::vector<Cell>(kNumDirs)));
  const auto t0 = std::chrono::steady_clock::now();
  const auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  if (o.verbose) std::printf("## Cells as measured\n\n");
  for (size_t si = 0; si < o.shapes.size(); ++si) {
    const int row = o.shapes[si];
    const ConvShape& s = kShapes[row];
    const bool out_of_time = elapsed() > o.time_budget_s;
    for (int ci : o.configs) {
      const Config& cfg = kConfigs[ci];
      std::vector<Cell>& cells = res[size_t(row)][size_t(ci)];
      if (out_of_time) {
        for (int d : o.dirs) cells[size_t(d)].skipped = true;
        continue;
      }
      fill_random(buf.x, x_elems(s, o.batch), cfg.dtype, 0x1234u + uint32_t(row));
      fill_random(buf.dy, y_elems(s, o.batch), cfg.dtype, 0x5678u + uint32_t(row));
      fill_random(buf.w, w_elems(s), cfg.dtype, 0x9abcu + uint32_t(row));
      CUDA_CHECK(cudaDeviceSynchronize());
      try {
        const Problem p(handle, buf, s, cfg, o.batch);
        for (int d : o.dirs) {
          Cell& c = cells[size_t(d)];
          if (d == kFwd) c = measure_or_na<Forward>(p, cfg, t);
          if (d == kDgrad) c = measure_or_na<BackwardData>(p, cfg, t);
          if (d == kWgrad) c = measure_or_na<BackwardFilter>(p, cfg, t);
          if (o.verbose) print_cell_log(row, cfg, d, c, o.batch);
        }
      } catch (const CudnnError& e) {  // the descriptors themselves were refused
        for (int d : o.dirs) cells[size_t(d)].why = e.what();
      }
    }
    std::fprintf(stderr, "[%2zu/%zu] #%d %s %s (%.1f s)\n", si + 1, o.shapes.size(), row,
                 s.label().c_str(), out_of_time ? "skipped: time budget spent" : "done", elapsed());
  }
  if (o.verbose) std::printf("\n");
  return res;
}

// ---------------------------------------------------------------------------------------------
// Report.

// A markdown table, columns padded to their widest cell; the first two and the columns in
// `left` left-aligned, the others (numbers) right-aligned.
void print_table(const std::vector<std::string>& header,
                 const std::vector<std::vector<std::string>>& rows, std::vector<size_t> left = {}) {
  left.insert(left.end(), {0, 1});
  const auto is_left = [&](size_t j) {
    return std::find(left.begin(), left.end(), j) != left.end();
  };
  std::vector<size_t> width(header.size());
  for (size_t j = 0; j < header.size(); ++j) width[j] = std::max<size_t>(header[j].size(), 3);
  for (const auto& r : rows)
    for (size_t j = 0; j < r.size() && j < width.size(); ++j)
      width[j] = std::max(width[j], r[j].size());
  const auto line = [&](const std::vector<std::string>& r) {
    std::string s = "|";
    for (size_t j = 0; j < width.size(); ++j) {
      const std::string v = j < r.size() ? r[j] : "";
      const std::string pad(width[j] - v.size(), ' ');
      s.append(" ").append(is_left(j) ? v + pad : pad + v).append(" |");
    }
    std::printf("%s\n", s.c_str());
  };
  line(header);
  std::string sep = "|";
  for (size_t j = 0; j < width.size(); ++j) {
    const std::string dashes(width[j] + 1, '-');
    sep.append(is_left(j) ? ":" : "").append(dashes).append(is_left(j) ? "|" : ":|");
  }
  std::printf("%s\n", sep.c_str());
  for (const auto& r : rows) line(r);
}

std::string fmt(const char* f, double v) {
  char s[64];
  std::snprintf(s, sizeof s, f, v);
  return s;
}

std::string cell_text(const Cell& c, bool verbose) {
  if (c.skipped) return "skip";
  if (!c.measured) return "n/a";
  std::string t = fmt("%.3f", c.ms);
  if (c.host_bound) t += "*";
  if (verbose) t += " a" + std::to_string(c.algo);
  return t;
}

bool selected(const std::vector<int>& v, int i) {
  return std::find(v.begin(), v.end(), i) != v.end();
}

// Speedup of config ci over nchw-tf32 on one cell, or "-".
std::string speedup(const std::vector<Cell>& ref, const std::vector<Cell>& c, int d) {
  if (!ref[size_t(d)].measured || !c[size_t(d)].measured) return "-";
  return fmt("%.2f", ref[size_t(d)].ms / c[size_t(d)].ms);
}

void print_direction(const Options& o, const Results& res, int d) {
  std::printf("## %s: median ms per call, batch %d\n\n", kDirTitles[d], o.batch);
  std::vector<std::string> header = {"#", "shape", "cnt"};
  for (int ci : o.configs) header.push_back(kConfigs[ci].name);
  // Speedups of the 16-bit NHWC configurations over the engine's current path.
  std::vector<int> ratio_cols;
  if (selected(o.configs, kRefConfig))
    for (int ci : {kBf16Config, kFp16Config})
      if (selected(o.configs, ci)) {
        ratio_cols.push_back(ci);
        header.push_back(std::string(kConfigs[ci].name + 5) + " x");
      }
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> notes;
  bool host_bound = false, skipped = false;
  for (int row : o.shapes) {
    const ConvShape& s = kShapes[row];
    std::vector<std::string> r = {std::to_string(row), s.label(), std::to_string(s.count)};
    for (int ci : o.configs) {
      const Cell& c = res[size_t(row)][size_t(ci)][size_t(d)];
      r.push_back(cell_text(c, o.verbose != 0));
      host_bound = host_bound || c.host_bound;
      skipped = skipped || c.skipped;
      if (!c.measured && !c.skipped)
        notes.push_back(std::string("#")
                            .append(std::to_string(row))
                            .append(" ")
                            .append(s.label())
                            .append(", ")
                            .append(kConfigs[ci].name)
                            .append(": ")
                            .append(c.why));
    }
    for (int ci : ratio_cols)
      r.push_back(speedup(res[size_t(row)][kRefConfig], res[size_t(row)][size_t(ci)], d));
    rows.push_back(r);
  }
  print_table(header, rows);
  if (!ratio_cols.empty())
    std::printf("\n'X x': nchw-tf32 ms / nhwc-X ms (above 1: NHWC X is faster).\n");
  if (o.verbose) std::printf("'aN': the cuDNN algorithm number timed.\n");
  if (host_bound)
    std::printf(
        "'*': the GPU ran out of queued calls (host slower than the GPU): the time "
        "includes host overhead.\n");
  if (skipped) std::printf("'skip': not measured, the time budget (--time-budget-s) ran out.\n");
  for (const std::string& n : notes) std::printf("- n/a %s\n", n.c_str());
  std::printf("\n");
}

// Whether cell (row, d) belongs in the training-step total.
bool in_train_total(const ConvShape& s, int d) {
  return s.count > 0 && (d != kDgrad || s.input_grad);
}

// Sums of count x median over the selected shapes and directions (ms), and the cells left out.
struct Sum {
  double train = 0, fwd = 0, host = 0;  // host: the calls' enqueue time
  int train_missing = 0, fwd_missing = 0;
  void add(const ConvShape& s, int d, const Cell* c) {
    if (!c) {
      ++train_missing;
      fwd_missing += d == kFwd;
      return;
    }
    train += s.count * c->ms;
    host += s.count * c->host_us * 1e-3;
    if (d == kFwd) fwd += s.count * c->ms;
  }
};

// Config ci's totals row, the stem's cells taken from `stem_row` (the stem itself or its c=4
// variant), and its ratios to nchw-tf32 (always its own stem) over the cells both measured.
std::vector<std::string> totals_row(const Options& o, const Results& res, int ci, int stem_row,
                                    const std::string& variant) {
  const bool has_ref = selected(o.configs, kRefConfig);
  Sum own, mine, ref;  // own: all its measured cells; mine / ref: the cells both measured
  for (int row : o.shapes) {
    const ConvShape& s = kShapes[row];
    const int src = row == kStemRow ? stem_row : row;
    for (int d : o.dirs) {
      if (!in_train_total(s, d)) continue;
      const Cell& c = res[size_t(src)][size_t(ci)][size_t(d)];
      const Cell& r = res[size_t(row)][size_t(kRefConfig)][size_t(d)];
      own.add(s, d, c.measured ? &c : nullptr);
      if (has_ref && c.measured && r.measured) {
        mine.add(s, d, &c);
        ref.add(s, d, &r);
      }
    }
  }
  std::vector<std::string> out = {kConfigs[ci].name, variant, fmt("%.2f", own.train)};
  out.push_back(mine.train > 0 ? fmt("%.2f", ref.train / mine.train) : "-");
  out.push_back(fmt("%.2f", own.fwd));
  out.push_back(mine.fwd > 0 ? fmt("%.2f", ref.fwd / mine.fwd) : "-");
  out.push_back(fmt("%.2f", own.host));
  out.push_back(own.train_missing == 0
                    ? "complete"
                    : "INCOMPLETE: " + std::to_string(own.train_missing) + " cells n/a (" +
                          std::to_string(own.fwd_missing) + " fwd)");
  return out;
}

void print_totals(const Options& o, const Results& res) {
  std::string dirs;
  for (int d : o.dirs) dirs += std::string(dirs.empty() ? "" : "+") + kDirNames[d];
  std::printf(
      "## Totals: ResNet-50 conv ms per step at batch %d\n\n"
      "Sum over shapes of count x median (%s; the stem's dgrad excluded).\n\n",
      o.batch, dirs.c_str());
  const std::vector<std::string> header = {"config", "",      "train ms", "train x",
                                           "fwd ms", "fwd x", "host ms",  "note"};
  std::vector<std::vector<std::string>> rows;
  const bool both_stems = selected(o.shapes, kStemRow) && selected(o.shapes, kStemC4Row);
  for (int ci : o.configs) {
    rows.push_back(totals_row(o, res, ci, kStemRow, ""));
    if (both_stems && kConfigs[ci].dtype != CUDNN_DATA_FLOAT)
      rows.push_back(totals_row(o, res, ci, kStemC4Row, "stem c=4"));
  }
  print_table(header, rows, {7});
  std::printf(
      "\n'train x', 'fwd x': nchw-tf32 ms / this ms over the cells both measured\n"
      "  (above 1: faster than the engine's current path).\n"
      "'host ms': the host's time to enqueue the train cells' calls (cuDNN's per-call overhead);\n"
      "  above 'train ms', a training step on this API would be bound by the host.\n");
  if (both_stems)
    std::printf("'stem c=4': the stem's cells taken from row #%d (images padded to 4 channels).\n",
                kStemC4Row);
  if (o.shapes.size() < size_t(kNumShapes))
    std::printf("Totals cover the selected rows only (--shapes).\n");
}

// ---------------------------------------------------------------------------------------------

// The device, or false with one line on stderr where there is none.
bool open_device(int* device) {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess || n == 0) {
    std::fprintf(stderr, "conv_gpu_bench: no CUDA device (cudaGetDeviceCount: %s)\n",
                 err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    return false;
  }
  CUDA_CHECK(cudaGetDevice(device));
  return true;
}

void print_header(const Options& o, int device, const Buffers& b) {
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  int runtime = 0, driver = 0;
  CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  CUDA_CHECK(cudaDriverGetVersion(&driver));
  const size_t v = cudnnGetVersion();
  std::printf("\n# conv_gpu_bench: ResNet-50 convolutions on cuDNN\n\n");
  std::printf("GPU: %s (sm_%d%d, %d SMs, %.1f GiB)\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount, double(prop.totalGlobalMem) / (1 << 30));
  std::printf(
      "cuDNN %zu.%zu.%zu (cudnnGetVersion %zu; built against %d), CUDA runtime %d, driver %d\n",
      v / 10000, (v % 10000) / 100, v % 100, v, CUDNN_VERSION, runtime, driver);
  std::printf(
      "batch %d, %d timed calls (median) after %d warm-up, Find workspace %s (asked %zu MiB)\n\n",
      o.batch, o.reps, o.warmup, mib(b.ws_bytes).c_str(), o.workspace_mib);
}

int run(const Options& o) {
  int device = 0;
  if (!open_device(&device)) return 1;
  Buffers buf;
  alloc_operands(buf, o.shapes, o.batch);
  alloc_workspace(buf, o.workspace_mib << 20);
  print_header(o, device, buf);

  cudnnHandle_t handle = nullptr;
  CUDNN_CHECK(cudnnCreate(&handle));
  Results res;
  {
    const Timing t(o.reps, o.warmup);
    res = run_all(o, handle, buf, t);
  }
  cudnnDestroy(handle);

  for (int d : o.dirs) print_direction(o, res, d);
  print_totals(o, res);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse_options(argc, argv);
  if (!check_shapes()) {
    std::fprintf(stderr, "conv_gpu_bench: the shape table does not add up to ResNet-50\n");
    return 1;
  }
  if (o.check_only) return 0;
  try {
    return run(o);
  } catch (const std::exception& e) {  // CUDA errors, and a cuDNN failure outside a cell
    std::fflush(stdout);
    std::fprintf(stderr, "conv_gpu_bench: %s\n", e.what());
    return 1;
  }
}
