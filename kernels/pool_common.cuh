// What the pooling files of the CUDA backend share (maxpool2d.cu, avgpool2d.cu,
// adaptive_avgpool2d.cu; on the CPU, src/layers/pool_common.h): window index arithmetic and
// element counts of a PoolDesc. Internal to kernels/.
#pragma once
#include "common.cuh"

namespace mpicnn::gpu {

// Smallest output index o >= 0 with o * stride >= num (num may be negative).
__device__ __forceinline__ int64_t first_at_or_after(int64_t num, int64_t stride) {
  return num <= 0 ? 0 : (num + stride - 1) / stride;
}

// Element counts of the input and output of N planes.
inline int64_t in_count(int64_t N, const PoolDesc& d) { return N * d.c * int64_t(d.h) * d.w; }
inline int64_t out_count(int64_t N, const PoolDesc& d) { return N * d.c * int64_t(d.oh) * d.ow; }

}  // namespace mpicnn::gpu
