// Device and precision selection (see device.h).
#include "core/device.h"

#include "core/check.h"

namespace mpicnn {

DeviceChoice choose_device(const std::string& device, const std::string& precision,
                           bool deterministic, int local_rank, const std::string& device_flag,
                           const std::string& precision_flag) {
  CHECK(device == "auto" || device == "cpu" || device == "cuda", device_flag, ": '", device,
        "' is not a device (accepted: auto, cpu, cuda)");
  bool cuda = device == "cuda";
  if (device != "cpu") {
    const std::string why = gpu::unavailable_reason();
    if (cuda) CHECK(why.empty(), device_flag, " cuda: ", why);
    cuda = why.empty();
  }
  DeviceChoice c;
  if (!cuda) {
    CHECK(precision == "auto" || precision == "fp32", precision_flag, " ", precision,
          ": the CPU computes in fp32 only (", precision, " needs --device cuda)");
    c.description = "cpu";
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
  c.description = "cuda: " + b.device_name() + ", " + gpu::precision_name(c.precision) +
                  (deterministic ? ", deterministic" : "");
  return c;
}

}  // namespace mpicnn
