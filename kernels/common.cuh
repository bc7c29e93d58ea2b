// What every kernels/*.cu file shares: the CUDA backend class (its methods are defined across
// the .cu files, one per layer, as the table in src/core/gpu.h lists), the process's device
// context (stream, cuDNN and cuBLAS handles), the check macros and launch helpers.
// Internal to kernels/: host code outside sees only src/core/gpu.h.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "core/check.h"
#include "core/gpu.h"

// One check macro per library (conventions): expression, file and line in the error.
#define CUDA_CHECK(expr)                                                                     \
  do {                                                                                       \
    const cudaError_t err_ = (expr);                                                         \
    if (err_ != cudaSuccess)                                                                 \
      throw ::mpicnn::Error(std::string("CUDA: ") + cudaGetErrorString(err_), #expr,         \
                            __FILE__, __LINE__);                                             \
  } while (0)
#define CUDNN_CHECK(expr)                                                                         \
  do {                                                                                            \
    const cudnnStatus_t st_ = (expr);                                                             \
    if (st_ != CUDNN_STATUS_SUCCESS)                                                              \
      throw ::mpicnn::Error(std::string("cuDNN: ") + cudnnGetErrorString(st_), #expr,            \
                            __FILE__, __LINE__);                                                  \
  } while (0)
#define CUBLAS_CHECK(expr)                                                                       \
  do {                                                                                           \
    const cublasStatus_t st_ = (expr);                                                           \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                            \
      throw ::mpicnn::Error(std::string("cuBLAS: ") + cublasGetStatusString(st_), #expr,         \
                            __FILE__, __LINE__);                                                 \
  } while (0)
// After every kernel launch.
#define KERNEL_CHECK() CUDA_CHECK(cudaGetLastError())

namespace mpicnn::gpu {

// Blocks of kThreads for n elements, capped (kernels loop grid-stride).
constexpr int kThreads = 256;
inline unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return unsigned(b < 1 ? 1 : b > 65535 * 8 ? 65535 * 8 : b);
}
// Grid-stride loop bounds in 64 bits (n may exceed 2^31).
__device__ __forceinline__ int64_t global_index() {
  return int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_stride() { return int64_t(gridDim.x) * blockDim.x; }

// Below this many elements, kernels index in 32 bits (64-bit division is emulated and would
// dominate memory-bound loops).
constexpr int64_t kIndex32 = int64_t(1) << 31;

// Calls f(a', b') with a' and b' std::bool_constant<a> and <b>: a kernel's compile-time flags
// from run-time ones.
template <typename F>
void with_flags(bool a, bool b, F f) {
  if (a) {
    if (b) f(std::true_type{}, std::true_type{});
    else f(std::true_type{}, std::false_type{});
  } else {
    if (b) f(std::false_type{}, std::true_type{});
    else f(std::false_type{}, std::false_type{});
  }
}

struct Context {
  int device = -1;
  cudaStream_t stream = nullptr;       // all compute
  cudaStream_t copy_stream = nullptr;  // gradient copies to host, after compute events
  cudnnHandle_t cudnn = nullptr;
  cublasHandle_t cublas = nullptr;
  int sm_count = 1;          // multiprocessors, for sizing reduction grids
  float* scratch = nullptr;  // small device scratch (reductions' partial sums and results)
  static constexpr size_t kScratchBytes = 1 << 20;
  // cuDNN workspace shared by every convolution (calls run one at a time on `stream`); grown
  // only by ensure_workspace, which plans call outside the training step.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  std::shared_ptr<void> workspace_owner;
};
// Whether an op on tensors in format f runs its NHWC kernels (any element type) rather than its
// plain ones; refuses a typed NCHW format, which no op has kernels for.
inline bool channels_last(Format f, const char* op) {
  CHECK(f.plain() || f.order == Order::NHWC, op, ": ", format_name(f),
        " tensors (plain or NHWC only)");
  return !f.plain();
}

// The selected device's context; throws if select_device() has not run.
Context& ctx();
// Grows the shared workspace to at least `bytes` (a cudaMalloc: plan time only); returns it.
void* ensure_workspace(size_t bytes);
class CudaBackend final : public Backend {
 public:
  CudaBackend();

  int device_count() const override;
  void select_device(int local_rank) override;
  int device() const override;
  std::string device_name() const override;
  std::string device_uuid() const override;
  void synchronize() override;
  int64_t allocation_count() const override;

  std::shared_ptr<void> alloc(size_t bytes) override;
  std::shared_ptr<void> alloc_pinned(size_t bytes) override;
  void copy(void* dst, bool dst_device, const void* src, bool src_device, size_t bytes) override;
  void copy_async(void* dst, bool dst_device, const void* src, bool src_device,
                  size_t bytes) override;
  std::shared_ptr<Event> event() override;
  void record(Event& e) override;
  void wait(Event& e) override;
  std::shared_ptr<Event> timing_event() override;
  float elapsed_ms(Event& start, Event& end) override;
  void copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                 size_t rows) override;
  void copy_to_host_async(void* host, const float* dev, size_t bytes, int slot) override;
  void mark_ready(int slot) override;
  bool slot_done(int slot, bool wait) override;

  // kernels/elementwise.cu (no layer: Tensor::fill, gradient averaging, fp16 overflow check)
  void fill(Elem t, void* x, float value, int64_t n) override;
  void scale(float* x, float a, int64_t n) override;
  bool all_finite(const float* x, int64_t n) override;
  // kernels/add.cu
  void add(Elem t, void* out, const void* a, const void* b, int64_t n) override;
  void accumulate(Elem t, void* dst, const void* src, int64_t n) override;
  // kernels/densenet.cu
  void swap01(float* dst, const float* src, int64_t A, int64_t B, int64_t inner) override;
  // kernels/relu.cu
  void relu_forward(Elem t, void* y, const void* x, int64_t n) override;
  void relu_backward(Elem t, void* dx, const void* dy, const void* y, int64_t n) override;
  // kernels/dropout.cu
  void dropout(Format f, void* y, const void* x, int64_t N, int64_t C, int64_t H, int64_t W,
               uint64_t seed, uint64_t stream, uint64_t first_sample, float p,
               float scale) override;
  // kernels/transform.cu
  void normalize_u8(Format f, void* out, const uint8_t* in, const uint8_t* flip, int64_t N,
                    int C, int H, int W, const float* mean, const float* std) override;

  // kernels/blas.cu
  void gemm(Precision precision, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
            const float* A, int lda, const float* B, int ldb, float beta, float* C,
            int ldc) override;
  // kernels/linear.cu
  void sum_rows(float* db, const float* dy, int64_t rows, int64_t cols) override;
  void add_bias_rows(Elem t, void* y, const float* bias, int64_t rows, int64_t cols) override;

  // kernels/conv2d.cu
  int64_t conv_searches() const override;
  std::shared_ptr<ConvPlan> conv_plan(const ConvGeometry& g, int64_t n, int out_channels,
                                      int groups, Format format, Precision precision,
                                      bool deterministic) override;
  void conv_forward(ConvPlan& plan, void* y, const void* x, const void* w, const void* bias,
                    int n) override;
  void conv_backward(ConvPlan& plan, void* dx, void* dw, void* dbias, const void* dy,
                     const void* x, const void* w, int n, bool accumulate_params) override;
  // kernels/batchnorm_nhwc.cu
  void conv_bias_grad(Elem t, float* dbias, const void* dy, int64_t rows, int64_t C) override;
  void conv_bias_act_plan(ConvPlan& plan) override;
  void conv_bias_act_forward(ConvPlan& plan, void* y, const void* x, const void* w,
                             const void* bias, const void* z, bool relu, int n) override;
  // kernels/fold.cu
  void fold_conv_bn(float* w_out, float* b_out, const float* w, const float* b,
                    const float* gamma, const float* beta, const float* mean, const float* var,
                    float eps, int64_t oc, int64_t per_oc) override;

  // kernels/batchnorm.cu
  void batchnorm_forward(Format f, void* y, float* save_mean, float* save_invstd,
                         float* running_mean, float* running_var, const void* x,
                         const float* weight, const float* bias, const void* residual, bool relu,
                         int64_t N, int64_t C, int64_t HW, float eps, float momentum,
                         bool training) override;
  void batchnorm_backward(Format f, void* dx, float* dweight, float* dbias, const void* dy,
                          const void* y, const void* x, const float* weight,
                          const float* save_mean, const float* save_invstd, int64_t N, int64_t C,
                          int64_t HW, bool training) override;

  // kernels/maxpool2d.cu
  void maxpool_forward(Format f, void* y, int32_t* argmax, const void* x, int64_t N,
                       const PoolDesc& d) override;
  void maxpool_backward(Format f, void* dx, const void* dy, const int32_t* argmax, int64_t N,
                        const PoolDesc& d) override;
  // kernels/avgpool2d.cu
  void avgpool_forward(Format f, void* y, const void* x, int64_t N, const PoolDesc& d) override;
  void avgpool_backward(Format f, void* dx, const void* dy, int64_t N, const PoolDesc& d) override;
  // kernels/adaptive_avgpool2d.cu
  void adaptive_avgpool_forward(Format f, void* y, const void* x, int64_t N,
                                const PoolDesc& d) override;
  void adaptive_avgpool_backward(Format f, void* dx, const void* dy, int64_t N,
                                 const PoolDesc& d) override;

  // kernels/softmax_xent.cu
  void softmax_xent_forward(float* probs, double* row_loss, const float* logits,
                            const int32_t* targets, int64_t N, int64_t C,
                            float label_smoothing) override;
  void softmax_xent_backward(float* dlogits, const float* probs, const int32_t* targets,
                             int64_t N, int64_t C, float label_smoothing, float scale) override;

  // kernels/format.cu
  void convert(void* dst, Format df, const void* src, Format sf, int64_t N, int64_t C, int64_t H,
               int64_t W, bool accumulate) override;

  // kernels/optim.cu
  void sgd_step(float* params, float* buf, const float* grads, const SlabChunk* chunks,
                int64_t nchunks, int64_t max_chunk, const SgdScalars& s) override;
  void adamw_step(float* params, float* m, float* v, float* vmax, const float* grads,
                  const SlabChunk* chunks, int64_t nchunks, int64_t max_chunk,
                  const AdamScalars& s) override;

 private:
  // The typed kernels (any element type; NHWC where the order matters) that the ops above
  // dispatch to by format: in kernels/format.cu, but for BatchNorm's (kernels/batchnorm_nhwc.cu)
  // and dropout's (kernels/dropout.cu).
  void fill_typed(Elem t, void* x, float value, int64_t n);
  void add_typed(Elem t, void* out, const void* a, const void* b, int64_t n);
  void accumulate_typed(Elem t, void* dst, const void* src, int64_t n);
  void relu_forward_typed(Elem t, void* y, const void* x, int64_t n);
  void relu_backward_typed(Elem t, void* dx, const void* dy, const void* y, int64_t n);
  void add_bias_typed(Elem t, void* y, const float* bias, int64_t rows, int64_t C);
  void dropout_nhwc(Elem t, void* y, const void* x, int64_t N, int64_t C, int64_t H, int64_t W,
                    uint64_t seed, uint64_t stream, uint64_t first_sample, float p, float scale);
  void normalize_u8_nhwc(Elem t, void* out, const uint8_t* in, const uint8_t* flip, int64_t N,
                         int C, int H, int W, const float* mean, const float* std);
  void maxpool_forward_nhwc(Elem t, void* y, int32_t* argmax, const void* x, int64_t N,
                            const PoolDesc& d);
  void maxpool_backward_nhwc(Elem t, void* dx, const void* dy, const int32_t* argmax, int64_t N,
                             const PoolDesc& d);
  void adaptive_avgpool_forward_nhwc(Elem t, void* y, const void* x, int64_t N,
                                     const PoolDesc& d);
  void adaptive_avgpool_backward_nhwc(Elem t, void* dx, const void* dy, int64_t N,
                                      const PoolDesc& d);
  void batchnorm_forward_nhwc(Elem t, void* y, float* save_mean, float* save_invstd,
                              float* running_mean, float* running_var, const void* x,
                              const float* weight, const float* bias, const void* residual,
                              bool relu, int64_t N, int64_t C, int64_t HW, float eps,
                              float momentum, bool training);
  void batchnorm_backward_nhwc(Elem t, void* dx, float* dweight, float* dbias, const void* dy,
                               const void* y, const void* x, const float* weight,
                               const float* save_mean, const float* save_invstd, int64_t N,
                               int64_t C, int64_t HW, bool training);

  Context ctx_;
  int64_t allocations_ = 0;
  int64_t searches_ = 0;                  // conv_plan's algorithm searches (conv2d.cu)
  cudaEvent_t slot_event(int slot);       // created at a slot's first use
  std::vector<cudaEvent_t> slot_events_;  // one per gradient-sync slot
  cudaEvent_t compute_mark_ = nullptr;    // orders the copy stream after compute
  friend Context& ctx();
};

}  // namespace mpicnn::gpu
