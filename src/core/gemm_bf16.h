// Row-major GEMM with bfloat16 inputs and float32 accumulation on the CPU:
// C = alpha * op(A) * op(B) + beta * C, where every element of A and B is rounded to bf16 (or
// given as bf16) and products are summed in float32, as PyTorch's CPU bf16 autocast does.
// Not a BLAS and not fp32-accurate: op(A) * op(B) carries bf16's 8-bit mantissa error.
//
// Two paths compute the same bits: the native one (AVX512-BF16's vdpbf16ps, core/cpu/
// gemm_bf16_avx512.cpp) and an emulated one in plain float32 arithmetic for CPUs without it
// (core/cpu/gemm_bf16_emulated.cpp). What both compute, exactly:
// - each fp32 input is rounded to bf16 to nearest even, with fp32 subnormals read as zero
//   (bf16_round; PyTorch's float_to_bf16 in core/half.h keeps them); bf16 subnormals given as
//   input are read as zero too (the instruction's DAZ);
// - K is taken in pairs (k even, k + 1; a zero after an odd K), and in blocks of kBf16KC values;
//   within a block, for each pair in order, acc = flush(fma(a[k+1], b[k+1], acc)), then
//   acc = flush(fma(a[k], b[k], acc)) (each product is exact in fp32, so each step is one
//   rounded add; flush: a subnormal result becomes a zero of its sign, the instruction's FTZ);
// - block 0 writes C = alpha * acc (beta == 0: C is not read) or fma(beta, C, alpha * acc);
//   each later block C = fma(alpha, acc, C).
// The order does not depend on the thread count: the same inputs give the same bits always.
#pragma once
#include <cstdint>
#include <string>

namespace mpicnn {

using bf16_t = uint16_t;  // the bits of a bfloat16 (sign, 8 exponent, 7 mantissa)

// Which path gemm_bf16 runs, process-wide: native where the CPU has AVX512-BF16, else
// emulated (in AVX-512F where the CPU has AVX-512, else the reference's scalar code), unless
// set_bf16_path says otherwise (core/device.h: MPICNN_BF16=native|emulated|reference). The
// reference is the definition in plain scalar float32, on any CPU: the bits every path must give.
enum class Bf16Path { kReference, kEmulated, kNative };
Bf16Path bf16_path();
void set_bf16_path(Bf16Path path);  // a path this CPU cannot run is an Error naming it
Bf16Path best_bf16_path();          // of this CPU
bool bf16_native();                 // bf16_path() == kNative
// Whether the path runs AVX-512 kernels: native, or emulated on a CPU with AVX-512F/BW/VL
// (the direct convolution's bf16 kernels exist for these two: layers/conv_direct.h).
bool bf16_avx512();
// "native" | "emulated" | "reference", else an Error
Bf16Path parse_bf16_path(const std::string& name);
const char* bf16_path_name(Bf16Path path);
// The kernels gemm_bf16 runs now, for a user: "AVX512-BF16", "emulated in AVX-512F, about
// fp32's speed" or "emulated in scalar float32, several times slower than fp32"
// (bench/RESULTS.md).
const char* bf16_kernels_name();

// The rounding gemm_bf16 applies to fp32 inputs (see above), exposed for tests and callers
// that want to predict it. NaN stays NaN (quiet, sign and top payload kept).
bf16_t bf16_round(float x);
// dst[i] = bf16_round(src[i]), vectorised on the native path. For weights converted once per
// step and handed to gemm_bf16 as bf16.
void to_bf16(bf16_t* dst, const float* src, int64_t n);
void from_bf16(float* dst, const bf16_t* src, int64_t n);  // exact

// Kernel blocking, exported for tests that want to cross a block edge: register tile kBf16MR x
// kBf16NR of C, kBf16KC values of K per block (even).
constexpr int kBf16MR = 8, kBf16NR = 48, kBf16KC = 512;

// op(A) is M x K, op(B) is K x N, C is M x N; lda/ldb/ldc are row strides of the stored
// (untransposed) matrices, as core/blas.h's gemm. A and B are each float (rounded with
// bf16_round while packing) or bf16_t. Threads: the OpenMP pool (set_num_threads).
template <typename TA, typename TB>
void gemm_bf16(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const TA* A,
               int lda, const TB* B, int ldb, float beta, float* C, int ldc);

// op(A) packed once for several GEMMs that share it (a convolution's weights against each image
// in turn): bf16_packed_a_size(M, K) bf16 values of storage (the caller's, 64-byte aligned),
// filled by pack_a_bf16 (A float, rounded as gemm_bf16 rounds it), then gemm_bf16_packed_a
// gives what gemm_bf16 gives with that op(A), bit for bit, packing only op(B).
int64_t bf16_packed_a_size(int M, int K);
void pack_a_bf16(bf16_t* dst, bool trans_a, int M, int K, const float* A, int lda);
template <typename TB>
void gemm_bf16_packed_a(const bf16_t* apack, int M, int N, int K, float alpha, bool trans_b,
                        const TB* B, int ldb, float beta, float* C, int ldc);

}  // namespace mpicnn
