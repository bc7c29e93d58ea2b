// The one place a process decides how it executes (core/exec.h): the device, from the --device
// and --precision flags and the probe (auto takes the GPU when this build has the CUDA backend
// and a GPU is visible, else the CPU; cuda without either is an error naming the flag, never a
// silent CPU run), the precision and activations' layout, and the environment's overrides of
// the kernels (for benchmarks and tests; nothing below the programs reads the environment).
// Not the backend itself (core/gpu.h) and not a per-layer choice: the whole model runs where
// this says, and its layers choose their kernels from the ExecConfig it returns.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "core/exec.h"
#include "core/gpu.h"
#include "core/tensor.h"

namespace mpicnn {

// What the programs' flags say about execution.
struct ExecFlags {
  std::string device = "auto";      // auto | cpu | cuda
  std::string precision = "auto";   // auto | fp32 | tf32 | bf16 | fp16
  std::string gpu_layout = "nchw";  // nchw | nhwc (nhwc needs the GPU)
  bool deterministic = false;       // GPU: cuDNN's deterministic algorithms only
  // The option names errors give.
  std::string device_flag = "--device", precision_flag = "--precision";
};

// The process's ExecConfig: auto precision is tf32 on the GPU and fp32 on the CPU; the CPU
// takes fp32 and bf16 (the latter on AVX512-BF16 where the CPU has it, else emulated in float32
// with the same bits, slower). On the GPU it selects device local_rank % visible GPUs (one GPU
// per rank on a node). Reads, once, the overrides: MPICNN_CONV (direct | im2col | winograd),
// MPICNN_CONV_ISA (avx2 | avx512), MPICNN_CONV_BF16 (direct | im2col), MPICNN_CONV_PARALLEL
// (1 | 0), MPICNN_FUSION (0 turns fusion off), MPICNN_GPU_FUSION=1 and MPICNN_GPU_FOLD=1 (the
// GPU's opt-ins), and for the CPU's kernel libraries, which it sets for the process, MPICNN_BF16
// (native | emulated | reference) and MPICNN_GEMM (openblas | eigen); a value it does not know,
// or a kernel set this CPU lacks, is an error naming the variable.
ExecConfig make_exec_config(const ExecFlags& flags, int local_rank);
// cfg with the environment's overrides above applied, the kernel libraries set for the process:
// make_exec_config's last step, and what test and benchmark mains call on the config they plan
// with (so that MPICNN_CONV_ISA=avx2 make test runs every test on the AVX2 kernels).
ExecConfig exec_overrides(ExecConfig cfg);

// The device part of a run's header and summary: "cpu", "cpu, bf16 GEMMs (AVX512-BF16)",
// "cuda: NVIDIA H100 ... (device 0, sm_90), tf32, activations bf16 NHWC".
std::string describe_device(const ExecConfig& cfg);
// The whole config in one line, printed once at start: device, precision, layout, what the
// plan serves, fusion and folding, the convolution algorithm and the CPU's kernel libraries.
std::string describe_exec(const ExecConfig& cfg);
// The same as JSON, for trainer.json and reports.
nlohmann::json exec_json(const ExecConfig& cfg);

// The model's input batches on its device: on a GPU, buffers for the largest batch allocated
// once (so no step allocates) that each batch is copied into; on the CPU, batches pass
// through untouched.
class InputStage {
 public:
  InputStage() = default;  // the CPU
  // sample: (C, H, W); format: the model's activations' (ExecConfig::activations).
  InputStage(Device device, int64_t max_batch, const Shape& sample, Format format = {});

  Device device() const { return images_.defined() ? images_.device() : Device::CPU; }

  // (n, C, H, W) on the device in the stage's format: `images` itself on the CPU, else its one
  // host -> device copy (converted on the device when the format is not plain).
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
