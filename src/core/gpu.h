// The GPU backend as the host code sees it: device selection, memory, copies and every kernel
// the layers, optimizers and gradient sync call on CUDA tensors. Host-only (no CUDA headers),
// so src/ compiles once for both builds; the implementation is kernels/*.cu (`make CUDA=1`),
// and a CPU-only build links src/core/gpu_absent.cpp, whose backend() refuses with one line.
// Not a tensor library: these are raw device pointers and sizes, llm.c style (outputs first,
// then inputs, then sizes). Every call is asynchronous on the backend's one compute stream
// unless it says it synchronises; each backward says whether it writes '=' or adds '+='.
//
// Where the GPU side of each piece lives: a layer's kernels are named as its CPU file, so
// src/layers/X.cpp runs kernels/X.cu on CUDA tensors (each backend method below names its file).
//   src/layers/conv_cudnn.cpp          kernels/conv2d.cu   cuDNN: plans, descriptors, the calls;
//   (Conv2d's cuDNN engine)            kernels/conv_search.cu  its algorithm search
//   src/layers/batchnorm.cpp           kernels/batchnorm.cu
//   src/layers/fold.cpp                kernels/fold.cu     the folded weights; their fused
//                                      convolution (conv_bias_act_*) in kernels/conv2d.cu
//   src/layers/relu.cpp                kernels/relu.cu
//   src/layers/dropout.cpp             kernels/dropout.cu
//   src/layers/add.cpp                 kernels/add.cu      add, accumulate
//   src/layers/linear.cpp              kernels/linear.cu   bias kernels; GEMMs in kernels/blas.cu
//   src/layers/maxpool2d.cpp           kernels/maxpool2d.cu
//   src/layers/avgpool2d.cpp           kernels/avgpool2d.cu
//   src/layers/adaptive_avgpool2d.cpp  kernels/adaptive_avgpool2d.cu
//   src/layers/pool_common.cpp         kernels/pool_common.cuh (shared by the three pools)
//   src/layers/softmax_xent.cpp        kernels/softmax_xent.cu
//   src/layers/concat.cpp              kernels/backend.cu  copy_rows
//   src/models/densenet.cpp            kernels/densenet.cu swap01; its GEMMs in kernels/blas.cu
//   src/core/blas.cpp (gemm)           kernels/blas.cu     cuBLAS
//   src/optim/sgd.cpp, adamw.cpp       kernels/optim.cu    fused steps over the slab
//   src/data/transform.cpp (uint8)     kernels/transform.cu  normalize_u8 (InputStage::put_u8)
//   Tensor::fill, GradSync, trainer    kernels/elementwise.cu  fill, scale, all_finite
//   device, memory, copies, events     kernels/backend.cu; kernels/common.cuh declares the
//                                      backend class, its context and the check macros
//   channels-last typed activations    kernels/format.cu (convert, elementwise, input, pools),
//   (--gpu-layout nhwc, core/format.h)  kernels/batchnorm_nhwc.cu; convolutions in conv2d.cu
//
// Activations are void pointers with their element type (Elem) or format (Format): plain (F32
// NCHW) on the default path; on the channels-last path (--gpu-layout nhwc) F32, BF16 or F16
// and, for 4-D ones, NHWC order. Each op takes the format of its tensors and runs the kernel
// for it, refusing a format it has no kernel for; parameters, their gradients and statistics
// stay float. The typed per-element math and index order live in layers/format_math.h for host
// and device.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/format.h"
#include "core/precision.h"
#include "core/real.h"

namespace mpicnn {
struct ConvGeometry;  // layers/im2col.h: a convolution's planes, kernel, stride, padding, ...
}

namespace mpicnn::gpu {

// Math of convolutions and GEMMs (core/precision.h), per call: storage stays float32 unless the
// tensors are typed; fp16 runs tensor-core math on fp16 conversions of the fp32 data (cuDNN
// ALLOW_CONVERSION, cuBLAS 32F_FAST_16F) and needs loss scaling; bf16 likewise with bf16
// (cuBLAS 32F_FAST_16BF; cuDNN has no bf16 conversion mode for fp32 tensors, so convolutions
// of float32 tensors run TF32 there).

// Pooling geometry (PyTorch's MaxPool2d / AvgPool2d): window, stride, padding, dilation, and
// the output size the caller computed (ceil_mode is already in oh/ow).
struct PoolDesc {
  int c = 0, h = 0, w = 0, oh = 0, ow = 0;
  int kh = 1, kw = 1, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dil_h = 1, dil_w = 1;
  bool count_include_pad = true;
  int divisor_override = 0;  // 0: none
};
// Per-shape cuDNN state of one convolution (descriptors, chosen algorithms, workspace). Opaque
// here (kernels/conv2d.cu); made by Backend::conv_plan outside the training step.
struct ConvPlan;
// A point on the compute stream (a CUDA event). Opaque; made by Backend::event.
struct Event;

// Scalars of one fused optimizer step over the whole parameter slab, already rounded as the
// CPU optimizers round them (see src/optim/sgd.cpp and adamw.cpp, which fill these).
struct SgdScalars {
  float weight_decay, momentum, keep, neg_lr;  // keep = 1 - dampening, neg_lr = -lr
  int momentum_mode;  // 0: no momentum, 1: first step (buf = d), 2: later steps
  bool nesterov;
  bool any_decay;     // weight_decay != 0 (torch skips the add when it is 0)
  float grad_scale;   // gradients are multiplied by this first (1 / loss scale)
};
struct AdamScalars {
  float decay_mul;  // 1 - lr * weight_decay
  float b1, keep1, b2, keep2;  // beta1, 1 - beta1, beta2, 1 - beta2
  float bc2_sqrt, eps, neg_step;  // sqrt(1 - beta2^t), eps, -lr / (1 - beta1^t)
  bool amsgrad;
  float grad_scale;
};
// A run [begin, end) of parameter floats, with weight decay or not (Optimizer::Chunk).
struct SlabChunk {
  int64_t begin, end;
  int32_t decay;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // ---- device and settings ----------------------------------------------------------------
  // Visible CUDA devices (0 with no GPU or no driver).
  virtual int device_count() const = 0;
  // Selects device `local_rank % device_count()`, creates the stream and the cuDNN and cuBLAS
  // handles. Once per process, before any allocation; throws naming the reason on failure.
  virtual void select_device(int local_rank) = 0;
  virtual int device() const = 0;
  virtual std::string device_name() const = 0;  // "NVIDIA H100 80GB HBM3 (device 0, sm_90)"
  // The selected GPU's UUID ("GPU-8f3a0c1e-..."), as nvidia-smi -L shows it: the same on ranks
  // that share a GPU, whatever number CUDA_VISIBLE_DEVICES gives it in each.
  virtual std::string device_uuid() const = 0;
  // Waits for all work on the compute stream; throws on a pending asynchronous error.
  virtual void synchronize() = 0;
  // Device and page-locked host allocations made so far (tests prove a step allocates
  // nothing).
  virtual int64_t allocation_count() const = 0;

  // ---- memory ------------------------------------------------------------------------------
  virtual std::shared_ptr<void> alloc(size_t bytes) = 0;         // device memory, 256-aligned
  virtual std::shared_ptr<void> alloc_pinned(size_t bytes) = 0;  // page-locked host memory
  // Copies `bytes`; each pointer is device memory or host memory as its flag says. Waits
  // for the copy (and all earlier work on the compute stream).
  virtual void copy(void* dst, bool dst_device, const void* src, bool src_device,
                    size_t bytes) = 0;
  // The same copy queued on the compute stream, after the work already queued there, without
  // waiting for it. Host memory must be page-locked (alloc_pinned) and left alone until an
  // event recorded after the copy has been reached.
  virtual void copy_async(void* dst, bool dst_device, const void* src, bool src_device,
                          size_t bytes) = 0;
  // Events: record marks the point the compute stream has reached; wait blocks until the
  // stream has passed the last recorded point (at once when none was recorded) and throws on a
  // pending asynchronous error.
  virtual std::shared_ptr<Event> event() = 0;
  virtual void record(Event& e) = 0;
  virtual void wait(Event& e) = 0;
  // An event that also keeps the time it is reached (core/profile.h's GPU timing), and the
  // milliseconds of GPU time between two recorded ones; elapsed_ms waits for `end`.
  virtual std::shared_ptr<Event> timing_event() = 0;
  virtual float elapsed_ms(Event& start, Event& end) = 0;
  // Device to device on the compute stream: `rows` runs of `width` bytes, the pitches in bytes
  // (the regions must not overlap). One row: a plain copy.
  virtual void copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                         size_t width, size_t rows) = 0;

  // Gradient sync, per bucket, with numbered slots (0..; a slot may be reused once done):
  // copy_to_host_async queues an asynchronous device -> pinned host copy of `bytes` on the
  // copy stream, ordered after everything already queued on the compute stream; mark_ready
  // only marks the point the compute stream has reached (a CUDA-aware MPI then reads the
  // device memory itself). slot_done says whether the slot's copy or mark has been reached;
  // with wait, it blocks until it has (then true), without waiting for later work.
  virtual void copy_to_host_async(void* host, const real* dev, size_t bytes, int slot) = 0;
  virtual void mark_ready(int slot) = 0;
  virtual bool slot_done(int slot, bool wait) = 0;

  // ---- no layer (kernels/elementwise.cu): Tensor::fill, GradSync, the trainer -----------------
  // x = value, n elements of type t (rounded to nearest even).
  virtual void fill(Elem t, void* x, float value, int64_t n) = 0;
  virtual void scale(real* x, float a, int64_t n) = 0;
  // Whether every one of the n floats is finite. Synchronises.
  virtual bool all_finite(const real* x, int64_t n) = 0;

  // ---- Add (kernels/add.cu) and ReLU (kernels/relu.cu) ---------------------------------------
  // On n elements of type t, any layout; sums and the mask computed in float, each output
  // rounded once.
  virtual void add(Elem t, void* out, const void* a, const void* b, int64_t n) = 0;  // may alias
  virtual void accumulate(Elem t, void* dst, const void* src, int64_t n) = 0;  // dst += src
  virtual void relu_forward(Elem t, void* y, const void* x, int64_t n) = 0;    // may alias
  // dx = dy * (y > 0) ('='; dx may alias dy).
  virtual void relu_backward(Elem t, void* dx, const void* dy, const void* y, int64_t n) = 0;

  // ---- Dropout (kernels/dropout.cu) -----------------------------------------------------------
  // Dropout mask of Dropout::keep (Philox on (seed, stream, index) with index
  // (first_sample + n) * C * H * W + its NCHW position within the sample, kept when uniform >=
  // p): y = keep ? x * scale : 0, on (N, C, H, W) tensors in format f (a 2-D tensor: H = W = 1);
  // in NHWC too, each element draws with the index of its NCHW position, so the masks equal
  // the CPU's. Used for forward (x = in) and backward (x = dout) alike; y may alias x.
  virtual void dropout(Format f, void* y, const void* x, int64_t N, int64_t C, int64_t H,
                       int64_t W, uint64_t seed, uint64_t stream, uint64_t first_sample,
                       float p, float scale) = 0;

  // ---- DenseNet's layout swap (kernels/densenet.cu) -------------------------------------------
  // dst (B, A, inner) = src (A, B, inner) transposed in its first two dimensions.
  virtual void swap01(real* dst, const real* src, int64_t A, int64_t B, int64_t inner) = 0;

  // ---- input batches (kernels/transform.cu) ---------------------------------------------------
  // Input batches: out (N, C, H, W) in format f = (in (N, H, W, C) uint8 / 255 - mean[c]) /
  // std[c], mirrored left-right where flip[n] != 0 (flip may be null). mean and std are host
  // arrays of C floats.
  virtual void normalize_u8(Format f, void* out, const uint8_t* in, const uint8_t* flip,
                            int64_t N, int C, int H, int W, const real* mean,
                            const real* std) = 0;

  // ---- GEMM (kernels/blas.cu, cuBLAS): core/blas.h's gemm on the GPU --------------------------
  // Row-major C (M, N) = alpha * op(A) (M, K) * op(B) (K, N) + beta * C, as core/blas.h gemm.
  // The math in `precision` (fp32 plain, tf32/bf16/fp16 on tensor cores from fp32 data).
  virtual void gemm(Precision precision, bool trans_a, bool trans_b, int M, int N, int K,
                    float alpha, const real* A, int lda, const real* B, int ldb, float beta,
                    real* C, int ldc) = 0;

  // ---- Linear's bias (kernels/linear.cu) ------------------------------------------------------
  // db (cols) += sum over rows of dy (rows, cols): bias gradients of Linear, in the CPU's order.
  virtual void sum_rows(real* db, const real* dy, int64_t rows, int64_t cols) = 0;
  // y (rows, cols) of type t '=' y + bias (cols, float) broadcast over rows, each output rounded
  // once: Linear's bias, and a convolution's on an NHWC tensor seen as (N * H * W, C) (cuDNN's
  // bias calls on 16-bit tensors are not relied on).
  virtual void add_bias_rows(Elem t, void* y, const real* bias, int64_t rows, int64_t cols) = 0;

  // ---- Conv2d (kernels/conv2d.cu, cuDNN) ------------------------------------------------------
  // The plan of Conv2d's convolution: geometry g (input planes, kernel, stride, padding,
  // dilation, output size), g.channels -> out_channels in `groups` groups, batches up to n.
  // Descriptors and algorithms for every batch size up to n, chosen once here (cuDNN's measured
  // search at n; its heuristics when deterministic) with the workspace they need; a
  // convolution of the same shape, format and settings planned before reuses that choice.
  // `format`: of x, y, w, bias and their gradients (plain; or NHWC of any type, filters then
  // (oc, kh, kw, c / groups) and the bias (oc) in that type, math in float with tensor cores).
  // Algorithm searches conv_plan has run in this process (one per distinct convolution).
  virtual int64_t conv_searches() const = 0;
  // Its math in `precision`; deterministic: cuDNN's deterministic algorithms only (no atomics
  // in reductions), chosen by its fixed heuristic order rather than by timing, so reruns give
  // the same bits.
  virtual std::shared_ptr<ConvPlan> conv_plan(const ConvGeometry& g, int64_t n, int out_channels,
                                              int groups, Format format, Precision precision,
                                              bool deterministic) = 0;
  // y (n, oc, oh, ow) '=' conv(x (n, c, h, w), w) + bias (oc) when bias is non-null; n at most
  // the planned batch.
  virtual void conv_forward(ConvPlan& plan, void* y, const void* x, const void* w,
                            const void* bias, int n) = 0;
  // dx '=' (skipped when null), dw and dbias '+=' when accumulate_params, else '=' (each
  // skipped when null: frozen).
  virtual void conv_backward(ConvPlan& plan, void* dx, void* dw, void* dbias, const void* dy,
                             const void* x, const void* w, int n,
                             bool accumulate_params = true) = 0;
  // The bias gradient of a convolution on the channels-last path: dbias (C, float) += the sum
  // of dy (NHWC of type t, seen as (rows, C), rows = N * H * W) over the rows, in double in an
  // order fixed by the shape (the per-channel sums of batchnorm_nhwc.cu), not rounded to 16 bits
  // before it reaches the slab. (kernels/batchnorm_nhwc.cu)
  virtual void conv_bias_grad(Elem t, real* dbias, const void* dy, int64_t rows, int64_t C) = 0;
  // Readies `plan` for conv_bias_act_forward (folded inference, layers/fold.h): the workspace
  // its algorithm needs at the planned batch; for a typed plan, one trial call, so that a type
  // cuDNN's fused call refuses stops here. Plan time (may allocate), after conv_plan.
  virtual void conv_bias_act_plan(ConvPlan& plan) = 0;
  // y '=' act(conv(x, w) + bias (oc) + z) in one cuDNN call (cudnnConvolutionBiasActivation-
  // Forward), act the ReLU when relu, else none; z (n, oc, oh, ow) may be null (nothing added)
  // and may alias y. n at most the planned batch.
  // All operands in the plan's format (the bias (oc) of its element type); on the channels-last
  // typed path w is KRSC, as conv_forward's.
  virtual void conv_bias_act_forward(ConvPlan& plan, void* y, const void* x, const void* w,
                                     const void* bias, const void* z, bool relu, int n) = 0;

  // ---- BatchNorm2d (kernels/batchnorm.cu) -----------------------------------------------------
  // Training: batch statistics (biased variance to normalise), running_mean/var updated with
  // momentum and the unbiased variance; save_mean/save_invstd (C) keep the batch's mean and
  // 1/sqrt(var + eps). Eval: running statistics, and save_* get them for backward. Fused
  // (ExecConfig::fusion), in the same pass: + residual (when non-null), then relu. x, y,
  // residual (and backward's dx, dy) in format f: plain (kernels/batchnorm.cu), or NHWC of any
  // type (kernels/batchnorm_nhwc.cu: the same contract, each output rounded once to its type).
  virtual void batchnorm_forward(Format f, void* y, real* save_mean, real* save_invstd,
                                 real* running_mean, real* running_var, const void* x,
                                 const real* weight, const real* bias, const void* residual,
                                 bool relu, int64_t N, int64_t C, int64_t HW, float eps,
                                 float momentum, bool training) = 0;
  // dx '=' (may alias dy; skipped when null), dweight and dbias '+=' (skipped when null: frozen
  // parameters). training: through the batch statistics; eval: the affine map only. With y
  // (the output of a fused ReLU; else null), dy is that ReLU's output gradient, masked by y > 0.
  virtual void batchnorm_backward(Format f, void* dx, real* dweight, real* dbias,
                                  const void* dy, const void* y, const void* x,
                                  const real* weight, const real* save_mean,
                                  const real* save_invstd, int64_t N, int64_t C, int64_t HW,
                                  bool training) = 0;

  // ---- a BatchNorm2d folded into its Conv2d (kernels/fold.cu, layers/fold_math.h) ------------
  // w_out (oc, per_oc) '=' w * s and b_out (oc) '=' (b - mean) * s + beta with s = gamma /
  // sqrt(var + eps) per output channel; b (oc) null for a convolution without bias.
  virtual void fold_conv_bn(real* w_out, real* b_out, const real* w, const real* b,
                            const real* gamma, const real* beta, const real* mean,
                            const real* var, float eps, int64_t oc, int64_t per_oc) = 0;

  // ---- MaxPool2d (kernels/maxpool2d.cu; NHWC in kernels/format.cu) --------------------------
  // y (N, C, OH, OW) = window max; argmax (N, C, OH, OW) int32 = h * W + w of the first max
  // (within the plane, in either order), -1 for a window without input cells (y = -inf there).
  // NaN propagates. Tensors in format f: plain, or NHWC of any type.
  virtual void maxpool_forward(Format f, void* y, int32_t* argmax, const void* x, int64_t N,
                               const PoolDesc& d) = 0;
  // dx (N, C, H, W) '=' sum of dy over the outputs whose argmax is this cell (deterministic).
  virtual void maxpool_backward(Format f, void* dx, const void* dy, const int32_t* argmax,
                                int64_t N, const PoolDesc& d) = 0;

  // ---- AvgPool2d (kernels/avgpool2d.cu) -------------------------------------------------------
  // y (N, C, OH, OW) = window sums / divisors; backward dx (N, C, H, W) '=' dy / divisor
  // gathered per cell. Both tensors in format f: plain, or NHWC of any type (sums in float).
  virtual void avgpool_forward(Format f, void* y, const void* x, int64_t N,
                               const PoolDesc& d) = 0;
  virtual void avgpool_backward(Format f, void* dx, const void* dy, int64_t N,
                                const PoolDesc& d) = 0;

  // ---- AdaptiveAvgPool2d (kernels/adaptive_avgpool2d.cu; NHWC in kernels/format.cu) ---------
  // AdaptiveAvgPool2d bins [floor(i*H/OH), ceil((i+1)*H/OH)); d.kh etc. unused. Tensors in
  // format f: plain, or NHWC of any type (sums in float).
  virtual void adaptive_avgpool_forward(Format f, void* y, const void* x, int64_t N,
                                        const PoolDesc& d) = 0;
  virtual void adaptive_avgpool_backward(Format f, void* dx, const void* dy, int64_t N,
                                         const PoolDesc& d) = 0;

  // ---- SoftmaxCrossEntropy (kernels/softmax_xent.cu) ------------------------------------------
  // probs (N, C) = softmax(logits); row_loss (N) doubles = (1-eps) * -log p[n, y_n] +
  // eps/C * sum_c -log p[n, c]. targets is device int32. The caller averages the rows in row
  // order (as the CPU does), after copying them back.
  virtual void softmax_xent_forward(real* probs, double* row_loss, const real* logits,
                                    const int32_t* targets, int64_t N, int64_t C,
                                    float label_smoothing) = 0;
  // dlogits '=' scale * (probs - ((1-eps) onehot + eps/C)) / N.
  virtual void softmax_xent_backward(real* dlogits, const real* probs, const int32_t* targets,
                                     int64_t N, int64_t C, float label_smoothing,
                                     float scale) = 0;

  // ---- format conversion (kernels/format.cu) -------------------------------------------------
  // dst (N, C, H, W) in format df '=' src in format sf, element by element, converted through
  // float (16-bit types rounded to nearest even); with accumulate (df F32 only), dst '+='.
  // Weights (O, I, KH, KW) convert as (N, C, H, W) (NHWC: cuDNN's KRSC filters), a bias (C)
  // as (1, C, 1, 1). Formats of fewer than 4 dimensions: call with H = W = 1.
  virtual void convert(void* dst, Format df, const void* src, Format sf, int64_t N, int64_t C,
                       int64_t H, int64_t W, bool accumulate) = 0;

  // ---- optimizers (kernels/optim.cu): one launch over the whole slab -----------------------
  // chunks: device array of nchunks runs (made once by the optimizer). buf is the momentum
  // slab (null when momentum is 0).
  virtual void sgd_step(real* params, real* buf, const real* grads, const SlabChunk* chunks,
                        int64_t nchunks, int64_t max_chunk, const SgdScalars& s) = 0;
  virtual void adamw_step(real* params, real* m, real* v, real* vmax, const real* grads,
                          const SlabChunk* chunks, int64_t nchunks, int64_t max_chunk,
                          const AdamScalars& s) = 0;
};

// Why there is no usable GPU, or "" when there is one: "this build has no CUDA backend
// (rebuild with make CUDA=1)", "no CUDA device visible (cudaGetDeviceCount: ...)".
std::string unavailable_reason();
// The backend; throws mpicnn::Error with unavailable_reason() when there is none.
Backend& backend();
// Defined by the linked backend: kernels/backend.cu, or src/core/gpu_absent.cpp (null).
Backend* backend_instance();
// Whether this binary was linked with the CUDA backend.
bool compiled_in();

}  // namespace mpicnn::gpu
