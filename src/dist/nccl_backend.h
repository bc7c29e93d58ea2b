// The NCCL side of --gpu-allreduce nccl as host code sees it: whether this build has NCCL, rank
// 0's communicator id, and the DeviceCollective (device_sync.h) over a communicator made from it.
// Defined by kernels/nccl_backend.cu when `make CUDA=1` finds nccl.h (MPICNN_HAVE_NCCL), else by
// src/dist/nccl_absent.cpp, whose functions refuse with one line. No MPI here (the id travels
// through device_sync.cpp's open_nccl) and no NCCL or CUDA headers.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dist/device_sync.h"

namespace mpicnn::dist::nccl {

bool compiled_in();
// What a build without NCCL says, and why there is none here: "" when compiled in, else kNoNccl.
inline constexpr const char* kNoNccl =
    "this build has no NCCL (rebuild with make CUDA=1 where nccl.h is under CUDA_HOME or NCCL_HOME)";
std::string unavailable_reason();
// ncclGetUniqueId's bytes (rank 0 makes it; every rank passes it to open).
std::vector<uint8_t> unique_id();
// ncclCommInitRank on the selected GPU (gpu::Backend::select_device first), and the collective
// over it: a communication stream of its own, events per slot, 16-bit copies of the slab when
// compressing.
std::unique_ptr<DeviceCollective> open(const std::vector<uint8_t>& id, int rank, int size,
                                       GradCompression compression, int64_t slab_floats);

}  // namespace mpicnn::dist::nccl
