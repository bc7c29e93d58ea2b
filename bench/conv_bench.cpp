// Conv2d CPU benchmark at ResNet-18 layer shapes: forward + backward (data and weight)
// GFLOP/s next to sgemm (the engine's backend: MPICNN_GEMM=eigen|openblas) measured in the same run, on a large square GEMM (peak) and
// on exactly the GEMMs the convolution performs (same FLOPs without im2col/col2im). Also
// times im2col/col2im alone, to show where the rest goes. Not a test: it checks nothing.
//
//   build/release/bench/conv_bench [--threads N] [--batch 16] [--reps 7] [--warmup 2]
//                                  [--only TEXT]   (rows whose name contains TEXT)
//                                  [--bf16 1]
// --bf16 1 instead times, per ResNet-18 and ResNet-50 layer shape, forward and backward (input
// and weight gradients) of three Conv2d planned alike but for their path: fp32 on the direct
// kernels, bf16 on the direct kernels (bf16 forward and input gradient, fp32 weight gradient;
// on a CPU with AVX512-BF16) and bf16 on im2col + the bf16 GEMM, interleaved in each
// repetition; "x" is fp32 direct's time over the bf16 direct one's.
#include <cblas.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "conv_rows.h"
#include "core/blas.h"
#include "core/check.h"
#include "core/device.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "core/threads.h"
#include "core/timer.h"
#include "layers/conv2d.h"
#include "layers/im2col.h"
#include "layers/params.h"

using namespace mpicnn;

namespace {

using Row = ConvShape;
constexpr const auto& kRows = kResnet18Convs;

using Args = BenchArgs;

Tensor random(const Shape& s, uint64_t seed) {
  Tensor t = Tensor::empty(s);
  Rng r(seed, 1);
  for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = r.uniform(uint64_t(i), -1.f, 1.f);
  return t;
}

double square_sgemm_gflops(Args a, int n) {
  Tensor A = random({n, n}, 1), B = random({n, n}, 2), C = Tensor::zeros({n, n});
  a.warmup = std::max(a.warmup, 3);  // the first calls start OpenBLAS's threads
  a.reps = std::max(a.reps, 11);
  const double s = median_seconds(a.warmup, a.reps, {[&] {
    gemm(false, false, n, n, n, 1.f, A.data(), n, B.data(), n, 0.f, C.data(), n);
  }})[0];
  return 2.0 * n * n * double(n) / s * 1e-9;
}

// One layer shape planned three ways (each its own ExecConfig).
struct Path {
  const char* name;
  Precision precision;
  ConvAlgorithm algorithm;
};
constexpr Path kBf16Paths[] = {{"fp32 direct", Precision::kFp32, ConvAlgorithm::kDirect},
                               {"bf16 direct", Precision::kBf16, ConvAlgorithm::kDirect},
                               {"bf16 im2col", Precision::kBf16, ConvAlgorithm::kIm2col}};

void bf16_rows(const Args& a, const ExecConfig& exec) {
  std::printf("threads %d, batch %d, median of %d (warmup %d); ms per call, forward / backward\n",
              num_threads(), a.batch, a.reps, a.warmup);
  std::printf("%-26s %7s", "layer", "GFLOP");
  for (const Path& p : kBf16Paths) std::printf(" %19s", p.name);
  std::printf(" %6s %6s\n", "x fwd", "x bwd");
  std::vector<ConvShape> rows(std::begin(kResnet18Convs), std::end(kResnet18Convs));
  rows.insert(rows.end(), std::begin(kResnet50Convs), std::end(kResnet50Convs));
  for (const ConvShape& r : rows) {
    if (std::string(r.name).find(a.only) == std::string::npos) continue;
    const Conv2dOptions o{.in_channels = r.ic, .out_channels = r.oc, .kernel = r.k,
                          .stride = r.s, .padding = r.p, .bias = false};
    std::vector<std::unique_ptr<Conv2d>> convs;
    ParamStore store;
    for (const Path& p : kBf16Paths) {
      convs.push_back(std::make_unique<Conv2d>(o));
      convs.back()->register_state(store, std::string(p.name) + ".");
    }
    store.allocate();
    const Shape in{a.batch, r.ic, r.hw, r.hw};
    const Shape out = convs[0]->output_shape(in);
    Tensor x = random(in, 2), y = Tensor::empty(out), dy = random(out, 3), dx = Tensor::empty(in);
    std::vector<std::function<void()>> fns;
    for (size_t i = 0; i < convs.size(); ++i) {
      Conv2d& c = *convs[i];
      c.reset_parameters(1);
      ExecConfig cfg = exec;
      cfg.precision = kBf16Paths[i].precision;
      cfg.conv = kBf16Paths[i].algorithm;
      c.plan(in, cfg);
      fns.push_back([&] { c.forward(y, x); });
      fns.push_back([&] { c.backward(dx, dy, x, y); });
    }
    const std::vector<double> t = median_seconds(a.warmup, a.reps, fns);
    const ConvGeometry& g = convs[0]->geometry();
    const double flop = 2.0 * a.batch * r.oc * double(g.out_plane()) * r.ic * r.k * r.k;
    std::printf("%-26s %7.2f", r.name, flop * 1e-9);
    for (size_t i = 0; i < convs.size(); ++i) {
      const bool direct = kBf16Paths[i].algorithm == ConvAlgorithm::kDirect;
      const bool direct_ok = convs[i]->direct() == direct;  // "?": not the path named
      std::printf(" %8.2f / %8.2f%s", t[2 * i] * 1e3, t[2 * i + 1] * 1e3, direct_ok ? "" : "?");
    }
    std::printf(" %6.2f %6.2f\n", t[0] / t[2], t[1] / t[3]);
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Args a = parse_bench_args(argc, argv, 7, 2, true);
    set_num_threads(a.threads ? a.threads : default_num_threads());
    // The environment's kernel overrides (MPICNN_CONV, MPICNN_CONV_ISA, MPICNN_BF16, ...).
    const ExecConfig exec = exec_overrides(ExecConfig{});
    if (a.bf16) {
      bf16_rows(a, exec);
      return 0;
    }
    const double peak = square_sgemm_gflops(a, 2048);
    const int par = openblas_get_parallel();
    const char* wait = std::getenv("OMP_WAIT_POLICY");
    std::printf("GEMM backend %s; OpenBLAS %s, %s build; OMP_WAIT_POLICY=%s\n",
                gemm_backend_name(gemm_backend()), openblas_get_config(),
                par == 2 ? "OpenMP" : par == 1 ? "pthreads" : "sequential",
                wait ? wait : "(unset)");
    std::printf("threads %d, batch %d, median of %d (warmup %d)\n", num_threads(), a.batch, a.reps,
                a.warmup);
    std::printf("sgemm 2048^3 peak: %.1f GFLOP/s\n\n", peak);
    std::printf("%-24s %5s %7s %8s %8s %8s %9s %8s %9s %9s %8s\n", "layer", "chunk", "GFLOP",
                "fwd ms", "bwd ms", "conv", "gemm ms", "gemm", "unfold ms", "conv/gemm",
                "conv/pk");
    std::printf("%-24s %5s %7s %8s %8s %8s %9s %8s %9s %9s %8s\n", "", "", "", "", "",
                "GFLOP/s", "", "GFLOP/s", "", "", "");
    for (const Row& r : kRows) {
      if (std::string(r.name).find(a.only) == std::string::npos) continue;
      Conv2d conv({.in_channels = r.ic, .out_channels = r.oc, .kernel = r.k, .stride = r.s,
                   .padding = r.p, .bias = false});
      ParamStore store;
      conv.register_state(store, "");
      store.allocate();
      conv.reset_parameters(1);
      const Shape in{a.batch, r.ic, r.hw, r.hw};
      const Shape out = conv.output_shape(in);
      conv.plan(in, exec);
      Tensor x = random(in, 2), y = Tensor::empty(out), dy = random(out, 3);
      Tensor dx = Tensor::empty(in);

      // The convolution's own GEMMs, with the same shapes and count, on random buffers that
      // live where the convolution's do: weights A and the column buffer B are reused by every
      // chunk, while the output / output-gradient rows C are the chunk's own slice of the batch.
      const ConvGeometry& g = conv.geometry();
      const int64_t P = g.out_plane(), K = conv.columns().rows(), OC = r.oc, chunk = conv.chunk();
      Tensor A = random({OC, K}, 4), B = random({K, chunk * P}, 5);
      Tensor C = random({a.batch, OC, P}, 6), D = Tensor::zeros({OC, K});
      auto gemms = [&] {
        for (int64_t c0 = 0; c0 < a.batch; c0 += chunk) {
          const int BP = int(std::min(chunk, a.batch - c0) * P);
          float* c = C.data() + c0 * OC * P;
          gemm(false, false, int(OC), BP, int(K), 1.f, A.data(), int(K), B.data(), BP, 0.f, c,
                BP);
          gemm(false, true, int(OC), int(K), BP, 1.f, c, BP, B.data(), BP, 1.f, D.data(), int(K));
          gemm(true, false, int(K), BP, int(OC), 1.f, A.data(), int(K), c, BP, 0.f, B.data(), BP);
        }
      };
      // The unfolding work alone: im2col twice (forward, backward) and col2im once per chunk.
      auto unfold = [&] {
        for (int64_t c0 = 0; c0 < a.batch; c0 += chunk) {
          const int64_t n = std::min(chunk, a.batch - c0);
          const float* xc = x.data() + c0 * r.ic * g.in_plane();
          conv.columns().im2col(B.data(), xc, n);
          conv.columns().im2col(B.data(), xc, n);
          conv.columns().col2im(dx.data() + c0 * r.ic * g.in_plane(), B.data(), n);
        }
      };
      const std::vector<double> t = median_seconds(
          a.warmup, a.reps, {[&] { conv.forward(y, x); }, [&] { conv.backward(dx, dy, x, y); }, gemms, unfold});
      const double t_fwd = t[0], t_bwd = t[1], t_conv = t_fwd + t_bwd, t_gemm = t[2];
      const double t_unfold = t[3];

      const double flop = 3.0 * 2.0 * double(a.batch) * OC * P * double(K);
      const double conv_gf = flop / t_conv * 1e-9, gemm_gf = flop / t_gemm * 1e-9;
      std::printf("%-24s %5lld %7.2f %8.2f %8.2f %8.1f %9.2f %8.1f %9.2f %8.0f%% %7.0f%%\n",
                  r.name, (long long)chunk, flop * 1e-9, t_fwd * 1e3, t_bwd * 1e3, conv_gf,
                  t_gemm * 1e3, gemm_gf, t_unfold * 1e3, 100.0 * conv_gf / gemm_gf,
                  100.0 * conv_gf / peak);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "conv_bench: %s\n", e.message().c_str());
    return 1;
  }
  return 0;
}
