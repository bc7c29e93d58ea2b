// GEMM on cuBLAS with core/blas.h's row-major semantics: the GPU side of core/blas.h's gemm,
// for Linear (kernels/linear.cu has its bias kernels) and DenseNet's 1x1 convolutions. Not a
// GEMM kernel of our own: only the K == 0 case (C = beta * C) is done here, by hand.
#include "common.cuh"

namespace mpicnn::gpu {

namespace {

// C (M, N) with row stride ldc = beta * C; beta == 0 writes zeros without reading C (BLAS
// semantics, as core/blas.cpp: NaNs in an uninitialised C must not survive).
__global__ void scale_rows_kernel(float* C, float beta, int64_t M, int64_t N, int64_t ldc) {
  const int64_t total = M * N;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = idx / N, j = idx % N;
    float* c = C + i * ldc + j;
    *c = beta == 0.f ? 0.f : beta * *c;
  }
}

// cuBLAS compute type for the call's precision. fp32 is CUBLAS_COMPUTE_32F, which stays
// plain fp32 because the backend leaves the handle in CUBLAS_DEFAULT_MATH (no TF32 opt-in);
// the FAST types let cuBLAS convert the fp32 inputs to TF32 / bf16 / fp16 for tensor cores.
cublasComputeType_t compute_type(Precision p) {
  switch (p) {
    case Precision::kFp32: return CUBLAS_COMPUTE_32F;
    case Precision::kTf32: return CUBLAS_COMPUTE_32F_FAST_TF32;
    case Precision::kBf16: return CUBLAS_COMPUTE_32F_FAST_16BF;
    case Precision::kFp16: return CUBLAS_COMPUTE_32F_FAST_16F;
  }
  return CUBLAS_COMPUTE_32F;
}

}  // namespace

void CudaBackend::gemm(Precision precision, bool trans_a, bool trans_b, int M, int N, int K,
                       float alpha, const float* A, int lda, const float* B, int ldb, float beta,
                       float* C, int ldc) {
  if (M == 0 || N == 0) return;
  Context& c = ctx();
  if (K == 0) {  // op(A) * op(B) is all zeros; lda/ldb may be 0 here, which cuBLAS rejects
    scale_rows_kernel<<<blocks_for(int64_t(M) * N), kThreads, 0, c.stream>>>(C, beta, M, N, ldc);
    KERNEL_CHECK();
    return;
  }
  // cuBLAS is column-major: a row-major (R, S) matrix with row stride ld is the column-major
  // (S, R) matrix with the same ld, its transpose. So row-major C = op(A) op(B) is column-major
  // C^T = op(B)^T op(A)^T: swap the operands (and M with N), keep each one's transpose flag.
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(cublasGemmEx(c.cublas, op_b, op_a, N, M, K, &alpha, B, CUDA_R_32F, ldb, A,
                            CUDA_R_32F, lda, &beta, C, CUDA_R_32F, ldc, compute_type(precision),
                            CUBLAS_GEMM_DEFAULT));
}

}  // namespace mpicnn::gpu
