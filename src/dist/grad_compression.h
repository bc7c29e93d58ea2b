// The gradient compression formats (--grad-compression) by name, without MPI: what the MPI path
// (compress.h) and the GPU's NCCL path (nccl_backend.h, included by kernels/) both take. The casts
// and the MPI sum are compress.h's; the names are defined in compress.cpp.
#pragma once
#include <cstdint>
#include <string>

namespace mpicnn::dist {

enum class GradCompression { None, Fp16, Bf16 };

const char* to_string(GradCompression c);  // "none", "fp16", "bf16"
// "none" | "fp16" | "bf16"; anything else throws one line naming `flag`.
GradCompression parse_grad_compression(const std::string& s, const std::string& flag);
// Bytes a gradient float takes on the wire: 4, or 2 compressed.
inline int64_t wire_bytes(GradCompression c) { return c == GradCompression::None ? 4 : 2; }

}  // namespace mpicnn::dist
