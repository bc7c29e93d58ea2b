// The im2col + GEMM convolution (see conv_im2col.h): its plan and its three passes in every
// threading variant (chunks one at a time, side by side, in groups, one GEMM per image).
#include "layers/conv_im2col.h"

#include <omp.h>

#include <algorithm>
#include <climits>
#include <cstring>

#include "core/blas.h"
#include "core/check.h"
#include "core/gemm_bf16.h"

namespace mpicnn {

namespace {

// Chunking: aim for GEMMs at least this many columns wide ...
constexpr int64_t kTargetColumns = 1024;
// ... but keep the column workspace under this many floats (64 MiB).
constexpr int64_t kColumnBudget = int64_t(16) << 20;
// bf16 1x1 layers take one GEMM per image from planes of this many pixels: 28x28 and 14x14
// (784 and 196 columns: whole 48-column panels but a last one of 16) but not 7x7, where 49
// columns would waste most of a second panel and chunking into one GEMM stays faster.
constexpr int64_t kPerImagePlane = 64;

// The weight-gradient sums of a bf16 layer's groups of chunks (grad_groups_): one buffer per
// planning thread, as the workspace, written by every thread of a backward.
thread_local Tensor t_group_grads;

real* group_grads(int64_t floats) {
  if (!t_group_grads.defined() || t_group_grads.numel() < floats)
    t_group_grads = Tensor::empty({std::max<int64_t>(floats, 1)}, Device::CPU);
  return t_group_grads.data();
}

// Small layers: at most this many multiply-adds per image (OC * IC/groups * live taps * OH*OW)
// run their chunks in parallel, each chunk at least kParallelColumns GEMM columns wide, while
// the chunks' weight gradients fit kChunkGradBudget floats. Measured on 2 cores (bench/RESULTS.md,
// 2026-11-25): LeNet trains 1.3x faster so, resnet20 (16-64 channels at 8x8-32x32, up to 2.4M)
// 1.1x (inference 1.16x); resnet18@32's 64-channel layers (38M) gain nothing either way, so the
// line is below them.
constexpr int64_t kSmallImageMacs = int64_t(1) << 25;
constexpr int64_t kParallelColumns = 256;
constexpr int64_t kChunkGradBudget = int64_t(4) << 20;

// Whether `units` of bf16 work (images, chunks of images, groups of them) run side by side,
// each on one thread with single-threaded GEMMs, rather than one at a time on all threads:
// when they share out evenly enough (two or more a thread, or a whole number each). A GEMM of
// one 14x14 or 28x28 image split over the threads packs op(B) twice (a thread per row block)
// or runs in pieces too small for the barriers between them. The same bits either way
// (gemm_bf16's order does not depend on the thread count).
bool side_by_side(int64_t units) {
  const int64_t threads = omp_get_max_threads();
  return threads > 1 && (units >= 2 * threads || units % threads == 0);
}

// body(u) for u in [0, units): side by side where side_by_side says so, else one after the
// other. Not `omp parallel for if (...)`: libgomp runs every region nested in a parallel
// region, active or not, on one thread, and the GEMMs would lose their threads.
template <class F>
void for_units(int64_t units, const F& body) {
  if (side_by_side(units)) {
#pragma omp parallel for schedule(static)
    for (int64_t u = 0; u < units; ++u) body(u);
    return;
  }
  for (int64_t u = 0; u < units; ++u) body(u);
}

// gw[e] += parts[0][e] + parts[1][e] + ..., in part order: G weight-gradient parts of WG floats.
void add_parts(real* gw, const real* parts, int64_t G, int64_t WG) {
#pragma omp parallel for schedule(static) if (WG * G > kConvParallelMin)
  for (int64_t e = 0; e < WG; ++e) {
    real acc = gw[e];
    for (int64_t gi = 0; gi < G; ++gi) acc += parts[gi * WG + e];
    gw[e] = acc;
  }
}

// Groups of images whose weight gradients a bf16 1x1 layer sums apart (weight_grad_per_image).
constexpr int64_t kWgradGroups = 4;

// One image's output (OC, P) set to its bias, for a GEMM that adds onto it (beta = 1).
void fill_bias(real* y, const real* b, int64_t OC, int64_t P) {
#pragma omp parallel for schedule(static) if (OC * P > kConvParallelMin)
  for (int64_t oc = 0; oc < OC; ++oc) std::fill(y + oc * P, y + (oc + 1) * P, b[oc]);
}

}  // namespace

Im2colEngine::Im2colEngine(const ConvSpec& s, const ExecConfig& cfg, Im2colPasses passes)
    : s_(s), precision_(cfg.precision), cols_(s.geo) {
  const ConvGeometry& g = s.geo;
  const bool fp32 = precision_ == Precision::kFp32;
  const int64_t N = s.batch, P = g.out_plane(), rows = cols_.rows();
  int64_t chunk = std::clamp<int64_t>((kTargetColumns + P - 1) / P, 1, N);
  chunk = std::max<int64_t>(1, std::min(chunk, kColumnBudget / (rows * P)));
  // Equal chunks: 16 images and a wanted chunk of 11 give two chunks of 8, not 11 + a narrow 5.
  const int64_t nchunks = (N + chunk - 1) / chunk;
  chunk = (N + nchunks - 1) / nchunks;
  CHECK(chunk * P <= INT_MAX && rows <= INT_MAX, "Conv2d: input (", N, ", ", g.channels, ", ",
        g.height, ", ", g.width, ") is too large for 32-bit GEMM sizes");
  // Small layers run their chunks in parallel (parallel_chunks_), in chunks of at least
  // kParallelColumns columns: a rule on the geometry alone, never on the thread count, so that
  // the weight gradient's summation order, and with it every bit, is the same for any threads.
  const int64_t WG = s.out_channels * (rows / s.groups);
  const int64_t small_chunk = std::min<int64_t>(N, (kParallelColumns + P - 1) / P);
  const int64_t small_chunks = (N + small_chunk - 1) / small_chunk;
  parallel_chunks_ = cfg.parallel_small_convs && WG * P <= kSmallImageMacs && small_chunks >= 2 &&
                     small_chunks * WG <= kChunkGradBudget &&
                     passes != Im2colPasses::kWeightGradBesideWinograd;
  if (parallel_chunks_) {
    chunk = (N + small_chunks - 1) / small_chunks;
    chunk_grads_ = Tensor::empty({small_chunks, WG});
  }
  chunk_ = chunk;
#if !(defined(MPICNN_F64) && MPICNN_F64)
  per_image_ = !fp32 && passes != Im2colPasses::kWeightGradBesideDirect && !parallel_chunks_ &&
               s.groups == 1 && g.is_pointwise() && P >= kPerImagePlane;
#endif
  col_floats_ = (g.is_pointwise() && (chunk == 1 || per_image_)) ? 0 : rows * chunk * P;
  rows_floats_ = chunk > 1 && !per_image_ ? s.out_channels * chunk * P : 0;
  workspace_floats_ = col_floats_ + rows_floats_;
#if !(defined(MPICNN_F64) && MPICNN_F64)
  if (per_image_) {  // the packed weights (W or W^T), or the weight gradient's group sums
    const int oc = int(s.out_channels), ic = int(g.channels);
    workspace_floats_ =
        std::max((std::max(bf16_packed_a_size(oc, ic), bf16_packed_a_size(ic, oc)) + 1) / 2,
                 std::min<int64_t>(N, kWgradGroups) * oc * ic);
  }
#endif
  // bf16 layers in several chunks, not small ones: groups of chunks side by side (see the
  // header), as many as kWgradGroups and kChunkGradBudget allow: again a rule on the geometry
  // alone. float32 keeps one chunk at a time.
  const int64_t chunks = (N + chunk - 1) / chunk;
  if (!fp32 && !parallel_chunks_ && !per_image_ && chunks >= 2)
    grad_groups_ = std::min({chunks, kWgradGroups, kChunkGradBudget / WG});
  if (grad_groups_ < 2) grad_groups_ = 0;
  if (grad_groups_) group_grads(grad_groups_ * WG);
  workspace();  // sized now, so that the step allocates nothing
  if (parallel_chunks_ || grad_groups_) {
#pragma omp parallel
    workspace();  // and every thread's, which runs chunks
  }
  if (!cols_.all_taps_live()) {
    const Shape live{s.out_channels, rows / s.groups};
    live_weight_ = Tensor::empty(live);
    live_grad_ = Tensor::empty(live);
  }
}

std::string Im2colEngine::note() const {
  const std::string precision = precision_name(precision_);
  std::string s = "im2col + " + precision + " GEMM";
  if (per_image_) s += ", one GEMM per image";
  if (parallel_chunks_)
    s += ", " + std::to_string((s_.batch + chunk_ - 1) / chunk_) + " chunks side by side";
  else if (grad_groups_)
    s += ", chunks in " + std::to_string(grad_groups_) + " groups side by side";
  else if (chunk_ > 1)
    s += ", " + std::to_string(chunk_) + " images per GEMM";
  return s;
}

const real* Im2colEngine::gemm_weight(const Tensor& weight) {
  if (cols_.all_taps_live()) return weight.data();
  // (OC, IC/groups, taps) -> (OC, IC/groups, live taps)
  const std::vector<int32_t>& taps = cols_.live_taps();
  const int64_t T = int64_t(taps.size()), KT = s_.geo.taps();
  const int64_t n = s_.out_channels * (s_.geo.channels / s_.groups);
  const real* w = weight.data();
  real* lw = live_weight_.data();
#pragma omp parallel for schedule(static) if (n * T > kConvParallelMin)
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < T; ++j) lw[i * T + j] = w[i * KT + taps[size_t(j)]];
  return lw;
}

void Im2colEngine::forward(Tensor& out, const Tensor& in, const Tensor& weight,
                           const Tensor* bias) {
  const real* b = bias ? bias->data() : nullptr;
  if (per_image_) return forward_per_image(out, in, weight, b);
  const int64_t N = in.size(0);
  const real* w = gemm_weight(weight);  // (OC, Kg)
  const int64_t nchunks = (N + chunk_ - 1) / chunk_;
  if (parallel_chunks_) {
    // Small layer: the chunks run side by side, each on one thread with its own workspace and
    // single-threaded GEMMs (OpenBLAS and Eigen run one thread inside a parallel region).
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < nchunks; ++c) forward_chunk(out, in, w, b, c * chunk_);
  } else if (grad_groups_) {  // bf16: side by side where they share out (grad_groups_)
    for_units(nchunks, [&](int64_t c) { forward_chunk(out, in, w, b, c * chunk_); });
  } else {
    for (int64_t c = 0; c < nchunks; ++c) forward_chunk(out, in, w, b, c * chunk_);
  }
}

void Im2colEngine::forward_chunk(Tensor& out, const Tensor& in, const real* w, const real* b,
                                 int64_t n0) {
  const ConvGeometry& g = s_.geo;
  const int64_t N = in.size(0), OC = s_.out_channels, G = s_.groups;
  const int64_t P = g.out_plane(), OCg = OC / G, Kg = cols_.rows() / G;
  real* const col = workspace();             // (IC*T, chunk*P)
  real* const rows_buf = col + col_floats_;  // (OC, chunk*P)
  const int64_t B = std::min(chunk_, N - n0), BP = B * P;
  const real* x = in.data() + n0 * g.channels * g.in_plane();  // (B, IC, H, W)
  real* y = out.data() + n0 * OC * P;                           // (B, OC, OH, OW)
  const real* cols = x;  // (IC*T, B*P)
  if (!(g.is_pointwise() && B == 1)) {
    cols_.im2col(col, x, B);
    cols = col;
  }
  // A single image's (OC, P) rows are already NCHW: the GEMM writes the output directly,
  // on top of the bias (beta = 1). OpenBLAS passes over C for beta = 0 too, so this is free.
  real* rows = B == 1 ? y : rows_buf;  // (OC, B*P)
  if (B == 1 && b) fill_bias(y, b, OC, P);
  for (int64_t gi = 0; gi < G; ++gi)
    gemm_in(Device::CPU, precision_, false, false, int(OCg), int(BP), int(Kg), 1.f,
            w + gi * OCg * Kg, int(Kg), cols + gi * Kg * BP, int(BP), (B == 1 && b) ? 1.f : 0.f,
            rows + gi * OCg * BP, int(BP));
  if (B > 1) {
#pragma omp parallel for collapse(2) schedule(static) if (OC * BP > kConvParallelMin)
    for (int64_t i = 0; i < B; ++i) {
      for (int64_t oc = 0; oc < OC; ++oc) {
        const real* __restrict s = rows + oc * BP + i * P;
        real* __restrict d = y + (i * OC + oc) * P;
        const real bv = b ? b[oc] : 0.f;
        for (int64_t p = 0; p < P; ++p) d[p] = s[p] + bv;
      }
    }
  }
}

void Im2colEngine::forward_per_image(Tensor& out, const Tensor& in, const Tensor& weight,
                                     const real* b) {
#if !(defined(MPICNN_F64) && MPICNN_F64)
  const int64_t N = in.size(0), OC = s_.out_channels, IC = s_.geo.channels;
  const int64_t P = s_.geo.out_plane();
  bf16_t* pw = reinterpret_cast<bf16_t*>(workspace());
  pack_a_bf16(pw, false, int(OC), int(IC), weight.data(), int(IC));  // W (OC, IC)
  for_units(N, [&](int64_t n) {
    real* y = out.data() + n * OC * P;
    if (b) fill_bias(y, b, OC, P);  // then the GEMM adds onto it, as the one-image chunk
    gemm_bf16_packed_a(pw, int(OC), int(P), int(IC), 1.f, false, in.data() + n * IC * P,
                       int(P), b ? 1.f : 0.f, y, int(P));
  });
#else
  (void)out, (void)in, (void)weight, (void)b;
  FAIL("Conv2d: bf16 in the float64 build");
#endif
}

void Im2colEngine::backward_per_image(Tensor& din, Tensor* gw, const Tensor& dout,
                                      const Tensor& in, const Tensor& weight) {
#if !(defined(MPICNN_F64) && MPICNN_F64)
  const int64_t N = dout.size(0), OC = s_.out_channels, IC = s_.geo.channels;
  const int64_t P = s_.geo.out_plane();
  if (gw) weight_grad_per_image(*gw, dout, in);
  if (!din.defined()) return;
  bf16_t* pw = reinterpret_cast<bf16_t*>(workspace());
  pack_a_bf16(pw, true, int(IC), int(OC), weight.data(), int(IC));  // W^T (IC, OC)
  for_units(N, [&](int64_t n) {
    gemm_bf16_packed_a(pw, int(IC), int(P), int(OC), 1.f, false, dout.data() + n * OC * P,
                       int(P), 0.f, din.data() + n * IC * P, int(P));
  });
#else
  (void)din, (void)gw, (void)dout, (void)in, (void)weight;
  FAIL("Conv2d: bf16 in the float64 build");
#endif
}

// dW (OC, IC) += the sum over images of dy_n (OC, P) * x_n^T. The images go in
// kWgradGroups groups of consecutive images, each group's sum in image order into its own slice
// of the workspace, the groups then added to dW in group order: the groups are fixed by the
// batch alone, so the bits do not depend on the thread count. The groups run side by side
// where side_by_side says so, else one after the other, each GEMM on all threads.
void Im2colEngine::weight_grad_per_image(Tensor& gw, const Tensor& dout, const Tensor& in) {
#if !(defined(MPICNN_F64) && MPICNN_F64)
  const int64_t N = dout.size(0), OC = s_.out_channels, IC = s_.geo.channels;
  const int64_t P = s_.geo.out_plane();
  const int64_t G = std::min<int64_t>(N, kWgradGroups), WG = OC * IC;
  real* const parts = workspace();
  for_units(G, [&](int64_t gi) {
    const int64_t n0 = gi * N / G, n1 = (gi + 1) * N / G;
    for (int64_t n = n0; n < n1; ++n)
      gemm_bf16(false, true, int(OC), int(IC), int(P), 1.f, dout.data() + n * OC * P, int(P),
                in.data() + n * IC * P, int(P), n == n0 ? 0.f : 1.f, parts + gi * WG, int(IC));
  });
  add_parts(gw.data(), parts, G, WG);
#else
  (void)gw, (void)dout, (void)in;
  FAIL("Conv2d: bf16 in the float64 build");
#endif
}

void Im2colEngine::backward(Tensor& din, Tensor* gw, Tensor* gb, const Tensor& dout,
                            const Tensor& in, const Tensor& weight) {
  const ConvGeometry& g = s_.geo;
  const int64_t N = in.size(0), OC = s_.out_channels, G = s_.groups;
  const int64_t Kg = cols_.rows() / G;
  if (gb) conv_bias_grad(*gb, dout);
  if (per_image_) return backward_per_image(din, gw, dout, in, weight);
  const bool wgrad = gw != nullptr, data = din.defined();
  const real* w = data ? gemm_weight(weight) : nullptr;  // (OC, Kg)
  // With dead taps the GEMMs accumulate into the live columns, added to gw at the end.
  const bool live = wgrad && !cols_.all_taps_live();
  if (live) live_grad_.fill(0.f);
  real* gwp = live ? live_grad_.data() : wgrad ? gw->data() : nullptr;  // (OC, Kg)
  const int64_t nchunks = (N + chunk_ - 1) / chunk_;
  if (parallel_chunks_ && (wgrad || data)) {
    // Small layer: the chunks run side by side (see forward). Each chunk's weight gradient goes
    // to its own slice of chunk_grads_, summed into gwp in chunk order below, so the bits do
    // not depend on the thread count.
    real* parts = wgrad ? chunk_grads_.data() : nullptr;
    const int64_t WG = OC * Kg;
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < nchunks; ++c)
      backward_chunk(din, dout, in, w, parts ? parts + c * WG : nullptr, 0.f, data, c * chunk_);
    if (wgrad) add_parts(gwp, parts, nchunks, WG);
  } else if (wgrad && grad_groups_) {
    // bf16: fixed groups of chunks, each group's weight gradient summed in chunk order into its
    // own slice of the group buffer, then added into gwp in group order (same bits for any
    // thread count); the groups side by side when they share out over the threads.
    const int64_t GG = grad_groups_, WG = OC * Kg;
    real* parts = group_grads(GG * WG);
    for_units(GG, [&](int64_t gi) {
      const int64_t c0 = gi * nchunks / GG, c1 = (gi + 1) * nchunks / GG;
      for (int64_t c = c0; c < c1; ++c)
        backward_chunk(din, dout, in, w, parts + gi * WG, c == c0 ? 0.f : 1.f, data, c * chunk_);
    });
    add_parts(gwp, parts, GG, WG);
  } else if (wgrad || data) {
    for (int64_t c = 0; c < nchunks; ++c)
      backward_chunk(din, dout, in, w, gwp, 1.f, data, c * chunk_);
  }
  if (live) {
    const std::vector<int32_t>& taps = cols_.live_taps();
    const int64_t T = int64_t(taps.size()), KT = g.taps(), n = OC * (g.channels / G);
    const real* lg = live_grad_.data();
    real* dst = gw->data();
#pragma omp parallel for schedule(static) if (n * T > kConvParallelMin)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < T; ++j) dst[i * KT + taps[size_t(j)]] += lg[i * T + j];
  }
}

// One chunk of backward from image n0: gw (OC, Kg) '= beta * gw +' the chunk's weight gradient
// (skipped when null), and din's images '=' their gradient when data.
void Im2colEngine::backward_chunk(Tensor& din, const Tensor& dout, const Tensor& in, const real* w,
                                  real* gw, real beta, bool data, int64_t n0) {
  const ConvGeometry& g = s_.geo;
  const int64_t N = in.size(0), OC = s_.out_channels, G = s_.groups;
  const int64_t P = g.out_plane(), OCg = OC / G, Kg = cols_.rows() / G;
  const int64_t B = std::min(chunk_, N - n0), BP = B * P;
  real* const col = workspace();             // (IC*T, chunk*P)
  real* const rows_buf = col + col_floats_;  // (OC, chunk*P)
  const int64_t x_off = n0 * g.channels * g.in_plane();
  const real* x = in.data() + x_off;           // (B, IC, H, W)
  const real* dy = dout.data() + n0 * OC * P;  // (B, OC, OH, OW)
  const real* rows = dy;                       // (OC, B*P)
  if (B > 1) {
    real* r = rows_buf;
#pragma omp parallel for collapse(2) schedule(static) if (OC * BP > kConvParallelMin)
    for (int64_t i = 0; i < B; ++i)
      for (int64_t oc = 0; oc < OC; ++oc)
        std::memcpy(r + oc * BP + i * P, dy + (i * OC + oc) * P, size_t(P) * sizeof(real));
    rows = r;
  }
  const bool direct = g.is_pointwise() && B == 1;
  if (gw) {
    const real* cols = x;  // (IC*T, B*P)
    if (!direct) {
      cols_.im2col(col, x, B);
      cols = col;
    }
    for (int64_t gi = 0; gi < G; ++gi)
      gemm_in(Device::CPU, precision_, false, true, int(OCg), int(Kg), int(BP), 1.f,
              rows + gi * OCg * BP, int(BP), cols + gi * Kg * BP, int(BP), beta, gw + gi * OCg * Kg,
              int(Kg));
  }
  if (!data) return;
  // The columns are spent: their buffer takes the column gradient (pointwise: din itself).
  real* dx = din.data() + x_off;   // (B, IC, H, W)
  real* dcol = direct ? dx : col;  // (IC*T, B*P)
  for (int64_t gi = 0; gi < G; ++gi)
    gemm_in(Device::CPU, precision_, true, false, int(Kg), int(BP), int(OCg), 1.f,
            w + gi * OCg * Kg, int(Kg), rows + gi * OCg * BP, int(BP), 0.f, dcol + gi * Kg * BP,
            int(BP));
  if (!direct) cols_.col2im(dx, dcol, B);
}

}  // namespace mpicnn
