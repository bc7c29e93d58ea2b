// What the convolution and bf16 GEMM benchmarks (bench/conv_bench.cpp, bench/gemm_bf16_bench.cpp)
// share: ResNet-18's distinct convolution shapes at a 224x224 input (and ResNet-50's others),
// their flags and the median timer.
#pragma once
#include <algorithm>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/timer.h"

struct ConvShape {
  const char* name;
  int ic, oc, hw, k, s, p;  // in and out channels, input height = width, kernel, stride, padding
};

inline constexpr ConvShape kResnet18Convs[] = {
    {"conv1 7x7/2 3->64 @224", 3, 64, 224, 7, 2, 3},
    {"3x3 64->64 @56", 64, 64, 56, 3, 1, 1},
    {"3x3/2 64->128 @56", 64, 128, 56, 3, 2, 1},
    {"1x1/2 64->128 @56", 64, 128, 56, 1, 2, 0},
    {"3x3 128->128 @28", 128, 128, 28, 3, 1, 1},
    {"3x3/2 128->256 @28", 128, 256, 28, 3, 2, 1},
    {"1x1/2 128->256 @28", 128, 256, 28, 1, 2, 0},
    {"3x3 256->256 @14", 256, 256, 14, 3, 1, 1},
    {"3x3/2 256->512 @14", 256, 512, 14, 3, 2, 1},
    {"1x1/2 256->512 @14", 256, 512, 14, 1, 2, 0},
    {"3x3 512->512 @7", 512, 512, 7, 3, 1, 1},
};

// ResNet-50's (torchvision: stride on the 3x3) shapes that ResNet-18 lacks, at 224x224.
inline constexpr ConvShape kResnet50Convs[] = {
    {"r50 1x1 64->64 @56", 64, 64, 56, 1, 1, 0},
    {"r50 1x1 64->256 @56", 64, 256, 56, 1, 1, 0},
    {"r50 1x1 256->64 @56", 256, 64, 56, 1, 1, 0},
    {"r50 1x1 256->128 @56", 256, 128, 56, 1, 1, 0},
    {"r50 3x3/2 128->128 @56", 128, 128, 56, 3, 2, 1},
    {"r50 1x1 128->512 @28", 128, 512, 28, 1, 1, 0},
    {"r50 1x1/2 256->512 @56", 256, 512, 56, 1, 2, 0},
    {"r50 1x1 512->128 @28", 512, 128, 28, 1, 1, 0},
    {"r50 3x3/2 256->256 @28", 256, 256, 28, 3, 2, 1},
    {"r50 1x1 256->1024 @14", 256, 1024, 14, 1, 1, 0},
    {"r50 1x1/2 512->1024 @28", 512, 1024, 28, 1, 2, 0},
    {"r50 1x1 1024->256 @14", 1024, 256, 14, 1, 1, 0},
    {"r50 3x3/2 512->512 @14", 512, 512, 14, 3, 2, 1},
    {"r50 1x1 512->2048 @7", 512, 2048, 7, 1, 1, 0},
    {"r50 1x1/2 1024->2048 @14", 1024, 2048, 14, 1, 2, 0},
    {"r50 1x1 2048->512 @7", 2048, 512, 7, 1, 1, 0},
};

// Each function's median seconds over `reps` runs after `warmup` untimed ones, the functions
// interleaved within each repetition so that drifting clocks hit them alike.
inline std::vector<double> median_seconds(int warmup, int reps, const std::vector<std::function<void()>>& fns) {
  for (int i = 0; i < warmup; ++i)
    for (const auto& fn : fns) fn();
  std::vector<std::vector<double>> t(fns.size());
  for (int i = 0; i < reps; ++i)
    for (size_t f = 0; f < fns.size(); ++f) {
      mpicnn::Timer timer;
      fns[f]();
      t[f].push_back(timer.seconds());
    }
  std::vector<double> med;
  for (auto& v : t) {
    std::sort(v.begin(), v.end());
    med.push_back(v[v.size() / 2]);
  }
  return med;
}

// The benchmarks' flags: --threads N --batch N --reps N --warmup N --only TEXT (rows whose name
// contains TEXT) and, where `bf16_flag`, --bf16 0|1; --reps and --warmup default to the caller's.
struct BenchArgs {
  int threads = 0, batch = 16, reps = 1, warmup = 0, bf16 = 0;
  std::string only;
};

inline BenchArgs parse_bench_args(int argc, char** argv, int reps, int warmup, bool bf16_flag = false) {
  BenchArgs a;
  a.reps = reps;
  a.warmup = warmup;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto value = [&]() {
      CHECK(i + 1 < argc, k, " needs a value");
      char* end = nullptr;
      const long v = std::strtol(argv[++i], &end, 10);
      CHECK(end && *end == '\0' && v >= 0, k, " needs a non-negative integer, got '", argv[i], "'");
      return int(v);
    };
    if (k == "--threads") a.threads = value();
    else if (k == "--batch") a.batch = value();
    else if (k == "--reps") a.reps = value();
    else if (k == "--warmup") a.warmup = value();
    else if (k == "--bf16" && bf16_flag) a.bf16 = value();
    else if (k == "--only" && i + 1 < argc) a.only = argv[++i];
    else FAIL("unknown option '", k, "' (use --threads N --batch N --reps N --warmup N --only TEXT",
              bf16_flag ? " --bf16 0|1)" : ")");
  }
  CHECK(a.batch >= 1 && a.reps >= 1, "--batch and --reps must be >= 1");
  return a;
}
