// Device and precision selection (see device.h).
#include "core/device.h"

#include <cstring>

#include "core/check.h"
#include "core/gemm_bf16.h"

namespace mpicnn {

DeviceChoice choose_device(const std::string& device, const std::string& precision,
                           bool deterministic, int local_rank, const std::string& gpu_layout,
                           const std::string& device_flag, const std::string& precision_flag) {
  CHECK(gpu_layout == "nchw" || gpu_layout == "nhwc", "--gpu-layout: '", gpu_layout,
        "' is not a layout (accepted: nchw, nhwc)");
  CHECK(device == "auto" || device == "cpu" || device == "cuda", device_flag, ": '", device,
        "' is not a device (accepted: auto, cpu, cuda)");
  bool cuda = device == "cuda";
  if (device != "cpu") {
    const std::string why = gpu::unavailable_reason();
    if (cuda) CHECK(why.empty(), device_flag, " cuda: ", why);
    cuda = why.empty();
  }
  DeviceChoice c;
  set_gpu_activations(Format{});
  if (!cuda) {
    CHECK(gpu_layout == "nchw", "--gpu-layout nhwc: the model runs on the CPU (",
          device == "cpu" ? std::string("--device cpu") : gpu::unavailable_reason(),
          "); the CPU keeps its own layouts, pass --gpu-layout nchw or run on a GPU");
    CHECK(precision == "auto" || precision == "fp32" || precision == "bf16", precision_flag, " ", precision,
          ": the CPU computes in fp32 or bf16 (", precision, " needs --device cuda)");
    c.cpu_bf16 = precision == "bf16";
    c.description = !c.cpu_bf16 ? "cpu"
                    : bf16_native()
                        ? "cpu, bf16 GEMMs (AVX512-BF16)"
                        : std::string("cpu, bf16 GEMMs ") + bf16_kernels_name() +
                              " (this CPU has no AVX512-BF16)";
    return c;
  }
  if (precision == "auto" || precision == "tf32") c.precision = gpu::Precision::TF32;
  else if (precision == "fp32") c.precision = gpu::Precision::FP32;
  else if (precision == "bf16") c.precision = gpu::Precision::BF16;
  else if (precision == "fp16") c.precision = gpu::Precision::FP16;
  else FAIL(precision_flag, ": '", precision, "' is not a precision (accepted: auto, fp32, tf32, bf16, fp16)");
  gpu::Backend& b = gpu::backend();
  b.select_device(local_rank);
  b.set_precision(c.precision);
  b.set_deterministic(deterministic);
  c.device = Device::CUDA;
  if (gpu_layout == "nhwc") {
    c.activations.order = Order::NHWC;
    c.activations.elem = c.precision == gpu::Precision::BF16   ? Elem::BF16
                          : c.precision == gpu::Precision::FP16 ? Elem::F16
                                                                : Elem::F32;
  }
  set_gpu_activations(c.activations);
  c.description = "cuda: " + b.device_name() + ", " + gpu::precision_name(c.precision) +
                  (c.activations.plain() ? "" : std::string(", activations ") +
                                                    format_name(c.activations)) +
                  (deterministic ? ", deterministic" : "");
  return c;
}

InputStage::InputStage(Device device, int64_t max_batch, const Shape& sample) {
  CHECK(sample.ndim == 3 && max_batch > 0, "input stage: batch ", max_batch, " of ", sample.str());
  if (device == Device::CPU) return;
  const Shape s = {max_batch, sample[0], sample[1], sample[2]};
  images_ = Tensor::empty(s, device, gpu_activations());
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
  if (x.format().order == Order::NHWC)
    be.normalize_u8_nhwc(x.format().elem, x.raw(), dev_pixels, dev_flips, n, int(C), int(H),
                         int(W), mean.data(), stddev.data());
  else
    be.normalize_u8(x.data(), dev_pixels, dev_flips, n, int(C), int(H), int(W), mean.data(),
                    stddev.data());
  return x;
}

}  // namespace mpicnn
