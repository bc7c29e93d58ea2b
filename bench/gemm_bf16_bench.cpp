// The CPU bf16 GEMM (core/gemm_bf16.h) against the engine's fp32 GEMM (core/blas.h: OpenBLAS
// unless MPICNN_GEMM=eigen), GFLOP/s on the im2col GEMMs of ResNet-18's convolutions at 224x224:
// per layer, forward (M = out channels, N = batch * OH * OW, K = in channels * KH * KW), weight
// gradient (M = out, N = K, reduced over the pixels) and input gradient (M = K, N = pixels,
// reduced over out channels); and a 2048^3 square GEMM. The bf16 GEMM gets float inputs
// (rounded while packing), as a layer would hand it its activations. Not a test.
//
//   build/release/bench/gemm_bf16_bench [--threads N] [--batch 16] [--reps 5] [--warmup 1]
//                                       [--only TEXT]   (rows whose name contains TEXT)
// MPICNN_BF16=emulated (or reference) times that path instead of the native one.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "core/blas.h"
#include "core/check.h"
#include "core/gemm_bf16.h"
#include "core/rng.h"
#include "core/threads.h"
#include "core/timer.h"

#include "conv_rows.h"

using namespace mpicnn;

namespace {

using Layer = ConvShape;
constexpr const auto& kLayers = kResnet18Convs;

using Args = BenchArgs;

std::vector<float> random(int64_t n, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  const Rng r(seed, 1);
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = r.uniform(uint64_t(i), -1.f, 1.f);
  return v;
}

// One GEMM shape timed both ways; prints a row.
void row(const Args& a, const std::string& name, const char* pass, bool ta, bool tb, int M, int N,
         int K) {
  const std::vector<float> A = random(int64_t(M) * K, 1), B = random(int64_t(K) * N, 2);
  std::vector<float> C(size_t(M) * N);
  const int lda = ta ? M : K, ldb = tb ? K : N;
  const std::vector<double> t = median_seconds(
      a.warmup, a.reps, {[&] { gemm(ta, tb, M, N, K, 1.f, A.data(), lda, B.data(), ldb, 0.f, C.data(), N); },
          [&] { gemm_bf16(ta, tb, M, N, K, 1.f, A.data(), lda, B.data(), ldb, 0.f, C.data(), N); }});
  const double flop = 2.0 * M * double(N) * K;
  std::printf("%-24s %-4s %5d %7d %7d %7.2f %9.2f %9.2f %8.1f %8.1f %6.2f\n", name.c_str(), pass,
              M, N, K, flop * 1e-9, t[0] * 1e3, t[1] * 1e3, flop / t[0] * 1e-9,
              flop / t[1] * 1e-9, t[0] / t[1]);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse_bench_args(argc, argv, 5, 1);
    set_num_threads(a.threads ? a.threads : default_num_threads());
    std::printf("fp32: %s GEMM; bf16: %s path (%s); threads %d, batch %d, median of %d (warmup %d)\n",
                gemm_backend_name(gemm_backend()), bf16_path_name(bf16_path()), bf16_kernels_name(),
                num_threads(), a.batch, a.reps, a.warmup);
    std::printf("%-24s %-4s %5s %7s %7s %7s %9s %9s %8s %8s %6s\n", "layer", "pass", "M", "N", "K",
                "GFLOP", "fp32 ms", "bf16 ms", "fp32 GF/s", "bf16 GF/s", "x");
    if (std::string("square").find(a.only) != std::string::npos)
      row(a, "square 2048", "", false, false, 2048, 2048, 2048);
    for (const Layer& l : kLayers) {
      if (std::string(l.name).find(a.only) == std::string::npos) continue;
      const int o = (l.hw + 2 * l.p - l.k) / l.s + 1;
      const int P = a.batch * o * o, K = l.ic * l.k * l.k;
      row(a, l.name, "fwd", false, false, l.oc, P, K);  // y (OC, P) = w (OC, K) col (K, P)
      row(a, l.name, "dW", false, true, l.oc, K, P);    // dw (OC, K) = dy (OC, P) col^T
      if (l.ic > 3) row(a, l.name, "dX", true, false, K, P, l.oc);  // dcol (K, P) = w^T dy
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "gemm_bf16_bench: %s\n", e.message().c_str());
    return 1;
  }
  return 0;
}
