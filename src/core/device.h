// Choosing the device a process computes on, once, from the --device and --precision flags:
// auto takes the GPU when this build has the CUDA backend and a GPU is visible, else the CPU;
// cuda without either is an error naming the flag (never a silent CPU run). Not the backend
// itself (core/gpu.h) and not a per-layer choice: the whole model runs where this says.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/gpu.h"
#include "core/tensor.h"

namespace mpicnn {

struct DeviceChoice {
  Device device = Device::CPU;
  gpu::Precision precision = gpu::Precision::FP32;
  // On the CPU, --precision bf16: the convolutions' and linear layers' GEMMs multiply
  // bf16-rounded inputs with float32 sums (layers/cpu_precision.h, which the caller sets before
  // planning the model).
  bool cpu_bf16 = false;
  // On the GPU with --gpu-layout nhwc: the format of the model's 4-D activations (NHWC, in
  // the precision's storage type); plain otherwise. Also set process-wide (gpu_activations).
  Format activations;
  std::string description;  // "cpu", "cpu, bf16 GEMMs (AVX512-BF16)" or "cuda: NVIDIA H100 ..., tf32"
};

// device: auto | cpu | cuda; precision: auto | fp32 | tf32 | bf16 | fp16 (auto: tf32 on the
// GPU, fp32 on the CPU; the CPU takes fp32 and bf16, the latter on AVX512-BF16 where the CPU has
// it, else emulated in float32 with the same bits, slower); deterministic: cuDNN's deterministic
// algorithms only. On the GPU, selects device local_rank % visible GPUs (one GPU per rank on
// a node) and applies the settings. `device_flag` / `precision_flag` name the options in errors.
// gpu_layout: nchw | nhwc (--gpu-layout; nhwc needs the GPU).
DeviceChoice choose_device(const std::string& device, const std::string& precision,
                           bool deterministic, int local_rank,
                           const std::string& gpu_layout = "nchw",
                           const std::string& device_flag = "--device",
                           const std::string& precision_flag = "--precision");

// choose_device also sets gpu_activations() (core/format.h) to the choice's activations.

// The model's input batches on its device: on a GPU, buffers for the largest batch allocated
// once (so no step allocates) that each batch is copied into; on the CPU, batches pass
// through untouched.
class InputStage {
 public:
  InputStage() = default;  // the CPU
  // sample: (C, H, W).
  InputStage(Device device, int64_t max_batch, const Shape& sample);

  Device device() const { return images_.defined() ? images_.device() : Device::CPU; }

  // (n, C, H, W) on the device in gpu_activations()' format: `images` itself on the CPU, else
  // its one host -> device copy (converted on the device when the format is not plain).
  Tensor put(const Tensor& images);
  // GPU only: (n, H, W, C) 8-bit pixels, copied up (a quarter of the floats' bytes) and
  // turned there into (n, C, H, W) values (pixels / 255 - mean[c]) / stddev[c], mirrored
  // left-right where flips[i] != 0 (gpu::Backend::normalize_u8); n = flips.size(). Queued on
  // the compute stream without waiting for it (pixels may be reused as soon as this returns).
  Tensor put_u8(const uint8_t* pixels, const std::vector<uint8_t>& flips,
                const std::vector<float>& mean, const std::vector<float>& stddev);

 private:
  Tensor images_;               // (max_batch, C, H, W) on the GPU; undefined on the CPU
  Tensor staging_;              // plain float copy for put() when images_ is not plain
  std::shared_ptr<void> u8_;    // GPU: max_batch * H * W * C pixel bytes, then max_batch flips
  // GPU: two page-locked host copies of u8_'s bytes, used in turn, and the point each one's
  // upload was queued at: put_u8 copies the batch into one, queues its upload on the compute
  // stream and returns without waiting, so the next batch is copied into the other while the
  // GPU may still be busy; a copy is reused only once its upload has been reached.
  std::shared_ptr<void> pinned_[2];
  std::shared_ptr<gpu::Event> uploaded_[2];
  int next_ = 0;  // the pinned copy the next batch goes into
};

}  // namespace mpicnn
