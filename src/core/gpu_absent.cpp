// The CPU-only build's side of core/gpu.h: no backend, and the one line that says why. Linked
// instead of kernels/ when the build is not `make CUDA=1` (see the Makefile), so asking for
// the GPU fails where it is asked, never falling back to the CPU.
#include "core/gpu.h"

namespace mpicnn::gpu {

Backend* backend_instance() { return nullptr; }
bool compiled_in() { return false; }
std::string unavailable_reason() {
  return "this build has no CUDA backend (rebuild with make CUDA=1 on a machine with nvcc)";
}

}  // namespace mpicnn::gpu
