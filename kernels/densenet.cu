// DenseNet's layout swap on the CUDA backend (src/models/densenet.cpp): NCHW <-> the block's
// channel-major features, a transpose of the first two dimensions. Not the block's GEMMs
// (core/blas.h's gemm, kernels/blas.cu) nor its layers (their own kernels/<layer>.cu).
#include "common.cuh"

namespace mpicnn::gpu {

namespace {

// dst (B, A, inner) = src (A, B, inner): one block per run of `inner` floats (long runs), the
// threads of a block striding along the run, so both reads and writes coalesce.
__global__ void swap01_rows_kernel(float* dst, const float* src, int64_t A, int64_t B,
                                   int64_t inner) {
  const int64_t rows = A * B;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t b = r / A, a = r % A;  // r is the destination row b * A + a
    float* d = dst + r * inner;
    const float* s = src + (a * B + b) * inner;
    for (int64_t k = threadIdx.x; k < inner; k += blockDim.x) d[k] = s[k];
  }
}

// The same for short runs (inner < a warp or so), one thread per element: a block per row
// would leave most of its threads idle.
__global__ void swap01_flat_kernel(float* dst, const float* src, int64_t A, int64_t B,
                                   int64_t inner) {
  const int64_t n = A * B * inner;
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    const int64_t r = i / inner, k = i % inner;
    const int64_t b = r / A, a = r % A;
    dst[i] = src[(a * B + b) * inner + k];
  }
}

}  // namespace

void CudaBackend::swap01(float* dst, const float* src, int64_t A, int64_t B, int64_t inner) {
  const int64_t rows = A * B;
  if (rows <= 0 || inner <= 0) return;
  if (inner >= 64) {
    // A block per row, as many threads as the row has floats (rounded to warps, at most
    // kThreads); the grid strides over rows past the cap.
    const int threads = int(inner >= kThreads ? kThreads : (inner + 31) / 32 * 32);
    const int64_t cap = 65535 * 8;
    const unsigned grid = unsigned(rows < cap ? rows : cap);
    swap01_rows_kernel<<<grid, threads, 0, ctx().stream>>>(dst, src, A, B, inner);
  } else {
    swap01_flat_kernel<<<blocks_for(rows * inner), kThreads, 0, ctx().stream>>>(dst, src, A, B,
                                                                                inner);
  }
  KERNEL_CHECK();
}

}  // namespace mpicnn::gpu
