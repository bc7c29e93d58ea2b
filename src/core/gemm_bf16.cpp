// The bf16 GEMM's driver: path selection, cache blocking, packing and threading; the kernels it
// calls are core/cpu/gemm_bf16_*.cpp. GotoBLAS's loops, with B streamed rather than A: op(A)
// packed whole (once, shared by the threads); each thread packs its columns of op(B) a block of
// KC x kNC at a time (512 x 576 bf16: 576 KiB, kept in L2), and runs each A panel (8 x 512
// bf16: 8 KiB, kept in L1) against the block's B panels. A K block of 512 rather than 256
// halves the passes over C (bench/RESULTS.md: 2048^3 at 2 threads 505-560 -> 780-815 GFLOP/s;
// resnet18's layer shapes the same within noise).
#include "core/gemm_bf16.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <type_traits>

#include "core/check.h"
#include "core/cpu/gemm_bf16_kernels.h"

namespace mpicnn {

namespace {

using bf16k::MR;
using bf16k::NR;
constexpr int KC = kBf16KC;
static_assert(KC % 2 == 0, "a K block holds whole pairs");
constexpr int kNC = 12 * NR;  // columns of B per packed block
// Below this many multiply-adds a GEMM runs on the calling thread: waking the pool would cost
// more than the work (a few microseconds).
constexpr int64_t kParallelMacs = int64_t(1) << 18;

bool cpu_has_avx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
}
bool cpu_has_bf16() { return cpu_has_avx512() && __builtin_cpu_supports("avx512bf16"); }

std::atomic<Bf16Path>& path_slot() {
  static std::atomic<Bf16Path> slot{best_bf16_path()};
  return slot;
}

const bf16k::Kernels& kernels() {
  switch (bf16_path()) {
    case Bf16Path::kNative: return *bf16k::native_kernels();
    case Bf16Path::kEmulated:
      if (cpu_has_avx512()) return *bf16k::emulated_avx512_kernels();
      break;
    case Bf16Path::kReference: break;
  }
  return *bf16k::emulated_kernels();
}

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// A 64-byte-aligned packing buffer that grows and is kept: one per thread, so a training
// step's GEMMs allocate nothing after the first.
class PackBuffer {
 public:
  bf16_t* get(int64_t n) {
    if (n > size_) {
      const size_t bytes = size_t(round_up(n * int64_t(sizeof(bf16_t)), 64));
      data_.reset(static_cast<bf16_t*>(std::aligned_alloc(64, bytes)));
      CHECK(data_ != nullptr, "gemm_bf16: cannot allocate ", bytes, " bytes for packing");
      size_ = n;
    }
    return data_.get();
  }

 private:
  struct Free {
    void operator()(bf16_t* p) const { std::free(p); }
  };
  std::unique_ptr<bf16_t, Free> data_;
  int64_t size_ = 0;
};

// A matrix read as lanes (rows of op(A), columns of op(B)) by K: element (l, k) is
// p[l * ls + k * ks].
template <typename T>
struct Operand {
  const T* p;
  int64_t ls, ks;
};

// Packs lanes [l0, l0 + lanes) by K values [k0, k0 + kc) into a W-lane panel.
void pack(const bf16k::Kernels& k, bf16_t* dst, const Operand<float>& s, int64_t l0,
          int lanes, int W, int64_t k0, int kc) {
  k.pack_f32(dst, s.p + l0 * s.ls + k0 * s.ks, s.ls, s.ks, lanes, W, kc);
}
void pack(const bf16k::Kernels&, bf16_t* dst, const Operand<bf16_t>& s, int64_t l0, int lanes,
          int W, int64_t k0, int kc) {
  bf16k::pack_scalar(dst, s.p + l0 * s.ls + k0 * s.ks, s.ls, s.ks, lanes, W, kc, 0, W, 0,
                     (kc + 1) / 2);
}

// The threads as a gm x gn grid over A's panels of MR rows and C's units of 16 columns (the
// micro-kernel's vectors): the split whose busiest thread has the fewest row panels x units;
// on a tie, more column blocks (each thread then packs only its own part of B).
struct Grid {
  int gm = 1, gn = 1;
};
Grid choose_grid(int threads, int64_t pm, int64_t units) {
  Grid best;
  int64_t best_cost = -1;
  for (int gn = threads; gn >= 1; --gn) {
    const int gm = threads / gn;
    const int64_t cost = (pm + gm - 1) / gm * ((units + gn - 1) / gn);
    if (best_cost < 0 || cost < best_cost) best = {gm, gn}, best_cost = cost;
  }
  return best;
}

struct Problem {
  int M, N, K;
  float alpha, beta;
  float* C;
  int64_t ldc;
  int64_t Mp;  // M rounded up to whole A panels
};

// One thread's tiles: rows [m0, m1) and columns [n0, n1) of C, against all of K. B's panels are
// NR columns but the last of a block, 16, 32 or 48 as its columns need.
template <typename TB>
void run_block(const bf16k::Kernels& k, const Problem& p, const bf16_t* apack,
               const Operand<TB>& b, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  static thread_local PackBuffer bbuf;
  bf16_t* bp = bbuf.get(int64_t(kNC) * KC);
  for (int64_t jc = n0; jc < n1; jc += kNC) {
    const int nc = int(std::min<int64_t>(kNC, n1 - jc));
    for (int64_t k0 = 0; k0 < p.K; k0 += KC) {
      const int kc = int(std::min<int64_t>(KC, p.K - k0));
      const int64_t kcp = round_up(kc, 2);
      for (int j = 0; j < nc; j += NR) {
        const int cols = std::min(NR, nc - j);
        pack(k, bp + j * kcp, b, jc + j, cols, int(round_up(cols, 16)), k0, kc);
      }
      for (int64_t i = m0; i < m1; i += MR)
        for (int j = 0; j < nc; j += NR) {
          const int cols = std::min(NR, nc - j);
          const int rows = int(std::min<int64_t>(MR, m1 - i));
          const bf16k::Tile t{p.C + i * p.ldc + jc + j, p.ldc, rows, cols,
                              p.alpha, p.beta, k0 == 0};
          k.micro(apack + p.Mp * k0 + i * kcp, bp + j * kcp, kcp / 2, (cols + 15) / 16, t);
        }
    }
  }
}

// op(A) packed by K block, then panel: block k0 starts at Mp * k0, its panel i / MR at
// i * kcp (kcp: the block's K rounded up to pairs). Call inside a parallel region (or none):
// the panels are shared out over the threads panel-major (each thread whole rows of panels,
// so that the short last K block is not one thread's alone), two panels per unit for a float
// op(A) with K contiguous (the kernels round and transpose 16 lanes at a time:
// gemm_bf16_kernels.h).
template <typename TA>
void pack_a(const bf16k::Kernels& k, bf16_t* apack, int M, int K, int64_t Mp,
            const Operand<TA>& a) {
  const int64_t per = std::is_same_v<TA, float> && a.ks == 1 ? 2 : 1;  // panels per unit
  const int64_t pu = (Mp / MR + per - 1) / per, kblocks = (K + KC - 1) / KC;
#pragma omp for schedule(static)
  for (int64_t u = 0; u < kblocks * pu; ++u) {
    const int64_t k0 = u % kblocks * KC, i = u / kblocks * per * MR;
    const int kc = int(std::min<int64_t>(KC, K - k0));
    const int rows = int(std::min<int64_t>(per * MR, M - i));
    pack(k, apack + Mp * k0 + i * round_up(kc, 2), a, i, rows, MR, k0, kc);
  }
}

// This thread's share of C against the packed op(A) (inside a parallel region, or alone).
template <typename TB>
void compute(const bf16k::Kernels& k, const Problem& p, const bf16_t* apack,
             const Operand<TB>& b) {
  const int64_t pm = p.Mp / MR, units = (p.N + 15) / 16;
  const Grid g = choose_grid(omp_get_num_threads(), pm, units);
  const int t = omp_get_thread_num();
  if (t >= g.gm * g.gn) return;
  const int tm = t / g.gn, tn = t % g.gn;
  const int64_t m0 = pm * tm / g.gm * MR;
  const int64_t m1 = std::min<int64_t>(p.M, pm * (tm + 1) / g.gm * MR);
  const int64_t n0 = units * tn / g.gn * 16;
  const int64_t n1 = std::min<int64_t>(p.N, units * (tn + 1) / g.gn * 16);
  if (m0 < m1 && n0 < n1) run_block(k, p, apack, b, m0, m1, n0, n1);
}

bool parallel_for(const Problem& p) { return int64_t(p.M) * p.N * p.K >= kParallelMacs; }

template <typename TA, typename TB>
void run(const Problem& p, const Operand<TA>& a, const Operand<TB>& b) {
  const bf16k::Kernels& k = kernels();
  static thread_local PackBuffer abuf;
  bf16_t* apack = abuf.get(p.Mp * round_up(p.K, 2));
#pragma omp parallel if (parallel_for(p))
  {
    pack_a(k, apack, p.M, p.K, p.Mp, a);  // its omp for ends with a barrier
    compute(k, p, apack, b);
  }
}

// C = beta * C where op(A) * op(B) does not count (K == 0 or alpha == 0), as BLAS.
void scale_only(int M, int N, float beta, float* C, int ldc) {
  for (int i = 0; i < M; ++i)
    for (float* c = C + int64_t(i) * ldc; c < C + int64_t(i) * ldc + N; ++c)
      *c = beta == 0.0f ? 0.0f : beta * *c;
}

}  // namespace

Bf16Path best_bf16_path() { return cpu_has_bf16() ? Bf16Path::kNative : Bf16Path::kEmulated; }
Bf16Path bf16_path() { return path_slot().load(); }
void set_bf16_path(Bf16Path path) {
  CHECK(path != Bf16Path::kNative || cpu_has_bf16(),
        "bf16 GEMM: this CPU has no AVX512-BF16 for the native path");
  path_slot().store(path);
}
bool bf16_native() { return bf16_path() == Bf16Path::kNative; }
bool bf16_avx512() {
  return bf16_native() || (bf16_path() == Bf16Path::kEmulated && cpu_has_avx512());
}
Bf16Path parse_bf16_path(const std::string& name) {
  if (name == "native") return Bf16Path::kNative;
  if (name == "emulated") return Bf16Path::kEmulated;
  if (name == "reference") return Bf16Path::kReference;
  FAIL("MPICNN_BF16: unknown bf16 GEMM path '", name, "' (native, emulated, reference)");
}
const char* bf16_path_name(Bf16Path path) {
  switch (path) {
    case Bf16Path::kNative: return "native";
    case Bf16Path::kEmulated: return "emulated";
    case Bf16Path::kReference: break;
  }
  return "reference";
}

const char* bf16_kernels_name() { return kernels().name; }

bf16_t bf16_round(float x) { return bf16k::round_bf16(x); }
void to_bf16(bf16_t* dst, const float* src, int64_t n) { kernels().round(dst, src, n); }
void from_bf16(float* dst, const bf16_t* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = std::bit_cast<float>(uint32_t(src[i]) << 16);
}

template <typename TA, typename TB>
void gemm_bf16(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const TA* A,
               int lda, const TB* B, int ldb, float beta, float* C, int ldc) {
  CHECK(M >= 0 && N >= 0 && K >= 0, "gemm_bf16: negative size ", M, " x ", N, " x ", K);
  if (M == 0 || N == 0) return;
  if (K == 0 || alpha == 0.0f) return scale_only(M, N, beta, C, ldc);
  const Problem p{M, N, K, alpha, beta, C, ldc, round_up(M, MR)};
  // op(A)(i, k) is A[i * lda + k], or A[k * lda + i] transposed; op(B)(k, j) B[k * ldb + j],
  // or B[j * ldb + k].
  const Operand<TA> a{A, trans_a ? 1 : int64_t(lda), trans_a ? int64_t(lda) : 1};
  const Operand<TB> b{B, trans_b ? int64_t(ldb) : 1, trans_b ? 1 : int64_t(ldb)};
  run(p, a, b);
}

int64_t bf16_packed_a_size(int M, int K) { return round_up(M, MR) * round_up(K, 2); }

void pack_a_bf16(bf16_t* dst, bool trans_a, int M, int K, const float* A, int lda) {
  CHECK(M >= 0 && K >= 0, "pack_a_bf16: negative size ", M, " x ", K);
  const Operand<float> a{A, trans_a ? 1 : int64_t(lda), trans_a ? int64_t(lda) : 1};
  const int64_t Mp = round_up(M, MR);
#pragma omp parallel if (Mp * K >= (int64_t(1) << 15))
  pack_a(kernels(), dst, M, K, Mp, a);
}

template <typename TB>
void gemm_bf16_packed_a(const bf16_t* apack, int M, int N, int K, float alpha, bool trans_b,
                        const TB* B, int ldb, float beta, float* C, int ldc) {
  CHECK(M >= 0 && N >= 0 && K >= 0, "gemm_bf16: negative size ", M, " x ", N, " x ", K);
  if (M == 0 || N == 0) return;
  if (K == 0 || alpha == 0.0f) return scale_only(M, N, beta, C, ldc);
  const Problem p{M, N, K, alpha, beta, C, ldc, round_up(M, MR)};
  const Operand<TB> b{B, trans_b ? int64_t(ldb) : 1, trans_b ? 1 : int64_t(ldb)};
  const bf16k::Kernels& k = kernels();
#pragma omp parallel if (parallel_for(p))
  compute(k, p, apack, b);
}

template void gemm_bf16_packed_a(const bf16_t*, int, int, int, float, bool, const float*, int,
                                 float, float*, int);
template void gemm_bf16(bool, bool, int, int, int, float, const float*, int, const float*, int,
                        float, float*, int);
template void gemm_bf16(bool, bool, int, int, int, float, const bf16_t*, int, const bf16_t*, int,
                        float, float*, int);
template void gemm_bf16(bool, bool, int, int, int, float, const bf16_t*, int, const float*, int,
                        float, float*, int);
template void gemm_bf16(bool, bool, int, int, int, float, const float*, int, const bf16_t*, int,
                        float, float*, int);

}  // namespace mpicnn
