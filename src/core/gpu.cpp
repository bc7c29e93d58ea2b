// Host side of the GPU backend that both builds share: the accessor that turns "no backend"
// into one clear error, and names. The backend itself is kernels/ (see gpu.h).
#include "core/gpu.h"

#include "core/check.h"

namespace mpicnn::gpu {

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::FP32: return "fp32";
    case Precision::TF32: return "tf32";
    case Precision::BF16: return "bf16";
    case Precision::FP16: return "fp16";
  }
  return "?";
}

Backend& backend() {
  Backend* b = backend_instance();
  if (!b) FAIL(unavailable_reason());
  return *b;
}

}  // namespace mpicnn::gpu
