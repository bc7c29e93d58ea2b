// Elementwise kernels of the CUDA backend: fill/scale/add, the DenseNet layout swap, the
// finiteness check, ReLU, Dropout (Philox masks identical to the CPU's) and the input batch
// normalization. Not reductions over rows or channels (loss.cu, batchnorm.cu) and no cuDNN.
#include "common.cuh"

namespace mpicnn::gpu {

namespace {

// Grid-stride loop bounds in 64 bits (n may exceed 2^31).
__device__ __forceinline__ int64_t global_index() {
  return int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_stride() { return int64_t(gridDim.x) * blockDim.x; }

__global__ void fill_kernel(float* x, float value, int64_t n) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) x[i] = value;
}

__global__ void scale_kernel(float* x, float a, int64_t n) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) x[i] = __fmul_rn(x[i], a);
}

// out may alias a or b: each element is read before it is written, by the same thread.
__global__ void add_kernel(float* out, const float* a, const float* b, int64_t n) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) out[i] = __fadd_rn(a[i], b[i]);
}

__global__ void accumulate_kernel(float* dst, const float* src, int64_t n) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) dst[i] = __fadd_rn(dst[i], src[i]);
}

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

// flag (1 int, zeroed before) becomes nonzero when any float is Inf or NaN. Integer OR: the
// result does not depend on which thread finds one first.
__global__ void all_finite_kernel(int* flag, const float* x, int64_t n) {
  bool bad = false;
  for (int64_t i = global_index(); i < n; i += grid_stride()) bad |= !isfinite(x[i]);
  // Every thread of the warp reaches this (no early exit above), so the full mask is valid.
  if (__any_sync(0xffffffffu, bad) && (threadIdx.x & 31) == 0) atomicOr(flag, 1);
}

// As ReLU::forward: `x > 0 ? x : 0`, so NaN becomes 0 like on the CPU.
__global__ void relu_forward_kernel(float* y, const float* x, int64_t n) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    const float v = x[i];
    y[i] = v > 0.f ? v : 0.f;
  }
}

__global__ void relu_backward_kernel(float* dx, const float* dy, const float* y, int64_t n) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) dx[i] = y[i] > 0.f ? dy[i] : 0.f;
}

// Philox4x32-10 exactly as src/core/rng.cpp: counter (index lo, index hi, stream lo,
// stream hi), key (seed lo, seed hi); returns word 0, the only one Rng::bits uses.
__device__ __forceinline__ uint32_t philox_word0(uint64_t seed, uint64_t stream, uint64_t index) {
  uint32_t c0 = uint32_t(index), c1 = uint32_t(index >> 32);
  uint32_t c2 = uint32_t(stream), c3 = uint32_t(stream >> 32);
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    const uint32_t hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
    const uint32_t hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
    const uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return c0;
}

// Dropout::keep: the Philox index of element j of the (n_samples, per_sample) batch is
// (first_sample + sample) * per_sample + i = first_sample * per_sample + j (mod 2^64, as the
// CPU's uint64 arithmetic wraps), so no division is needed. Rng::uniform is exact in float:
// a 24-bit integer times 2^-24.
__global__ void dropout_kernel(float* y, const float* x, int64_t n, uint64_t seed,
                               uint64_t stream, uint64_t base, float p, float scale) {
  for (int64_t j = global_index(); j < n; j += grid_stride()) {
    const uint32_t bits = philox_word0(seed, stream, base + uint64_t(j));
    const float u = __fmul_rn(float(bits >> 8), 1.0f / 16777216.0f);
    y[j] = u >= p ? __fmul_rn(x[j], scale) : 0.f;
  }
}

constexpr int kMaxNormChannels = 4;
struct NormStats {
  float mean[kMaxNormChannels], std[kMaxNormChannels];
};

// out (N, C, H, W) from in (N, H, W, C) uint8, one thread per output float (coalesced
// writes; reads stride C bytes). The arithmetic is the CPU's lookup table
// (src/data/transform.cpp): (float(v) / 255 - mean) / std, each step rounded to float.
__global__ void normalize_u8_kernel(float* out, const uint8_t* in, const uint8_t* flip,
                                    int64_t N, int C, int H, int W, NormStats st) {
  const int64_t n_out = N * C * H * W;
  for (int64_t i = global_index(); i < n_out; i += grid_stride()) {
    const int64_t w = i % W;
    int64_t t = i / W;
    const int64_t h = t % H;
    t /= H;
    const int c = int(t % C);
    const int64_t n = t / C;
    const int64_t ws = flip && flip[n] ? W - 1 - w : w;
    const float v = float(in[((n * H + h) * W + ws) * C + c]);
    out[i] = __fdiv_rn(__fsub_rn(__fdiv_rn(v, 255.0f), st.mean[c]), st.std[c]);
  }
}

}  // namespace

void CudaBackend::fill(float* x, float value, int64_t n) {
  if (n <= 0) return;
  fill_kernel<<<blocks_for(n), kThreads, 0, ctx().stream>>>(x, value, n);
  KERNEL_CHECK();
}

void CudaBackend::scale(float* x, float a, int64_t n) {
  if (n <= 0) return;
  scale_kernel<<<blocks_for(n), kThreads, 0, ctx().stream>>>(x, a, n);
  KERNEL_CHECK();
}

void CudaBackend::add(float* out, const float* a, const float* b, int64_t n) {
  if (n <= 0) return;
  add_kernel<<<blocks_for(n), kThreads, 0, ctx().stream>>>(out, a, b, n);
  KERNEL_CHECK();
}

void CudaBackend::accumulate(float* dst, const float* src, int64_t n) {
  if (n <= 0) return;
  accumulate_kernel<<<blocks_for(n), kThreads, 0, ctx().stream>>>(dst, src, n);
  KERNEL_CHECK();
}

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

void CudaBackend::relu_forward(float* y, const float* x, int64_t n) {
  if (n <= 0) return;
  relu_forward_kernel<<<blocks_for(n), kThreads, 0, ctx().stream>>>(y, x, n);
  KERNEL_CHECK();
}

void CudaBackend::relu_backward(float* dx, const float* dy, const float* y, int64_t n) {
  if (n <= 0) return;
  relu_backward_kernel<<<blocks_for(n), kThreads, 0, ctx().stream>>>(dx, dy, y, n);
  KERNEL_CHECK();
}

void CudaBackend::dropout(float* y, const float* x, int64_t n_samples, int64_t per_sample,
                          uint64_t seed, uint64_t stream, uint64_t first_sample, float p,
                          float scale) {
  const int64_t n = n_samples * per_sample;
  if (n <= 0) return;
  const uint64_t base = first_sample * uint64_t(per_sample);
  dropout_kernel<<<blocks_for(n), kThreads, 0, ctx().stream>>>(y, x, n, seed, stream, base, p,
                                                               scale);
  KERNEL_CHECK();
}

void CudaBackend::normalize_u8(float* out, const uint8_t* in, const uint8_t* flip, int64_t N,
                               int C, int H, int W, const float* mean, const float* std) {
  CHECK(C >= 1 && C <= kMaxNormChannels, "normalize_u8: ", C, " channels (at most ",
        kMaxNormChannels, ")");
  const int64_t n = N * C * H * W;
  if (n <= 0) return;
  NormStats st{};
  for (int c = 0; c < C; ++c) st.mean[c] = mean[c], st.std[c] = std[c];
  normalize_u8_kernel<<<blocks_for(n), kThreads, 0, ctx().stream>>>(out, in, flip, N, C, H, W,
                                                                    st);
  KERNEL_CHECK();
}

}  // namespace mpicnn::gpu
