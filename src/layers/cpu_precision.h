// The precision of the CPU layers' GEMMs, process-wide: fp32 (the default: core/blas.h's gemm,
// bit for bit as without this switch) or bf16 (core/gemm_bf16.h: inputs rounded to bfloat16,
// products summed in float32). Conv2d (its im2col path: forward, weight and input gradients;
// on AVX512-BF16 its direct kernels, layers/conv_direct.h), Linear and DenseNet's 1x1
// bottleneck convolutions (one GEMM each) read it in plan(), once, when the model is built;
// weights stay float32 masters,
// rounded by each GEMM or packing. In training, a BatchNorm after a convolution keeps its input
// in bf16 (bf16_batchnorm_input); other activations, gradients, BatchNorm's arithmetic and
// the optimizer stay float32. The float64 test build has fp32 only.
#pragma once
#include <string>

#include "core/real.h"
#include "core/tensor.h"

namespace mpicnn {

enum class CpuPrecision { kFp32, kBf16 };
// The default comes from MPICNN_CPU_PRECISION=fp32|bf16, else kFp32.
CpuPrecision cpu_precision();
void set_cpu_precision(CpuPrecision precision);
CpuPrecision parse_cpu_precision(const std::string& name);  // "fp32" | "bf16", else an Error
const char* cpu_precision_name(CpuPrecision precision);

// Whether a BatchNorm2d whose input is a convolution's output, read by nothing else, keeps that
// input in bf16 and runs in place over it (BatchNorm2d::set_bf16_input; the modules arrange
// it): in plans made now, bf16 precision, on the CPU, for training (an inference plan runs
// BatchNorm in place anyway and keeps nothing for backward: layers/plan_mode.h).
bool bf16_batchnorm_input();

// gemm (core/blas.h, CPU) in `precision`: C = alpha * op(A) * op(B) + beta * C, row-major.
void gemm_in(CpuPrecision precision, bool trans_a, bool trans_b, int M, int N, int K, real alpha,
             const real* A, int lda, const real* B, int ldb, real beta, real* C, int ldc);
// The same on `device`: on the CPU in `precision`, on a GPU core/blas.h's gemm (the GPU's own
// precision, gpu.h). For the layers that call GEMMs themselves (Linear, DenseNet's 1x1 conv).
void gemm_in(Device device, CpuPrecision precision, bool trans_a, bool trans_b, int M, int N,
             int K, real alpha, const real* A, int lda, const real* B, int ldb, real beta, real* C,
             int ldc);

}  // namespace mpicnn
