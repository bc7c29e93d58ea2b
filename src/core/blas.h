// Row-major single-precision GEMM on OpenBLAS: C = alpha * op(A) * op(B) + beta * C.
// The one place the engine calls BLAS, so the library can be swapped or instrumented here.
#pragma once
#include <cblas.h>

namespace mpicnn {

// op(A) is M x K, op(B) is K x N, C is M x N; lda/ldb/ldc are row strides of the stored
// (untransposed) matrices.
inline void sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A,
                  int lda, const float* B, int ldb, float beta, float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace mpicnn
