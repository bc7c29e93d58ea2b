// How a step executes, decided once and passed down: the device, the precision, the storage of
// the activations, what the plan serves (training or inference), fusion and folding, and the
// convolution kernel overrides. core/device.h's make_exec_config builds it from the flags, the
// environment's overrides (read there, and nowhere below the programs) and the device probe;
// the programs print it once and record it in trainer.json; Model::plan(input, cfg) hands it to
// every module's and layer's plan, which choose their implementation from it. The CPU's kernel
// libraries (the bf16 GEMM's path, the float32 GEMM) are set once for the process by
// make_exec_config, as OpenBLAS's own kernel choice is: they are the machine's kernels, not a
// plan's choice.
#pragma once
#include <cstdint>
#include <string>

#include "core/precision.h"
#include "core/tensor.h"

namespace mpicnn {

// Which convolution algorithm Conv2d takes on the CPU where its planner has a choice: the
// direct kernels (default: layers/conv_direct.h), im2col + GEMM (the reference), or Winograd
// F(2x2,3x3) for forward and the input gradient of the 3x3 stride-1 layers it fits.
enum class ConvAlgorithm : uint8_t { kDirect, kIm2col, kWinograd };
const char* conv_algorithm_name(ConvAlgorithm a);  // "direct", "im2col", "winograd"
ConvAlgorithm parse_conv_algorithm(const std::string& name);  // else an Error naming it

// The direct kernels' instruction set: AVX-512 or AVX2 (kNone: neither, or the float64 build).
enum class DirectIsa : uint8_t { kNone, kAvx2, kAvx512 };
const char* direct_isa_name(DirectIsa isa);            // "none", "avx2", "avx512"
DirectIsa parse_direct_isa(const std::string& name);  // "avx2", "avx512", else an Error
DirectIsa best_direct_isa();                          // of this CPU (kNone in the float64 build)
bool cpu_has(DirectIsa isa);

struct ExecConfig {
  Device device = Device::CPU;
  Precision precision = Precision::kFp32;
  // 4-D activations' storage: plain (float32 NCHW) everywhere but the GPU's channels-last path
  // (--gpu-layout nhwc: NHWC in storage_elem(precision)).
  Format activations;
  // A forward-only plan (evaluation, inference benchmarks): on the CPU activations share
  // buffers, BatchNorm runs in place, no gradient buffer is planned, and layers may take the
  // algorithm fastest forward (Conv2d's bf16 1x1 layers); backward fails. A GPU model plans as
  // for training (its inference plans differ only by folding).
  bool inference = false;
  // BatchNorm + ReLU, and a residual block's last BatchNorm + add + ReLU, in one pass: the same
  // bits as unfused (tests/test_fusion.cpp). On by default on the CPU; on the GPU opt-in
  // (MPICNN_GPU_FUSION=1) until it has passed the GPU checks.
  bool fusion = true;
  // GPU inference: an eval-mode BatchNorm after a convolution folded into its weights
  // (layers/fold.h); opt-in (MPICNN_GPU_FOLD=1) until it has passed the GPU checks. A CPU plan
  // ignores it (folds()).
  bool fold = false;
  bool deterministic = false;  // GPU: cuDNN's deterministic algorithms only

  // Convolution kernel overrides on the CPU; the defaults are the planner's own choice.
  ConvAlgorithm conv = ConvAlgorithm::kDirect;  // MPICNN_CONV=direct|im2col|winograd
  DirectIsa isa = best_direct_isa();            // MPICNN_CONV_ISA=avx2|avx512
  bool conv_bf16_direct = true;                 // MPICNN_CONV_BF16=direct|im2col
  bool parallel_small_convs = true;             // MPICNN_CONV_PARALLEL=1|0
  // Whether a bf16 training plan lets a BatchNorm's bf16 input share its convolution's buffer
  // (models/module.h plan_after_conv); off only in tests that compare the two.
  bool bf16_batchnorm_sharing = true;

  // Whether the plan folds BatchNorms into convolutions: fold, on the GPU.
  bool folds() const { return fold && device == Device::CUDA; }
  // Whether the CPU layers run bf16 GEMMs (bf16 on the CPU).
  bool cpu_bf16() const { return device == Device::CPU && precision == Precision::kBf16; }
  // Whether a BatchNorm2d right after a convolution keeps its input in bf16, in place
  // (BatchNorm2d::set_bf16_input): bf16 training on the CPU.
  bool bf16_batchnorm_input() const { return cpu_bf16() && !inference; }
  // The same config, planning for inference (or for training).
  ExecConfig for_inference(bool on = true) const {
    ExecConfig c = *this;
    c.inference = on;
    return c;
  }
  // The format of an activation of this shape: `activations` for 4-D ones, else plain.
  Format format_for(const Shape& shape) const { return shape.ndim == 4 ? activations : Format{}; }
  // A planned activation buffer of this shape on the device, in format_for(shape).
  Tensor activation(const Shape& shape) const {
    return Tensor::empty(shape, device, format_for(shape));
  }
};

}  // namespace mpicnn
