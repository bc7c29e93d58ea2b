// Row-major GEMM on `real` (float; double in the f64 test build): C = alpha * op(A) * op(B) + beta * C, on OpenBLAS or on
// Eigen's GEMM, and the same call dispatched by device (CUDA: the GPU backend's cuBLAS GEMM).
// The one place the engine calls BLAS, so the backend is chosen here.
// Not a BLAS: only the row-major GEMM the layers need.
#pragma once
#include <string>

#include "core/precision.h"
#include "core/real.h"
#include "core/tensor.h"

namespace mpicnn {

// Eigen compiles its kernels for this machine (-march=native: AVX-512 where the CPU has it);
// Debian's OpenBLAS picks its kernels at run time, and OPENBLAS_CORETYPE can hold it to an
// older set (AVX2). bench/RESULTS.md measures both on the convolution shapes.
enum class GemmBackend { kEigen, kOpenBlas };

// Process-wide; kOpenBlas unless set_gemm_backend (core/device.h: MPICNN_GEMM=eigen). Both give
// deterministic results for a fixed thread count, but not the same bits as each other.
// Both pass the PyTorch parity suite (tests/README.md: its float32 tolerances follow PyTorch's
// own rounding spread). OpenBLAS stays the default until the CPU speed work measures which is
// faster on users' machines (bench/RESULTS.md has Eigen 5-20% faster against AVX2 OpenBLAS).
GemmBackend gemm_backend();
void set_gemm_backend(GemmBackend backend);
GemmBackend parse_gemm_backend(const std::string& name);  // "eigen" | "openblas", else Error
const char* gemm_backend_name(GemmBackend backend);

// op(A) is M x K, op(B) is K x N, C is M x N; lda/ldb/ldc are row strides of the stored
// (untransposed) matrices. Threads: the OpenMP pool (set_num_threads).
void gemm(bool trans_a, bool trans_b, int M, int N, int K, real alpha, const real* A, int lda,
           const real* B, int ldb, real beta, real* C, int ldc);
// The same GEMM on `device`, where A, B and C all live, in `precision` (core/precision.h): on the
// CPU the one above (fp32) or core/gemm_bf16.h's (bf16: inputs rounded to bfloat16, float32
// sums; the float build only); on CUDA the GPU backend's (kernels/blas.cu: cuBLAS in that
// precision; float builds only, the f64 test build has no GPU backend). For the layers that call
// GEMMs themselves (Linear, Conv2d's im2col path, DenseNet's 1x1 convolutions).
void gemm_in(Device device, Precision precision, bool trans_a, bool trans_b, int M, int N, int K,
             real alpha, const real* A, int lda, const real* B, int ldb, real beta, real* C,
             int ldc);

}  // namespace mpicnn
