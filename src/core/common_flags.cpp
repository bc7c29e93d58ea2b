// The flags ./train and ./pipeline_eval share (see common_flags.h).
#include "core/common_flags.h"

#include "core/check.h"
#include "core/gpu.h"

namespace mpicnn::cli::common {

Shared<std::string> data(const std::string& help_suffix) {
  return {{"data", "d", "PATH", Kind::Value,
           "dataset path: IDX folder, image folder (class subfolders, optional train/ and test/), "
           "CSV file, CIFAR binary folder; with --dataset fashion-mnist it may be left out: the "
           "Debian package's files" + help_suffix},
          text};
}

Shared<bool> skip_bad(const std::string& help_suffix) {
  return {{"skip-bad", "", "[=BOOL]", Kind::Switch,
           "skip images that cannot be read or decoded (counted and reported) instead of stopping" +
               help_suffix},
          to_bool};
}

Shared<std::vector<float>> mean(const std::string& help_suffix) {
  return {{"mean", "", "LIST", Kind::Value,
           "normalisation means per channel, 1 or 3 values, e.g. 0.485,0.456,0.406" + help_suffix},
          [](const Given& g) { return to_float_list(g, false); }};
}

Shared<std::vector<float>> stddev(const std::string& help_suffix) {
  return {{"std", "", "LIST", Kind::Value,
           "normalisation standard deviations per channel, 1 or 3 values > 0" + help_suffix},
          [](const Given& g) { return to_float_list(g, true); }};
}

Shared<int> threads(const std::string& help_suffix) {
  return {{"threads", "", "N", Kind::Value,
           "compute threads per rank (>= 0; 0 = the CPUs the node's ranks may use / ranks on the "
           "node, at most the rank's own CPUs)" + help_suffix},
          int32_from(0)};
}

Shared<double> timeout(const std::string& help_suffix) {
  return {{"timeout", "", "SECONDS", Kind::Value,
           "a rank that waits on another rank (a message, a collective) for longer ends the job "
           "with one line naming the rank, the operation and the time waited (>= 0; 0 = never)" +
               help_suffix},
          number([](double x) { return x >= 0 && x <= 1e9; },
                 "a number of seconds >= 0 (0 = off)")};
}

Shared<std::string> device(const std::string& help_suffix) {
  return {{"device", "", "NAME", Kind::Value,
           "auto (the GPU when this build has CUDA and one is visible), cpu or cuda (one GPU per "
           "rank: node-local rank modulo the visible GPUs)" + help_suffix},
          [](const Given& g) {
            if (g.value == "cuda" && !gpu::compiled_in())
              FAIL(g.label, " cuda: ", gpu::unavailable_reason());
            return to_choice(g, {"auto", "cpu", "cuda"});
          }};
}

Shared<std::string> precision(const std::string& help_suffix) {
  return {{"precision", "", "P", Kind::Value,
           "GPU math: auto (tf32), fp32, tf32, bf16 or fp16. CPU: auto (fp32), fp32 or bf16 "
           "(convolutions and linear layers multiply bf16-rounded inputs with fp32 sums, on "
           "AVX512-BF16 where the CPU has it, else emulated with the same bits, slower)" + help_suffix},
          [](const Given& g) { return to_choice(g, {"auto", "fp32", "tf32", "bf16", "fp16"}); }};
}

Shared<std::string> gpu_layout(const std::string& help_suffix) {
  return {{"gpu-layout", "", "L", Kind::Value,
           "GPU activations: nchw (float32, the default) or nhwc (channels-last, stored in "
           "--precision's type: float32 for fp32/tf32, bfloat16, float16; experimental until "
           "checked on a GPU; ResNets, VGG, AlexNet, LeNet, GoogLeNet, SqueezeNet)" + help_suffix},
          [](const Given& g) { return to_choice(g, {"nchw", "nhwc"}); }};
}

Shared<bool> explain_plan(const std::string& help_suffix) {
  return {{"explain-plan", "", "[=BOOL]", Kind::Switch,
           "print, per layer, the implementation the plan chose and why (convolution kernels: "
           "direct AVX-512/AVX2, im2col, Winograd, cuDNN; GEMM precision)" + help_suffix},
          to_bool};
}

}  // namespace mpicnn::cli::common
