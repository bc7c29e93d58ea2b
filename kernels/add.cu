// Add and accumulate of the CUDA backend (src/layers/add.cpp): the residual add and the
// gradient sum of a tensor with two consumers, IEEE-rounded adds as on the CPU. Not Concat
// (its copies are copy_rows in backend.cu).
#include "common.cuh"

namespace mpicnn::gpu {

namespace {

// out may alias a or b: each element is read before it is written, by the same thread.
__global__ void add_kernel(float* out, const float* a, const float* b, int64_t n) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) out[i] = __fadd_rn(a[i], b[i]);
}

__global__ void accumulate_kernel(float* dst, const float* src, int64_t n) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) dst[i] = __fadd_rn(dst[i], src[i]);
}

}  // namespace

void CudaBackend::add(Elem t, void* out, const void* a, const void* b, int64_t n) {
  if (t != Elem::F32) return add_typed(t, out, a, b, n);
  if (n <= 0) return;
  add_kernel<<<blocks_for(n), kThreads, 0, ctx().stream>>>(
      static_cast<float*>(out), static_cast<const float*>(a), static_cast<const float*>(b), n);
  KERNEL_CHECK();
}

void CudaBackend::accumulate(Elem t, void* dst, const void* src, int64_t n) {
  if (t != Elem::F32) return accumulate_typed(t, dst, src, n);
  if (n <= 0) return;
  accumulate_kernel<<<blocks_for(n), kThreads, 0, ctx().stream>>>(
      static_cast<float*>(dst), static_cast<const float*>(src), n);
  KERNEL_CHECK();
}

}  // namespace mpicnn::gpu
