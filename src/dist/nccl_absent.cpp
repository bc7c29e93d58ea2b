// A build without NCCL's side of dist/nccl_backend.h: linked instead of kernels/nccl_backend.cu
// when the build is not `make CUDA=1` or found no nccl.h (see the Makefile), so
// --gpu-allreduce nccl is refused where it is asked, never run over MPI in its place.
#include "core/check.h"
#include "dist/nccl_backend.h"

namespace mpicnn::dist::nccl {

bool compiled_in() { return false; }

std::string unavailable_reason() { return kNoNccl; }

std::vector<uint8_t> unique_id() { FAIL(unavailable_reason()); }

std::unique_ptr<DeviceCollective> open(const std::vector<uint8_t>&, int, int, GradCompression, int64_t) {
  FAIL(unavailable_reason());
}

}  // namespace mpicnn::dist::nccl
