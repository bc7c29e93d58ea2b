// The CPU layers' GEMM precision switch (layers/cpu_precision.h): fp32 calls core/blas.h's gemm
// unchanged; bf16 calls core/gemm_bf16.h's, which only the float build has.
#include "layers/cpu_precision.h"

#include <atomic>
#include <cstdlib>

#include "core/blas.h"
#include "core/check.h"
#include "core/gemm_bf16.h"
#include "layers/plan_mode.h"

namespace mpicnn {

namespace {

constexpr bool kFloatBuild = sizeof(real) == sizeof(float);

std::atomic<CpuPrecision>& precision_slot() {
  static std::atomic<CpuPrecision> slot{[] {
    const char* v = std::getenv("MPICNN_CPU_PRECISION");
    const CpuPrecision p = v && *v ? parse_cpu_precision(v) : CpuPrecision::kFp32;
    CHECK(kFloatBuild || p == CpuPrecision::kFp32, "MPICNN_CPU_PRECISION=", v,
          ": the float64 build computes in float64 only");
    return p;
  }()};
  return slot;
}

}  // namespace

CpuPrecision cpu_precision() { return precision_slot().load(); }
void set_cpu_precision(CpuPrecision precision) {
  CHECK(kFloatBuild || precision == CpuPrecision::kFp32,
        "CPU precision ", cpu_precision_name(precision), ": the float64 build has fp32 only");
  precision_slot().store(precision);
}
CpuPrecision parse_cpu_precision(const std::string& name) {
  if (name == "fp32") return CpuPrecision::kFp32;
  if (name == "bf16") return CpuPrecision::kBf16;
  FAIL("CPU precision must be fp32 or bf16, got '", name, "'");
}
const char* cpu_precision_name(CpuPrecision precision) {
  return precision == CpuPrecision::kBf16 ? "bf16" : "fp32";
}

bool bf16_batchnorm_input() {
  return cpu_precision() == CpuPrecision::kBf16 && default_device() == Device::CPU &&
         !plan_mode::inference();
}

void gemm_in(CpuPrecision precision, bool trans_a, bool trans_b, int M, int N, int K, real alpha,
             const real* A, int lda, const real* B, int ldb, real beta, real* C, int ldc) {
#if !(defined(MPICNN_F64) && MPICNN_F64)
  if (precision == CpuPrecision::kBf16)
    return gemm_bf16(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#endif
  CHECK(precision == CpuPrecision::kFp32, "gemm_in: bf16 in the float64 build");
  gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm_in(Device device, CpuPrecision precision, bool trans_a, bool trans_b, int M, int N,
             int K, real alpha, const real* A, int lda, const real* B, int ldb, real beta, real* C,
             int ldc) {
  if (device == Device::CPU)
    return gemm_in(precision, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  gemm(device, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace mpicnn
