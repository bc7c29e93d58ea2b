// Dropout of the CUDA backend (src/layers/dropout.cpp): the mask is Philox on (seed, stream,
// element index), the CPU's draw bit for bit, recomputed in backward rather than stored. Not
// cuDNN's dropout, whose masks could not match the CPU's.
#include "typed.cuh"

namespace mpicnn::gpu {

namespace {

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

// dropout_kernel on an NHWC tensor of type T: element e = ((n * H + h) * W + w) * C + c draws
// with its NCHW index n * per + (c * H + h) * W + w (per = C * H * W), as the CPU's mask.
template <Elem T>
__global__ void dropout_nhwc_kernel(storage_t<T>* y, const storage_t<T>* x, int64_t n,
                                    int64_t C, int64_t H, int64_t W, uint64_t seed,
                                    uint64_t stream, uint64_t base, float p, float scale) {
  const int64_t HW = H * W, per = C * HW;
  for (int64_t e = global_index(); e < n; e += grid_stride()) {
    const int64_t c = e % C, pix = e / C, s = pix / HW, hw = pix % HW;
    const uint32_t bits = philox_word0(seed, stream, base + uint64_t(s * per + c * HW + hw));
    const float u = __fmul_rn(float(bits >> 8), 1.0f / 16777216.0f);
    y[e] = from_float<storage_t<T>>(u >= p ? __fmul_rn(to_float(x[e]), scale) : 0.f);
  }
}

}  // namespace

void CudaBackend::dropout_nhwc(Elem t, void* y, const void* x, int64_t N, int64_t C, int64_t H,
                               int64_t W, uint64_t seed, uint64_t stream, uint64_t first_sample,
                               float p, float scale) {
  const int64_t n = N * C * H * W;
  if (n <= 0) return;
  const uint64_t base = first_sample * uint64_t(C * H * W);
  with_elem(t, [&](auto T) {
    using S = storage_t<decltype(T)::value>;
    dropout_nhwc_kernel<decltype(T)::value><<<blocks_for(n), kThreads, 0, ctx().stream>>>(
        static_cast<S*>(y), static_cast<const S*>(x), n, C, H, W, seed, stream, base, p, scale);
    KERNEL_CHECK();
  });
}

void CudaBackend::dropout(Format f, void* y, const void* x, int64_t N, int64_t C, int64_t H,
                          int64_t W, uint64_t seed, uint64_t stream, uint64_t first_sample,
                          float p, float scale) {
  if (channels_last(f, "dropout"))
    return dropout_nhwc(f.elem, y, x, N, C, H, W, seed, stream, first_sample, p, scale);
  const int64_t per_sample = C * H * W, n = N * per_sample;
  if (n <= 0) return;
  const uint64_t base = first_sample * uint64_t(per_sample);
  dropout_kernel<<<blocks_for(n), kThreads, 0, ctx().stream>>>(
      static_cast<float*>(y), static_cast<const float*>(x), n, seed, stream, base, p, scale);
  KERNEL_CHECK();
}

}  // namespace mpicnn::gpu
