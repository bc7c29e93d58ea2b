// What a run computes in: one vocabulary for the CPU and the GPU, each device taking the ones it
// has (core/device.h refuses the others by flag name).
// - fp32: float32 storage and arithmetic (on the GPU without tensor cores).
// - tf32: float32 storage; the GPU's convolutions and GEMMs on TF32 tensor cores (GPU only).
// - bf16: the GEMMs' inputs rounded to bfloat16, products summed in float32, float32 master
//   weights. CPU: convolutions and linear layers so (core/gemm_bf16.h, the direct kernels' bf16
//   copy), a BatchNorm's input after a convolution kept in bf16 in training, the rest float32.
//   GPU: tensor-core math on bf16 conversions (float32 NCHW activations), or bf16 activations
//   with --gpu-layout nhwc.
// - fp16: as bf16 in float16, with dynamic loss scaling (GPU only).
// Host-only and dependency-free: kernels/ includes it through core/gpu.h.
#pragma once
#include <cstdint>

#include "core/format.h"

namespace mpicnn {

enum class Precision : uint8_t { kFp32, kTf32, kBf16, kFp16 };

inline const char* precision_name(Precision p) {
  switch (p) {
    case Precision::kFp32: return "fp32";
    case Precision::kTf32: return "tf32";
    case Precision::kBf16: return "bf16";
    case Precision::kFp16: return "fp16";
  }
  return "fp32";
}

// The element type the GPU's typed activations (--gpu-layout nhwc) are stored in.
inline Elem storage_elem(Precision p) {
  return p == Precision::kBf16 ? Elem::BF16 : p == Precision::kFp16 ? Elem::F16 : Elem::F32;
}

}  // namespace mpicnn
