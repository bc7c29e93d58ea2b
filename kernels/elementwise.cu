// Whole-buffer kernels of the CUDA backend that belong to no layer: fill (Tensor::fill), scale
// (gradient averaging in src/dist/grad_sync.cpp) and the finiteness check (fp16 loss scaling in
// the trainer). Not layer kernels: those live in kernels/<layer>.cu (see src/core/gpu.h).
#include "common.cuh"

namespace mpicnn::gpu {

namespace {

__global__ void fill_kernel(float* x, float value, int64_t n) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) x[i] = value;
}

__global__ void scale_kernel(float* x, float a, int64_t n) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) x[i] = __fmul_rn(x[i], a);
}

// flag (1 int, zeroed before) becomes nonzero when any float is Inf or NaN. Integer OR: the
// result does not depend on which thread finds one first.
__global__ void all_finite_kernel(int* flag, const float* x, int64_t n) {
  bool bad = false;
  for (int64_t i = global_index(); i < n; i += grid_stride()) bad |= !isfinite(x[i]);
  // Every thread of the warp reaches this (no early exit above), so the full mask is valid.
  if (__any_sync(0xffffffffu, bad) && (threadIdx.x & 31) == 0) atomicOr(flag, 1);
}

}  // namespace

void CudaBackend::fill(Elem t, void* x, float value, int64_t n) {
  if (t != Elem::F32) return fill_typed(t, x, value, n);
  if (n <= 0) return;
  fill_kernel<<<blocks_for(n), kThreads, 0, ctx().stream>>>(static_cast<float*>(x), value, n);
  KERNEL_CHECK();
}

void CudaBackend::scale(float* x, float a, int64_t n) {
  if (n <= 0) return;
  scale_kernel<<<blocks_for(n), kThreads, 0, ctx().stream>>>(x, a, n);
  KERNEL_CHECK();
}

bool CudaBackend::all_finite(const float* x, int64_t n) {
  if (n <= 0) return true;
  Context& c = ctx();
  int* flag = reinterpret_cast<int*>(c.scratch);  // (1)
  CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof(int), c.stream));
  all_finite_kernel<<<blocks_for(n), kThreads, 0, c.stream>>>(flag, x, n);
  KERNEL_CHECK();
  int host = 0;
  CUDA_CHECK(cudaMemcpyAsync(&host, flag, sizeof(int), cudaMemcpyDeviceToHost, c.stream));
  CUDA_CHECK(cudaStreamSynchronize(c.stream));
  return host == 0;
}

}  // namespace mpicnn::gpu
