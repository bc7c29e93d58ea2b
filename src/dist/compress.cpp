// fp16 / bf16 gradient compression: the casts and the MPI sum of 16-bit values.
#include "dist/compress.h"

#include "core/check.h"
#include "core/half.h"
#include "dist/comm.h"

namespace mpicnn::dist {

const char* to_string(GradCompression c) {
  switch (c) {
    case GradCompression::Fp16: return "fp16";
    case GradCompression::Bf16: return "bf16";
    default: return "none";
  }
}

GradCompression parse_grad_compression(const std::string& s, const std::string& flag) {
  if (s == "none") return GradCompression::None;
  if (s == "fp16") return GradCompression::Fp16;
  if (s == "bf16") return GradCompression::Bf16;
  FAIL(flag, ": '", s, "' is not a gradient compression (none, fp16 or bf16)");
}

void compress(GradCompression c, const float* in, uint16_t* out, int64_t n) {
  CHECK(c != GradCompression::None, "compress: no compression format");
  if (c == GradCompression::Fp16) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) out[i] = float_to_half(in[i]);
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) out[i] = float_to_bf16(in[i]);
  }
}

void decompress(GradCompression c, const uint16_t* in, float* out, int64_t n) {
  CHECK(c != GradCompression::None, "decompress: no compression format");
  if (c == GradCompression::Fp16) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) out[i] = half_to_float(in[i]);
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_float(in[i]);
  }
}

namespace {
// MPI_User_function: inout[i] = in[i] + inout[i], added in float, rounded to the format.
void fp16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = float_to_half(half_to_float(a[i]) + half_to_float(b[i]));
}
void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = float_to_bf16(bf16_to_float(a[i]) + bf16_to_float(b[i]));
}
}  // namespace

HalfSum::HalfSum(GradCompression c) {
  CHECK(c != GradCompression::None, "HalfSum: no compression format");
  MPI_CHECK(MPI_Op_create(c == GradCompression::Fp16 ? fp16_sum : bf16_sum, /*commute=*/1, &op_));
}

HalfSum::~HalfSum() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && op_ != MPI_OP_NULL) MPI_Op_free(&op_);
}

}  // namespace mpicnn::dist
