// Input batch normalisation on the CUDA backend: 8-bit (N, H, W, C) windows -> normalised,
// optionally mirrored float (N, C, H, W), the arithmetic of src/data/transform.cpp's table, for
// InputStage::put_u8 (src/core/device.h). Not decoding, cropping or resizing (those stay on the
// loader's CPU threads).
#include "common.cuh"

namespace mpicnn::gpu {

namespace {

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

void CudaBackend::normalize_u8(Format f, void* out, const uint8_t* in, const uint8_t* flip,
                               int64_t N, int C, int H, int W, const float* mean,
                               const float* std) {
  if (channels_last(f, "normalize_u8"))
    return normalize_u8_nhwc(f.elem, out, in, flip, N, C, H, W, mean, std);
  CHECK(C >= 1 && C <= kMaxNormChannels, "normalize_u8: ", C, " channels (at most ",
        kMaxNormChannels, ")");
  const int64_t n = N * C * H * W;
  if (n <= 0) return;
  NormStats st{};
  for (int c = 0; c < C; ++c) st.mean[c] = mean[c], st.std[c] = std[c];
  normalize_u8_kernel<<<blocks_for(n), kThreads, 0, ctx().stream>>>(static_cast<float*>(out),
                                                                    in, flip, N, C, H, W, st);
  KERNEL_CHECK();
}

}  // namespace mpicnn::gpu
