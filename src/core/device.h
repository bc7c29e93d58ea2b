// Choosing the device a process computes on, once, from the --device and --precision flags:
// auto takes the GPU when this build has the CUDA backend and a GPU is visible, else the CPU;
// cuda without either is an error naming the flag (never a silent CPU run). Not the backend
// itself (core/gpu.h) and not a per-layer choice: the whole model runs where this says.
#pragma once
#include <string>

#include "core/gpu.h"
#include "core/tensor.h"

namespace mpicnn {

struct DeviceChoice {
  Device device = Device::CPU;
  gpu::Precision precision = gpu::Precision::FP32;
  std::string description;  // "cpu" or "cuda: NVIDIA H100 ... (device 0, sm_90), tf32"
};

// device: auto | cpu | cuda; precision: auto | fp32 | tf32 | bf16 | fp16 (auto: tf32 on the
// GPU, fp32 on the CPU, which computes in fp32 only); deterministic: cuDNN's deterministic
// algorithms only. On the GPU, selects device local_rank % visible GPUs (one GPU per rank on
// a node) and applies the settings. `device_flag` / `precision_flag` name the options in errors.
DeviceChoice choose_device(const std::string& device, const std::string& precision,
                           bool deterministic, int local_rank,
                           const std::string& device_flag = "--device",
                           const std::string& precision_flag = "--precision");

}  // namespace mpicnn
