// Host side of the GPU backend that both builds share: the accessor that turns "no backend"
// into one clear error. The backend itself is kernels/ (see gpu.h).
#include "core/gpu.h"

#include "core/check.h"

namespace mpicnn::gpu {

Backend& backend() {
  Backend* b = backend_instance();
  if (!b) FAIL(unavailable_reason());
  return *b;
}

}  // namespace mpicnn::gpu
