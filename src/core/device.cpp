// How a process executes, decided once (see device.h), and the input stage.
#include "core/device.h"

#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/blas.h"
#include "core/check.h"
#include "core/gemm_bf16.h"

namespace mpicnn {

namespace {

// An environment variable's value, empty when unset.
std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

// A 0/1 switch from the environment: `fallback` when unset or empty.
bool env_switch(const char* name, bool fallback) {
  const std::string v = env(name);
  if (v.empty()) return fallback;
  CHECK(v == "0" || v == "1", name, ": expected 0 or 1, got '", v, "'");
  return v == "1";
}

}  // namespace

ExecConfig exec_overrides(ExecConfig c) {
  if (const std::string v = env("MPICNN_CONV"); !v.empty()) c.conv = parse_conv_algorithm(v);
  if (const std::string v = env("MPICNN_CONV_ISA"); !v.empty()) {
    c.isa = parse_direct_isa(v);
    CHECK(cpu_has(c.isa), "MPICNN_CONV_ISA: this CPU has no ", v);
  }
  if (const std::string v = env("MPICNN_CONV_BF16"); !v.empty()) {
    CHECK(v == "direct" || v == "im2col", "MPICNN_CONV_BF16: expected direct or im2col, got '", v,
          "'");
    c.conv_bf16_direct = v == "direct";
  }
  c.parallel_small_convs = env_switch("MPICNN_CONV_PARALLEL", c.parallel_small_convs);
  // Fusion: off with MPICNN_FUSION=0, and on the GPU unless MPICNN_GPU_FUSION=1 opts in.
  if (!env_switch("MPICNN_FUSION", true)) c.fusion = false;
  if (c.device == Device::CUDA && !env_switch("MPICNN_GPU_FUSION", false)) c.fusion = false;
  if (c.device == Device::CUDA && env_switch("MPICNN_GPU_FOLD", false)) c.fold = true;
  // The CPU's kernel libraries, for the process.
  if (const std::string v = env("MPICNN_BF16"); !v.empty()) {
    const Bf16Path path = parse_bf16_path(v);
    CHECK(path != Bf16Path::kNative || best_bf16_path() == Bf16Path::kNative,
          "MPICNN_BF16=native: this CPU has no AVX512-BF16 (avx512_bf16 in /proc/cpuinfo)");
    set_bf16_path(path);
  }
  if (const std::string v = env("MPICNN_GEMM"); !v.empty()) set_gemm_backend(parse_gemm_backend(v));
  return c;
}

ExecConfig make_exec_config(const ExecFlags& f, int local_rank) {
  CHECK(f.gpu_layout == "nchw" || f.gpu_layout == "nhwc", "--gpu-layout: '", f.gpu_layout,
        "' is not a layout (accepted: nchw, nhwc)");
  CHECK(f.device == "auto" || f.device == "cpu" || f.device == "cuda", f.device_flag, ": '",
        f.device, "' is not a device (accepted: auto, cpu, cuda)");
  bool cuda = f.device == "cuda";
  if (f.device != "cpu") {
    const std::string why = gpu::unavailable_reason();
    if (cuda) CHECK(why.empty(), f.device_flag, " cuda: ", why);
    cuda = why.empty();
  }
  ExecConfig c;
  c.deterministic = f.deterministic;
  if (!cuda) {
    CHECK(f.gpu_layout == "nchw", "--gpu-layout nhwc: the model runs on the CPU (",
          f.device == "cpu" ? std::string("--device cpu") : gpu::unavailable_reason(),
          "); the CPU keeps its own layouts, pass --gpu-layout nchw or run on a GPU");
    CHECK(f.precision == "auto" || f.precision == "fp32" || f.precision == "bf16", f.precision_flag,
          " ", f.precision, ": the CPU computes in fp32 or bf16 (", f.precision,
          " needs --device cuda)");
    c.precision = f.precision == "bf16" ? Precision::kBf16 : Precision::kFp32;
    return exec_overrides(c);
  }
  if (f.precision == "auto" || f.precision == "tf32")
    c.precision = Precision::kTf32;
  else if (f.precision == "fp32")
    c.precision = Precision::kFp32;
  else if (f.precision == "bf16")
    c.precision = Precision::kBf16;
  else if (f.precision == "fp16")
    c.precision = Precision::kFp16;
  else
    FAIL(f.precision_flag, ": '", f.precision,
         "' is not a precision (accepted: auto, fp32, tf32, bf16, fp16)");
  gpu::backend().select_device(local_rank);
  c.device = Device::CUDA;
  if (f.gpu_layout == "nhwc") c.activations = Format{storage_elem(c.precision), Order::NHWC};
  return exec_overrides(c);
}

std::string describe_device(const ExecConfig& c) {
  if (c.device == Device::CUDA)
    return "cuda: " + gpu::backend().device_name() + ", " + precision_name(c.precision) +
           (c.activations.plain() ? ""
                                  : std::string(", activations ") + format_name(c.activations)) +
           (c.deterministic ? ", deterministic" : "");
  if (!c.cpu_bf16()) return "cpu";
  if (bf16_native()) return "cpu, bf16 GEMMs (AVX512-BF16)";
  return std::string("cpu, bf16 GEMMs ") + bf16_kernels_name() + " (this CPU has no AVX512-BF16)";
}

std::string describe_exec(const ExecConfig& c) {
  std::string s = std::string(device_name(c.device)) + " " + precision_name(c.precision);
  if (!c.activations.plain()) s += std::string(", activations ") + format_name(c.activations);
  s += c.inference ? ", inference" : ", training";
  s += c.fusion ? ", fused BatchNorm+ReLU" : ", unfused";
  if (c.folds()) s += ", folded BatchNorm";
  if (c.device == Device::CPU) {
    s += std::string(", conv ") + conv_algorithm_name(c.conv);
    if (c.conv == ConvAlgorithm::kDirect) s += std::string(" ") + direct_isa_name(c.isa);
    if (c.cpu_bf16()) {
      s += std::string(", bf16 kernels ") + bf16_path_name(bf16_path());
      if (!c.conv_bf16_direct) s += " (convolutions on im2col)";
    }
    if (!c.parallel_small_convs) s += ", small convolutions one chunk at a time";
    s += std::string(", gemm ") + gemm_backend_name(gemm_backend());
  } else if (c.deterministic) {
    s += ", deterministic";
  }
  return s;
}

nlohmann::json exec_json(const ExecConfig& c) {
  nlohmann::json j = {{"device", device_name(c.device)},
                      {"precision", precision_name(c.precision)},
                      {"activations", format_name(c.activations)},
                      {"inference", c.inference},
                      {"fusion", c.fusion},
                      {"fold", c.fold}};
  if (c.device == Device::CPU) {
    j["conv"] = conv_algorithm_name(c.conv);
    j["conv_isa"] = direct_isa_name(c.isa);
    j["conv_bf16_direct"] = c.conv_bf16_direct;
    j["parallel_small_convs"] = c.parallel_small_convs;
    j["bf16_kernels"] = bf16_path_name(bf16_path());
    j["gemm"] = gemm_backend_name(gemm_backend());
  } else {
    j["deterministic"] = c.deterministic;
  }
  return j;
}

InputStage::InputStage(Device device, int64_t max_batch, const Shape& sample, Format format) {
  CHECK(sample.ndim == 3 && max_batch > 0, "input stage: batch ", max_batch, " of ", sample.str());
  if (device == Device::CPU) return;
  const Shape s = {max_batch, sample[0], sample[1], sample[2]};
  images_ = Tensor::empty(s, device, format);
  if (!images_.format().plain()) staging_ = Tensor::empty(s, device);
  gpu::Backend& be = gpu::backend();
  const size_t u8_bytes = size_t(images_.numel() + max_batch);
  u8_ = be.alloc(u8_bytes);
  for (int k = 0; k < 2; ++k) pinned_[k] = be.alloc_pinned(u8_bytes), uploaded_[k] = be.event();
}

Tensor InputStage::put(const Tensor& images) {
  if (!images_.defined()) return images;
  Tensor x = images_.head(images.shape());
  if (x.format().plain()) {
    x.copy_from(images);
    return x;
  }
  Tensor plain = staging_.head(images.shape());
  plain.copy_from(images);
  gpu::backend().convert(x.raw(), x.format(), plain.data(), Format{}, x.size(0), x.size(1),
                         x.size(2), x.size(3), /*accumulate=*/false);
  return x;
}

Tensor InputStage::put_u8(const uint8_t* pixels, const std::vector<uint8_t>& flips,
                          const std::vector<float>& mean, const std::vector<float>& stddev) {
  CHECK(images_.defined(), "input stage: 8-bit batches are normalised on the GPU only");
  const Shape& s = images_.shape();
  const int64_t n = int64_t(flips.size()), C = s[1], H = s[2], W = s[3], max_batch = s[0];
  CHECK(n > 0 && n <= max_batch, "input stage: a batch of ", n, " (planned for ", max_batch, ")");
  CHECK(int64_t(mean.size()) == C && int64_t(stddev.size()) == C, "input stage: ", mean.size(), " means and ",
        stddev.size(), " stds for ", C, " channels");
  gpu::Backend& be = gpu::backend();
  uint8_t* dev_pixels = static_cast<uint8_t*>(u8_.get());
  uint8_t* dev_flips = dev_pixels + images_.numel();
  const int k = next_;
  next_ ^= 1;
  be.wait(*uploaded_[k]);  // its last upload, two batches ago: reached long since, as a rule
  uint8_t* host_pixels = static_cast<uint8_t*>(pinned_[k].get());
  uint8_t* host_flips = host_pixels + images_.numel();
  const size_t pixel_bytes = size_t(n * C * H * W);
  std::memcpy(host_pixels, pixels, pixel_bytes);
  std::memcpy(host_flips, flips.data(), size_t(n));
  // The device buffer is free: the stream runs this upload after the last batch's normalisation.
  be.copy_async(dev_pixels, true, host_pixels, false, pixel_bytes);
  be.copy_async(dev_flips, true, host_flips, false, size_t(n));
  be.record(*uploaded_[k]);
  Tensor x = images_.head(Shape{n, C, H, W});
  be.normalize_u8(x.format(), x.raw(), dev_pixels, dev_flips, n, int(C), int(H), int(W),
                  mean.data(), stddev.data());
  return x;
}

}  // namespace mpicnn
