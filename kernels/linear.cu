// Linear's bias kernels on the CUDA backend (src/layers/linear.cpp): bias broadcast over rows
// and the bias gradient summed over rows, in the CPU's order. Its three GEMMs are core/blas.h's
// gemm on the GPU (kernels/blas.cu, cuBLAS).
#include "common.cuh"

namespace mpicnn::gpu {

namespace {

// db (cols) += sum over rows of dy (rows, cols): one thread per column adding the rows in
// order 0..rows-1 into a float that starts at db[j], exactly as the CPU loop in
// src/layers/linear.cpp does, so the result is the same bits. Neighbouring threads read
// neighbouring columns of a row, so the loads coalesce; rows is a batch size (small).
__global__ void sum_rows_kernel(float* db, const float* dy, int64_t rows, int64_t cols) {
  for (int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; j < cols;
       j += int64_t(gridDim.x) * blockDim.x) {
    float acc = db[j];
    for (int64_t r = 0; r < rows; ++r) acc += dy[r * cols + j];
    db[j] = acc;
  }
}

// y (rows, cols) += bias (cols).
__global__ void add_bias_rows_kernel(float* y, const float* bias, int64_t rows, int64_t cols) {
  const int64_t total = rows * cols;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x)
    y[idx] += bias[idx % cols];
}

}  // namespace

void CudaBackend::sum_rows(float* db, const float* dy, int64_t rows, int64_t cols) {
  if (rows == 0 || cols == 0) return;
  sum_rows_kernel<<<blocks_for(cols), kThreads, 0, ctx().stream>>>(db, dy, rows, cols);
  KERNEL_CHECK();
}

void CudaBackend::add_bias_rows(Elem t, void* y, const float* bias, int64_t rows, int64_t cols) {
  if (t != Elem::F32) return add_bias_typed(t, y, bias, rows, cols);
  if (rows == 0 || cols == 0) return;
  add_bias_rows_kernel<<<blocks_for(rows * cols), kThreads, 0, ctx().stream>>>(
      static_cast<float*>(y), bias, rows, cols);
  KERNEL_CHECK();
}

}  // namespace mpicnn::gpu
