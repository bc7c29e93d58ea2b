// Winograd F(2x2, 3x3): the transforms (B^T d B of each 4x4 input tile, G g G^T of each filter,
// A^T m A back to each 2x2 output tile) and the 16 GEMMs between them. Tiles of a plane row go
// through the transforms together (loops over the tile column vectorise); rows of input with
// their padding are staged in a small per-thread buffer, so the tile loops have no bounds checks.
#include "layers/winograd.h"

#include <algorithm>
#include <vector>

#include "core/blas.h"
#include "core/check.h"

namespace mpicnn {

namespace {

constexpr int64_t kParallelMin = 1 << 14;  // elements below which a loop runs on one thread

}  // namespace

bool winograd_fits(const ConvGeometry& g, int groups) {
  return groups == 1 && g.kernel_h == 3 && g.kernel_w == 3 && g.stride_h == 1 &&
         g.stride_w == 1 && g.dilation_h == 1 && g.dilation_w == 1 && g.pad_h <= 2 &&
         g.pad_w <= 2 && g.out_h >= 1 && g.out_w >= 1;
}

void winograd_weights(real* U, const real* w, int64_t K, int64_t C, bool transposed) {
  const int64_t KC = K * C;
#pragma omp parallel for schedule(static) if (KC * 16 > kParallelMin)
  for (int64_t kc = 0; kc < KC; ++kc) {
    const int64_t k = kc / C, c = kc % C;
    const real* f = w + kc * 9;
    real g[3][3];
    for (int a = 0; a < 3; ++a)
      for (int b = 0; b < 3; ++b) g[a][b] = transposed ? f[(2 - a) * 3 + (2 - b)] : f[a * 3 + b];
    real t[4][3];  // G g
    for (int b = 0; b < 3; ++b) {
      t[0][b] = g[0][b];
      t[1][b] = real(0.5) * (g[0][b] + g[1][b] + g[2][b]);
      t[2][b] = real(0.5) * (g[0][b] - g[1][b] + g[2][b]);
      t[3][b] = g[2][b];
    }
    // (G g) G^T, stored at U[e][k][c] (or U[e][c][k] transposed), e = 4 * row + column.
    const int64_t at = transposed ? c * K + k : k * C + c;
    for (int a = 0; a < 4; ++a) {
      U[(a * 4 + 0) * KC + at] = t[a][0];
      U[(a * 4 + 1) * KC + at] = real(0.5) * (t[a][0] + t[a][1] + t[a][2]);
      U[(a * 4 + 2) * KC + at] = real(0.5) * (t[a][0] - t[a][1] + t[a][2]);
      U[(a * 4 + 3) * KC + at] = t[a][2];
    }
  }
}

WinogradConv::WinogradConv(int64_t C, int64_t K, int64_t H, int64_t W, int64_t pad_h,
                           int64_t pad_w, int64_t N, int64_t budget)
    : C_(C), K_(K), H_(H), W_(W), ph_(pad_h), pw_(pad_w) {
  OH_ = H + 2 * pad_h - 2;
  OW_ = W + 2 * pad_w - 2;
  CHECK(OH_ >= 1 && OW_ >= 1, "Winograd: input ", H, "x", W, " too small for a 3x3 kernel");
  th_ = (OH_ + 1) / 2;
  tw_ = (OW_ + 1) / 2;
  tiles_ = th_ * tw_;
  const int64_t per_image = 16 * (C + K) * tiles_;
  chunk_ = std::clamp<int64_t>((budget - 16 * K * C) / per_image, 1, N);
  const int64_t nchunks = (N + chunk_ - 1) / chunk_;
  chunk_ = (N + nchunks - 1) / nchunks;  // equal chunks
}

void WinogradConv::forward(real* y, const real* x, const real* bias, int64_t N, real* ws) const {
  const real* U = ws;                  // (16, K, C)
  real* V = ws + 16 * K_ * C_;         // (16, C, B*tiles)
  real* M = V + 16 * C_ * chunk_ * tiles_;  // (16, K, B*tiles)
  const int64_t C = C_, K = K_, H = H_, W = W_, th = th_, tw = tw_, OH = OH_, OW = OW_;
  const int64_t row = 2 * tw + 2;  // staged input row: columns -pw .. 2*tw + 1 - pw
  for (int64_t n0 = 0; n0 < N; n0 += chunk_) {
    const int64_t B = std::min(chunk_, N - n0), T = B * tiles_;
    // Input transform: V[e][c][t] = (B^T d B)[e] for the 4x4 tile d of tile t in plane c.
#pragma omp parallel if (C * B * tiles_ * 16 > kParallelMin)
    {
      std::vector<real> stage(size_t(4 * row));
#pragma omp for collapse(2) schedule(static)
      for (int64_t c = 0; c < C; ++c) {
        for (int64_t b = 0; b < B; ++b) {
          const real* xp = x + ((n0 + b) * C + c) * H * W;
          for (int64_t i = 0; i < th; ++i) {
            for (int r = 0; r < 4; ++r) {
              real* s = stage.data() + r * row;
              const int64_t yy = 2 * i - ph_ + r;
              if (yy < 0 || yy >= H) {
                std::fill(s, s + row, real(0));
                continue;
              }
              for (int64_t q = 0; q < row; ++q) {
                const int64_t xx = q - pw_;
                s[q] = (xx >= 0 && xx < W) ? xp[yy * W + xx] : real(0);
              }
            }
            const real* s0 = stage.data();
            const real* s1 = s0 + row;
            const real* s2 = s1 + row;
            const real* s3 = s2 + row;
            real* v = V + c * T + b * tiles_ + i * tw;
            const int64_t es = C * T;  // stride between the 16 matrices
#pragma omp simd
            for (int64_t j = 0; j < tw; ++j) {
              real d[4][4];
              for (int q = 0; q < 4; ++q) {
                d[0][q] = s0[2 * j + q];
                d[1][q] = s1[2 * j + q];
                d[2][q] = s2[2 * j + q];
                d[3][q] = s3[2 * j + q];
              }
              real t[4][4];  // B^T d
              for (int q = 0; q < 4; ++q) {
                t[0][q] = d[0][q] - d[2][q];
                t[1][q] = d[1][q] + d[2][q];
                t[2][q] = d[2][q] - d[1][q];
                t[3][q] = d[1][q] - d[3][q];
              }
              for (int a = 0; a < 4; ++a) {  // (B^T d) B
                v[(a * 4 + 0) * es + j] = t[a][0] - t[a][2];
                v[(a * 4 + 1) * es + j] = t[a][1] + t[a][2];
                v[(a * 4 + 2) * es + j] = t[a][2] - t[a][1];
                v[(a * 4 + 3) * es + j] = t[a][1] - t[a][3];
              }
            }
          }
        }
      }
    }
    // M_e (K, T) = U_e (K, C) * V_e (C, T), for the 16 elements e.
    for (int e = 0; e < 16; ++e)
      gemm(false, false, int(K), int(T), int(C), real(1), U + e * K * C, int(C), V + e * C * T,
           int(T), real(0), M + e * K * T, int(T));
    // Output transform: y tile = A^T m A (+ bias), cropped to OH x OW.
#pragma omp parallel for collapse(2) schedule(static) if (K * B * tiles_ * 16 > kParallelMin)
    for (int64_t k = 0; k < K; ++k) {
      for (int64_t b = 0; b < B; ++b) {
        real* yp = y + ((n0 + b) * K + k) * OH * OW;
        const real bv = bias ? bias[k] : real(0);
        const int64_t es = K * T;
        for (int64_t i = 0; i < th; ++i) {
          const real* m = M + k * T + b * tiles_ + i * tw;
          real* r0 = yp + (2 * i) * OW;
          real* r1 = 2 * i + 1 < OH ? r0 + OW : nullptr;
          // Full tiles (both columns inside), vectorised; an odd width's last tile after.
          const int64_t full = OW / 2;
          auto tile = [&](int64_t j, real out[2][2]) {
            real t[2][4];  // A^T m
            for (int q = 0; q < 4; ++q) {
              const real m0 = m[(0 * 4 + q) * es + j], m1 = m[(1 * 4 + q) * es + j];
              const real m2 = m[(2 * 4 + q) * es + j], m3 = m[(3 * 4 + q) * es + j];
              t[0][q] = m0 + m1 + m2;
              t[1][q] = m1 - m2 - m3;
            }
            for (int a = 0; a < 2; ++a) {
              out[a][0] = t[a][0] + t[a][1] + t[a][2] + bv;
              out[a][1] = t[a][1] - t[a][2] - t[a][3] + bv;
            }
          };
#pragma omp simd
          for (int64_t j = 0; j < full; ++j) {
            real o[2][2];
            tile(j, o);
            r0[2 * j] = o[0][0];
            r0[2 * j + 1] = o[0][1];
            if (r1) {
              r1[2 * j] = o[1][0];
              r1[2 * j + 1] = o[1][1];
            }
          }
          if (full < tw) {
            real o[2][2];
            tile(full, o);
            r0[2 * full] = o[0][0];
            if (r1) r1[2 * full] = o[1][0];
          }
        }
      }
    }
  }
}

}  // namespace mpicnn
