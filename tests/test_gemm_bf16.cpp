// The CPU bf16 GEMM (core/gemm_bf16.h): its rounding against known values and PyTorch's
// float_to_bf16, the GEMM against a double reference on the same bf16-rounded inputs and
// against the fp32 GEMM, over every transpose, odd and block-crossing sizes, alpha and beta,
// input types and thread counts; and every path (native AVX512-BF16, emulated in AVX-512F) bit for
// bit against the scalar reference.
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/blas.h"
#include "core/gemm_bf16.h"
#include "core/half.h"
#include "core/rng.h"
#include "core/threads.h"
#include "testing.h"

using namespace mpicnn;
using mpicnn::testing::expect_error;

namespace {

uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }
float bf16_float(bf16_t b) { return std::bit_cast<float>(uint32_t(b) << 16); }
const double kU32 = std::ldexp(1.0, -24);  // float32's unit roundoff
const double kU16 = std::ldexp(1.0, -8);   // bfloat16's (8 significant bits)

// Sets the process's bf16 path (and thread count) for a scope.
struct PathScope {
  Bf16Path before = bf16_path();
  int threads_before = num_threads();
  PathScope(Bf16Path path, int threads) {
    set_bf16_path(path);
    set_num_threads(threads);
  }
  ~PathScope() {
    set_bf16_path(before);
    set_num_threads(threads_before);
  }
};

// The paths this CPU runs, the fastest last: the reference and the emulated path always (the
// same code without AVX-512), native with AVX512-BF16.
std::vector<Bf16Path> paths() {
  if (best_bf16_path() == Bf16Path::kNative)
    return {Bf16Path::kReference, Bf16Path::kEmulated, Bf16Path::kNative};
  MESSAGE("this CPU has no AVX512-BF16: the native path is not tested");
  return {Bf16Path::kReference, Bf16Path::kEmulated};
}

// A rows x cols matrix with row stride ld (>= cols; the padding holds values the GEMM must not
// read into its result), uniform in [-scale, scale).
struct Mat {
  int rows = 0, cols = 0, ld = 0;
  std::vector<float> v;
  Mat(int r, int c, int pad, uint64_t seed, float scale = 1.0f) : rows(r), cols(c), ld(c + pad) {
    const Rng rng(seed, "gemm_bf16 test");
    v.resize(size_t(std::max(1, r * ld)));
    for (size_t i = 0; i < v.size(); ++i) v[i] = rng.uniform(i, -scale, scale);
  }
  float at(int r, int c) const { return v[size_t(r) * ld + c]; }
};

struct Shape3 {
  int M, N, K;
};

// One problem: op(A) M x K, op(B) K x N, C M x N, with the stored shapes the transposes imply.
struct Problem {
  bool ta, tb;
  int M, N, K;
  float alpha, beta;
  Mat A, B, C0;
  Problem(bool ta_, bool tb_, Shape3 s, float alpha_, float beta_, uint64_t seed)
      : ta(ta_), tb(tb_), M(s.M), N(s.N), K(s.K), alpha(alpha_), beta(beta_),
        A(ta ? s.K : s.M, ta ? s.M : s.K, 3, seed),
        B(tb ? s.N : s.K, tb ? s.K : s.N, 5, seed + 1),
        C0(s.M, s.N, 2, seed + 2) {}
  float a(int i, int k) const { return ta ? A.at(k, i) : A.at(i, k); }
  float b(int k, int j) const { return tb ? B.at(j, k) : B.at(k, j); }

  std::vector<float> run_bf16() const {
    std::vector<float> c = C0.v;
    gemm_bf16(ta, tb, M, N, K, alpha, A.v.data(), A.ld, B.v.data(), B.ld, beta, c.data(), C0.ld);
    return c;
  }
  std::vector<float> run_fp32() const {
    std::vector<float> c = C0.v;
    gemm(ta, tb, M, N, K, alpha, A.v.data(), A.ld, B.v.data(), B.ld, beta, c.data(), C0.ld);
    return c;
  }
};

// Checks got (the GEMM's C) against alpha * sum_k q(a) q(b) + beta * C0 in double, where q is
// the bf16 rounding (bf16_inputs) or none (exact fp32 inputs), to within
//   tol(i, j) = e * (|alpha| * sum_k |a_ik| |b_kj| + |beta| |C0_ij|)
// and C's padding left as it was.
void expect_within(const Problem& p, const std::vector<float>& got, bool bf16_inputs, double e,
                   const std::string& what) {
  auto q = [&](float x) { return bf16_inputs ? double(bf16_float(bf16_round(x))) : double(x); };
  int64_t bad = 0;
  double worst = 0;
  for (int i = 0; i < p.M; ++i)
    for (int j = 0; j < p.C0.ld; ++j) {
      const size_t at = size_t(i) * p.C0.ld + j;
      if (j >= p.N) {
        bad += bits(got[at]) != bits(p.C0.v[at]);
        continue;
      }
      double sum = 0, mag = 0;
      for (int k = 0; k < p.K; ++k) {
        const double t = q(p.a(i, k)) * q(p.b(k, j));
        sum += t;
        mag += std::fabs(t);
      }
      const double c0 = p.beta == 0 ? 0.0 : double(p.C0.v[at]);
      const double want = double(p.alpha) * sum + double(p.beta) * c0;
      const double tol = e * (std::fabs(p.alpha) * mag + std::fabs(p.beta) * std::fabs(c0));
      const double err = std::fabs(double(got[at]) - want);
      if (!(err <= tol)) ++bad;
      if (tol > 0) worst = std::max(worst, err / tol);
    }
  CAPTURE(what);
  CAPTURE(worst);
  CHECK(bad == 0);
}

// The sizes every test below runs: odd everything, each block edge (kBf16MR rows, kBf16NR
// columns and the narrow last panels of 16 and 32, K blocks of kBf16KC, the driver's blocks of
// 576 columns), K odd (a pair padded with zero) and even, a column or row of one.
const std::vector<Shape3> kShapes = {
    {1, 1, 1},     {3, 5, 7},    {8, 48, 2},    {9, 49, 257},  {13, 97, 511},
    {200, 50, 64}, {5, 1200, 33}, {16, 64, 600}, {47, 1, 300},  {1, 130, 1025}, {6, 80, 40},
};

}  // namespace

TEST_CASE("bf16_round: nearest even, subnormals read as zero, specials") {
  CHECK(bf16_round(1.0f) == 0x3F80);
  CHECK(bf16_round(-2.5f) == 0xC020);
  CHECK(bf16_round(1 + std::ldexp(1.0f, -8)) == 0x3F80);      // tie -> even (down)
  CHECK(bf16_round(1 + 3 * std::ldexp(1.0f, -8)) == 0x3F82);  // tie -> even (up)
  CHECK(bf16_round(std::nextafter(1 + std::ldexp(1.0f, -8), 2.f)) == 0x3F81);
  CHECK(bf16_round(std::nextafter(1 + std::ldexp(1.0f, -8), 0.f)) == 0x3F80);
  CHECK(bf16_round(-(1 + 3 * std::ldexp(1.0f, -8))) == 0xBF82);
  CHECK(bf16_round(std::numeric_limits<float>::max()) == 0x7F80);  // rounds up to infinity
  CHECK(bf16_round(INFINITY) == 0x7F80);
  CHECK(bf16_round(-INFINITY) == 0xFF80);
  CHECK(bf16_round(-0.0f) == 0x8000);
  CHECK(bf16_round(FLT_MIN) == 0x0080);  // the smallest normal stays
  // fp32 subnormals become zeros of their sign, as vcvtneps2bf16 makes them (PyTorch's scalar
  // float_to_bf16 keeps them); even the largest, which would round up to FLT_MIN.
  CHECK(bf16_round(std::bit_cast<float>(0x007FFFFFu)) == 0x0000);
  CHECK(bf16_round(std::bit_cast<float>(0x807FFFFFu)) == 0x8000);
  CHECK(bf16_round(std::bit_cast<float>(0x00018000u)) == 0x0000);
  for (uint32_t nan : {0x7FC00000u, 0x7F800001u, 0xFF800001u, 0x7FFFFFFFu}) {
    const bf16_t b = bf16_round(std::bit_cast<float>(nan));
    CHECK(std::isnan(bf16_float(b)));         // a low payload must not truncate to infinity
    CHECK((b & 0x0040) != 0);                 // quiet
    CHECK((b & 0x8000) == ((nan >> 16) & 0x8000));  // sign kept
  }
  // Every other fp32 (normal, zero, infinite): exactly PyTorch's round to nearest even
  // (core/half.h), over a sweep of bit patterns that visits every exponent and every value of
  // the 16 bits that decide the rounding.
  int64_t mismatches = 0;
  for (uint64_t x = 0; x < (uint64_t(1) << 32); x += 4093) {
    const float f = std::bit_cast<float>(uint32_t(x));
    if (std::isnan(f) || std::fpclassify(f) == FP_SUBNORMAL) continue;
    mismatches += bf16_round(f) != float_to_bf16(f);
  }
  CHECK(mismatches == 0);
}

TEST_CASE("to_bf16 and from_bf16: every path rounds as bf16_round, any length") {
  std::vector<float> x;
  const Rng rng(3, "to_bf16");
  for (uint64_t i = 0; i < 5000; ++i) x.push_back(std::bit_cast<float>(rng.bits(i)));
  for (float v : {0.0f, -0.0f, 1.0f, 1 + std::ldexp(1.0f, -8), FLT_MIN, -FLT_MIN / 2, INFINITY,
                  NAN, std::numeric_limits<float>::max()})
    x.push_back(v);
  for (Bf16Path path : paths()) {
    CAPTURE(bf16_path_name(path));
    PathScope scope(path, 2);
    for (int64_t n : {int64_t(x.size()), int64_t(31), int64_t(33), int64_t(1)}) {
      std::vector<bf16_t> h(size_t(n) + 1, 0xABCD);
      to_bf16(h.data(), x.data(), n);
      int64_t mismatches = 0;
      for (int64_t i = 0; i < n; ++i) mismatches += h[size_t(i)] != bf16_round(x[size_t(i)]);
      CHECK(mismatches == 0);
      CHECK(h[size_t(n)] == 0xABCD);  // nothing written past n
    }
  }
  std::vector<bf16_t> all(65536);
  for (uint32_t b = 0; b < 65536; ++b) all[b] = bf16_t(b);
  std::vector<float> back(all.size());
  from_bf16(back.data(), all.data(), int64_t(all.size()));
  int64_t mismatches = 0;
  for (uint32_t b = 0; b < 65536; ++b) mismatches += bits(back[b]) != b << 16;
  CHECK(mismatches == 0);
}

TEST_CASE("gemm_bf16 against double on the bf16-rounded inputs: every transpose, odd sizes") {
  // Products of bf16 values are exact in float32, so the only error left is float32's
  // accumulation: n rounded additions (K into the accumulator, one per K block into C, alpha
  // and beta's), each off by at most u = 2^-24 of the partial sum, bound |err| by
  // gamma_n = n u / (1 - n u) times |alpha| sum|a||b| + |beta||C0|.
  for (Bf16Path path : paths()) {
    PathScope scope(path, 2);
    for (const Shape3& s : kShapes)
      for (int t = 0; t < 4; ++t) {
        const Problem p(t & 1, t & 2, s, 1.0f, 0.0f, uint64_t(100 + t));
        const double n = s.K + s.K / kBf16KC + 3;
        const std::string what = std::string(bf16_path_name(path)) + " " + std::to_string(s.M) +
                                 "x" + std::to_string(s.N) + "x" + std::to_string(s.K) +
                                 (p.ta ? " A^T" : " A") + (p.tb ? " B^T" : " B");
        expect_within(p, p.run_bf16(), true, n * kU32 / (1 - n * kU32), what);
      }
  }
}

TEST_CASE("gemm_bf16 against the fp32 GEMM: within bf16's rounding of the inputs") {
  // Each input is rounded to 8 significant bits, off by at most u16 = 2^-8 of itself, so a
  // product by at most 2 u16 + u16^2; both GEMMs then add in float32 (gamma_n each, as above).
  // Against the exact product: |err| <= (2 u16 + u16^2 + 2 gamma_n) * the same magnitude. The
  // bound is the worst case; random signs leave the typical error near sqrt(K) times smaller.
  for (const Shape3& s : {Shape3{13, 97, 511}, Shape3{64, 200, 576}, Shape3{9, 49, 257}})
    for (int t = 0; t < 4; ++t) {
      const Problem p(t & 1, t & 2, s, 1.0f, 0.0f, uint64_t(200 + t));
      const double n = s.K + s.K / kBf16KC + 3, gamma = n * kU32 / (1 - n * kU32);
      const double e = 2 * kU16 + kU16 * kU16 + 2 * gamma;
      expect_within(p, p.run_bf16(), false, e, "bf16 GEMM vs exact");
      expect_within(p, p.run_fp32(), false, 2 * gamma, "fp32 GEMM vs exact");
      // And the error is bf16's, not float32's: the fp32 GEMM is far closer.
      const std::vector<float> b16 = p.run_bf16(), f32 = p.run_fp32();
      double diff = 0;
      for (size_t i = 0; i < b16.size(); ++i) diff = std::max(diff, double(std::fabs(b16[i] - f32[i])));
      CHECK(diff > 0);
    }
}

TEST_CASE("gemm_bf16 alpha and beta: C = alpha op(A) op(B) + beta C, BLAS's special cases") {
  for (Bf16Path path : paths()) {
    CAPTURE(bf16_path_name(path));
    PathScope scope(path, 2);
    for (const Shape3& s : {Shape3{9, 49, 257}, Shape3{16, 64, 600}, Shape3{3, 5, 7}})
      for (float alpha : {0.5f, -1.25f, 2.0f})
        for (float beta : {0.0f, 1.0f, -0.75f}) {
          const Problem p(false, true, s, alpha, beta, 300);
          const double n = s.K + s.K / kBf16KC + 3;
          expect_within(p, p.run_bf16(), true, n * kU32 / (1 - n * kU32), "alpha/beta");
        }
    // beta = 0: C is written, never read (a NaN there stays out); alpha = 0 or K = 0: C =
    // beta * C without reading A or B.
    Problem p(false, false, {9, 49, 257}, 1.0f, 0.0f, 301);
    for (float& c : p.C0.v) c = NAN;
    p.A.v[5] = NAN;
    std::vector<float> c = p.run_bf16();
    int64_t nans = 0;
    for (int i = 0; i < p.M; ++i)
      for (int j = 0; j < p.N; ++j) nans += std::isnan(c[size_t(i) * p.C0.ld + j]);
    CHECK(nans == p.N);  // row 0 reads A[5]: exactly that row's N values are NaN
    Problem z(false, false, {9, 49, 257}, 0.0f, 0.5f, 302);
    z.A.v[0] = NAN;
    c = z.run_bf16();
    int64_t mismatches = 0;
    for (size_t i = 0; i < c.size(); ++i) {
      const bool inside = int(i % size_t(z.C0.ld)) < z.N;
      mismatches += bits(c[i]) != bits(inside ? 0.5f * z.C0.v[i] : z.C0.v[i]);
    }
    CHECK(mismatches == 0);
    Problem k0(false, false, {4, 6, 0}, 1.0f, 0.0f, 303);
    c = k0.run_bf16();
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 6; ++j) CHECK(c[size_t(i) * k0.C0.ld + j] == 0.0f);
  }
}

TEST_CASE("gemm_bf16: bf16 inputs, packed A, paths and thread counts give the same bits") {
  // The float inputs rounded by to_bf16 first give the same bits as rounded while packing, and
  // op(A) packed ahead (pack_a_bf16, gemm_bf16_packed_a) the same as packed by the call; every
  // path adds in the same order (core/gemm_bf16.h), so agrees with the others bit for bit;
  // and each element is summed by one thread in one order, whatever the thread count.
  for (const Shape3& s : kShapes)
    for (int t = 0; t < 4; ++t) {
      const Problem p(t & 1, t & 2, s, 1.5f, -0.5f, uint64_t(400 + t));
      CAPTURE(s.M);
      CAPTURE(s.N);
      CAPTURE(s.K);
      CAPTURE(t);
      std::vector<bf16_t> a16(p.A.v.size()), b16(p.B.v.size());
      to_bf16(a16.data(), p.A.v.data(), int64_t(a16.size()));
      to_bf16(b16.data(), p.B.v.data(), int64_t(b16.size()));
      // The inputs as float or as bf16 (0: float, 1: bf16), into a fresh copy of C0.
      auto run = [&](bool a_bf16, bool b_bf16) {
        std::vector<float> c = p.C0.v;
        if (a_bf16 && b_bf16) gemm_bf16(p.ta, p.tb, p.M, p.N, p.K, p.alpha, a16.data(), p.A.ld, b16.data(), p.B.ld, p.beta, c.data(), p.C0.ld);
        else if (a_bf16) gemm_bf16(p.ta, p.tb, p.M, p.N, p.K, p.alpha, a16.data(), p.A.ld, p.B.v.data(), p.B.ld, p.beta, c.data(), p.C0.ld);
        else if (b_bf16) gemm_bf16(p.ta, p.tb, p.M, p.N, p.K, p.alpha, p.A.v.data(), p.A.ld, b16.data(), p.B.ld, p.beta, c.data(), p.C0.ld);
        else c = p.run_bf16();
        return c;
      };
      // op(A) packed once (pack_a_bf16), then the GEMM on it, twice (the packing is reused).
      auto run_packed = [&] {
        std::vector<bf16_t> packed(size_t(bf16_packed_a_size(p.M, p.K)));
        pack_a_bf16(packed.data(), p.ta, p.M, p.K, p.A.v.data(), p.A.ld);
        std::vector<float> c = p.C0.v;
        for (int twice = 0; twice < 2; ++twice) {
          c = p.C0.v;
          gemm_bf16_packed_a(packed.data(), p.M, p.N, p.K, p.alpha, p.tb, p.B.v.data(), p.B.ld,
                             p.beta, c.data(), p.C0.ld);
        }
        return c;
      };
      auto same = [](const std::vector<float>& x, const std::vector<float>& y) {
        return std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
      };
      const Bf16Path fast = paths().back();
      std::vector<float> want;
      {
        PathScope scope(fast, 2);
        want = run(false, false);
        CHECK(same(run(true, true), want));
        CHECK(same(run(true, false), want));
        CHECK(same(run(false, true), want));
        CHECK(same(run_packed(), want));
      }
      for (int threads : {1, 3}) {
        PathScope scope(fast, threads);
        CHECK(same(run(false, false), want));
        CHECK(same(run_packed(), want));
      }
      for (Bf16Path other : paths()) {
        if (other == fast) continue;
        CAPTURE(bf16_path_name(other));
        PathScope scope(other, 2);
        CHECK(same(run(false, false), want));
        CHECK(same(run(true, false), want));
        CHECK(same(run_packed(), want));
      }
    }
}

TEST_CASE("gemm_bf16: every path agrees with the reference bit for bit at the edges of float32") {
  // Values from 2^-70 to 2^60: products that underflow float32 (flushed to zero), sums that
  // fall below FLT_MIN (flushed), bf16 subnormals given as input (read as zero), infinities
  // and NaN; the reference's step must be the instruction's in every case (compared on a CPU
  // with AVX512-BF16), and the emulated path's the reference's.
  const Shape3 s{17, 60, 131};
  Problem p(false, true, s, 1.0f, 0.0f, 500);
  const Rng rng(7, "gemm_bf16 edges");
  for (size_t i = 0; i < p.A.v.size(); ++i)
    p.A.v[i] *= std::ldexp(1.0f, int(rng.below(2 * i, 130)) - 70);
  for (size_t i = 0; i < p.B.v.size(); ++i)
    p.B.v[i] *= std::ldexp(1.0f, int(rng.below(2 * i + 1, 130)) - 70);
  // C(2, 1): every product below FLT_MIN, each flushed before the next: exactly zero.
  for (int k = 0; k < s.K; ++k) {
    p.A.v[size_t(2) * p.A.ld + k] = rng.uniform(100000 + k, -1, 1) * std::ldexp(1.0f, -63);
    p.B.v[size_t(1) * p.B.ld + k] = rng.uniform(200000 + k, -1, 1) * std::ldexp(1.0f, -63);
  }
  // C(4, 2): the first pair's product subnormal (flushed), then a normal one just above
  // FLT_MIN: exactly 1.5 FLT_MIN, where a sum that kept the subnormal would differ.
  for (int k = 0; k < s.K; ++k) p.A.v[size_t(4) * p.A.ld + k] = p.B.v[size_t(2) * p.B.ld + k] = 0;
  p.A.v[size_t(4) * p.A.ld] = std::ldexp(1.0f, -64);
  p.B.v[size_t(2) * p.B.ld] = std::ldexp(1.5f, -64);
  p.A.v[size_t(4) * p.A.ld + 2] = std::ldexp(1.5f, -63);
  p.B.v[size_t(2) * p.B.ld + 2] = std::ldexp(1.0f, -63);
  p.A.v[7] = INFINITY;
  p.B.v[11] = -INFINITY;
  p.A.v[size_t(5) * p.A.ld + 40] = NAN;
  std::vector<bf16_t> a16(p.A.v.size()), b16(p.B.v.size());
  to_bf16(a16.data(), p.A.v.data(), int64_t(a16.size()));
  to_bf16(b16.data(), p.B.v.data(), int64_t(b16.size()));
  for (size_t i = 0; i < a16.size(); i += 13) a16[i] = bf16_t(0x0001 + i % 0x7F);  // subnormals
  // Once with bf16 inputs (subnormals among them), once with the float inputs (rounded while
  // packing: the vector rounding of each path).
  for (bool bf16_inputs : {true, false}) {
    CAPTURE(bf16_inputs);
    const std::vector<Bf16Path> all = paths();
    std::vector<std::vector<float>> got;
    for (Bf16Path path : all) {
      PathScope scope(path, 2);
      got.push_back(p.C0.v);
      if (bf16_inputs) gemm_bf16(p.ta, p.tb, p.M, p.N, p.K, p.alpha, a16.data(), p.A.ld, b16.data(), p.B.ld, p.beta, got.back().data(), p.C0.ld);
      else gemm_bf16(p.ta, p.tb, p.M, p.N, p.K, p.alpha, p.A.v.data(), p.A.ld, p.B.v.data(), p.B.ld, p.beta, got.back().data(), p.C0.ld);
    }
    for (size_t n = 1; n < got.size(); ++n) {
      const std::string path = bf16_path_name(all[n]);  // CAPTURE is lazy: not paths() (a MESSAGE)
      CAPTURE(path);
      int64_t mismatches = 0;
      for (size_t i = 0; i < got[0].size(); ++i) {
        const bool nan = std::isnan(got[0][i]) && std::isnan(got[n][i]);
        mismatches += !nan && bits(got[0][i]) != bits(got[n][i]);
      }
      CHECK(mismatches == 0);
    }
    CHECK(got[0][size_t(2) * p.C0.ld + 1] == 0.0f);
    CHECK(got[0][size_t(4) * p.C0.ld + 2] == 1.5f * FLT_MIN);
    CHECK(std::isinf(got[0][3]));  // row 0 reads A's infinity
    CHECK(std::isnan(got[0][size_t(5) * p.C0.ld + 3]));  // row 5 its NaN
  }
}

TEST_CASE("gemm_bf16 rejects negative sizes") {
  std::vector<float> c(4);
  expect_error([&] { gemm_bf16(false, false, -1, 2, 2, 1.0f, c.data(), 2, c.data(), 2, 0.0f, c.data(), 2); },
               "gemm_bf16: negative size");
  expect_error([] { parse_bf16_path("avx"); }, "unknown bf16 GEMM path 'avx'");
}
