// Row-major GEMM on OpenBLAS (cblas_sgemm, or cblas_dgemm in the f64 test build) or Eigen. Eigen's product runs on the OpenMP pool (it reads
// omp_get_max_threads, which set_num_threads sets) and splits C among threads, each element
// summed by one thread in a fixed order: deterministic for a fixed thread count.
#include "core/blas.h"

#include <cblas.h>

// GCC 12 warns -W(maybe-)uninitialized inside Eigen's AVX-512 transpose (GCC's own
// _mm512_undefined_ps, GCC bug 105593, inlined into Eigen's GEMM packing): not our code,
// silenced for Eigen's and the intrinsics' headers (and the GEMM instantiated from them) only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#include <Eigen/Core>
#pragma GCC diagnostic pop
#include <atomic>
#include <cstdlib>

#include "core/check.h"
#include "core/gemm_bf16.h"
#include "core/gpu.h"

namespace mpicnn {

namespace {

std::atomic<GemmBackend>& backend_slot() {
  static std::atomic<GemmBackend> slot{GemmBackend::kOpenBlas};
  return slot;
}

using RowMajor = Eigen::Matrix<real, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMap = Eigen::Map<const RowMajor, Eigen::Unaligned, Eigen::OuterStride<>>;
using Map = Eigen::Map<RowMajor, Eigen::Unaligned, Eigen::OuterStride<>>;

template <typename OpA, typename OpB>
void eigen_product(Map& c, const OpA& a, const OpB& b, real alpha, real beta) {
  if (beta == 0.f) {
    if (alpha == 1.f) c.noalias() = a * b;
    else c.noalias() = alpha * (a * b);
    return;
  }
  if (beta != 1.f) c *= beta;
  if (alpha == 1.f) c.noalias() += a * b;
  else c.noalias() += alpha * (a * b);
}

void eigen_gemm(bool ta, bool tb, int M, int N, int K, real alpha, const real* A, int lda,
                 const real* B, int ldb, real beta, real* C, int ldc) {
  // Stored shapes: A is (M, K) or, transposed, (K, M); likewise B.
  const ConstMap a(A, ta ? K : M, ta ? M : K, Eigen::OuterStride<>(lda));
  const ConstMap b(B, tb ? N : K, tb ? K : N, Eigen::OuterStride<>(ldb));
  Map c(C, M, N, Eigen::OuterStride<>(ldc));
  if (!ta && !tb) eigen_product(c, a, b, alpha, beta);
  else if (!ta && tb) eigen_product(c, a, b.transpose(), alpha, beta);
  else if (ta && !tb) eigen_product(c, a.transpose(), b, alpha, beta);
  else eigen_product(c, a.transpose(), b.transpose(), alpha, beta);
}

// cblas by element type: only `real`'s is called.
[[maybe_unused]] void cblas_gemm(CBLAS_ORDER o, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M,
                                 int N, int K, float alpha, const float* A, int lda,
                                 const float* B, int ldb, float beta, float* C, int ldc) {
  cblas_sgemm(o, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
[[maybe_unused]] void cblas_gemm(CBLAS_ORDER o, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M,
                                 int N, int K, double alpha, const double* A, int lda,
                                 const double* B, int ldb, double beta, double* C, int ldc) {
  cblas_dgemm(o, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace

GemmBackend gemm_backend() { return backend_slot().load(std::memory_order_relaxed); }
void set_gemm_backend(GemmBackend backend) { backend_slot().store(backend); }

GemmBackend parse_gemm_backend(const std::string& name) {
  if (name == "eigen") return GemmBackend::kEigen;
  if (name == "openblas") return GemmBackend::kOpenBlas;
  FAIL("GEMM backend must be eigen or openblas, got '", name, "'");
}

const char* gemm_backend_name(GemmBackend backend) {
  return backend == GemmBackend::kEigen ? "eigen" : "openblas";
}

void gemm(bool trans_a, bool trans_b, int M, int N, int K, real alpha, const real* A, int lda,
           const real* B, int ldb, real beta, real* C, int ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) {  // op(A) * op(B) is all zeros: C = beta * C (BLAS semantics)
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j) C[size_t(i) * ldc + j] = beta == 0.f ? 0.f : beta * C[size_t(i) * ldc + j];
    return;
  }
  if (gemm_backend() == GemmBackend::kEigen) {
    eigen_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  cblas_gemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
             trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm_in(Device device, Precision precision, bool trans_a, bool trans_b, int M, int N, int K,
             real alpha, const real* A, int lda, const real* B, int ldb, real beta, real* C,
             int ldc) {
  if (device == Device::CUDA)
    return gpu::backend().gemm(precision, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C,
                               ldc);
#if !(defined(MPICNN_F64) && MPICNN_F64)
  if (precision == Precision::kBf16)
    return gemm_bf16(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#endif
  CHECK(precision == Precision::kFp32, "gemm_in: ", precision_name(precision),
        " on the CPU (fp32, or bf16 in the float build)");
  gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace mpicnn
