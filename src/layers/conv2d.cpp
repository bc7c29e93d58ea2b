// Conv2d on CPU. Ungrouped layers run the direct kernels (layers/conv_direct.h) by default; the
// im2col path here is the reference and the fallback (grouped layers, the float64 build,
// MPICNN_CONV=im2col). Per chunk of images: im2col into one column matrix, then per group
//   forward          rows (OCg, B*P)  = W_g (OCg, Kg) * col_g (Kg, B*P)
//   backward weight  dW_g (OCg, Kg)  += dy_g (OCg, B*P) * col_g^T
//   backward data    dcol_g (Kg, B*P) = W_g^T * dy_g, then col2im
// with P = OH*OW and Kg = IC/groups*T, T the kernel taps that read any input pixel (taps that
// only ever read padding are dropped: see ColumnPlan in im2col.h). Chunking several images
// into one GEMM keeps the GEMMs wide for deep layers with tiny planes (7x7); the rows buffer
// converts between the GEMM's (OC, B*P) layout and NCHW. OpenMP parallelises the loops here,
// OpenBLAS the GEMMs; small layers instead run their chunks side by side, one thread per chunk
// (Conv2d::parallel_chunks). Under bf16 (core/precision.h) an ungrouped layer on a CPU
// with AVX512-BF16 runs forward and the input gradient on the direct kernels in bf16
// (vdpbf16ps; layers/conv_direct.h), and the weight gradient there too where
// DirectConv::bf16_weight_grad() (stride 1, rows of 8+), else on this path's bf16 GEMMs; 1x1
// layers stay on this path but in inference plans (MPICNN_CONV_BF16=im2col opts out of the
// direct kernels). The others take this path, all three GEMMs in bf16 (emulated without
// AVX512-BF16); there a 1x1 layer with planes of 64+ pixels runs all three as one GEMM per
// image (forward and the input gradient on weights packed once; Conv2d::per_image_), without
// the column and rows copies, an image per thread; bf16 layers in several chunks run them side
// by side too (Conv2d::grad_groups_). Winograd is float32 only.
// Over 500 lines: the im2col path's plan and its three passes in every threading variant (chunks
// one at a time, side by side, in groups, one GEMM per image) share the workspace and chunk
// invariants; the implementations' classes (issue 61) will split it by implementation.
#include "layers/conv2d.h"

#include <omp.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/blas.h"
#include "core/gpu.h"
#include "core/mutant.h"
#include "core/rng.h"

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
// Below this many elements a loop runs on one thread (fork/join would cost more).
constexpr int64_t kParallelMin = 1 << 15;

// Every Conv2d's columns and rows live in one workspace per thread, sized by plan() for the
// largest layer: a layer's columns are dead once its GEMMs have run (backward recomputes
// them), so the layers can take turns. Per thread, because tests run several ranks' models as
// threads of one process. Only a layer planned on another thread than it runs on grows it
// during a step.
thread_local Tensor t_workspace;

real* workspace(int64_t floats) {
  if (!t_workspace.defined() || t_workspace.numel() < floats)
    t_workspace = Tensor::empty({std::max<int64_t>(floats, 1)}, Device::CPU);
  return t_workspace.data();
}

// The weight-gradient sums of a bf16 layer's groups of chunks (Conv2d::grad_groups_): one
// buffer per planning thread, as the workspace, written by every thread of a backward.
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

// Floats Winograd's chunks may take (its weights included): 32 MiB.
constexpr int64_t kWinogradBudget = int64_t(8) << 20;

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
#pragma omp parallel for schedule(static) if (WG * G > kParallelMin)
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
#pragma omp parallel for schedule(static) if (OC * P > kParallelMin)
  for (int64_t oc = 0; oc < OC; ++oc) std::fill(y + oc * P, y + (oc + 1) * P, b[oc]);
}

}  // namespace

real* Conv2d::workspace_base() { return workspace(workspace_floats_); }

Conv2d::Conv2d(const Conv2dOptions& o) : opt_(o) {
  CHECK(o.in_channels >= 1 && o.out_channels >= 1, "Conv2d: channels must be >= 1, got ",
        o.in_channels, " -> ", o.out_channels);
  CHECK(o.groups >= 1, "Conv2d: groups must be >= 1, got ", o.groups);
  CHECK(o.in_channels % o.groups == 0 && o.out_channels % o.groups == 0,
        "Conv2d: in_channels (", o.in_channels, ") and out_channels (", o.out_channels,
        ") must both be divisible by groups (", o.groups, ")");
  CHECK(o.kernel.h >= 1 && o.kernel.w >= 1, "Conv2d: kernel must be >= 1, got ", o.kernel.h,
        "x", o.kernel.w);
  CHECK(o.stride.h >= 1 && o.stride.w >= 1, "Conv2d: stride must be >= 1, got ", o.stride.h,
        "x", o.stride.w);
  CHECK(o.padding.h >= 0 && o.padding.w >= 0, "Conv2d: padding must be >= 0, got ",
        o.padding.h, "x", o.padding.w);
  CHECK(o.dilation.h >= 1 && o.dilation.w >= 1, "Conv2d: dilation must be >= 1, got ",
        o.dilation.h, "x", o.dilation.w);
}

void Conv2d::register_state(ParamStore& store, const std::string& prefix) {
  weight_name_ = prefix + "weight";
  store.param(weight_name_,
              {opt_.out_channels, opt_.in_channels / opt_.groups, opt_.kernel.h, opt_.kernel.w},
              &weight, &grad_weight);
  if (opt_.bias) {
    bias_name_ = prefix + "bias";
    store.param(bias_name_, {opt_.out_channels}, &bias, &grad_bias, /*decay=*/false);
  }
}

void Conv2d::reset_parameters(uint64_t seed) {
  CHECK(weight.defined(), "Conv2d: parameters not allocated (ParamStore::allocate)");
  const int64_t fan_in = int64_t(opt_.in_channels / opt_.groups) * opt_.kernel.h * opt_.kernel.w;
  const real bound = 1.0f / std::sqrt(real(fan_in));
  fill_uniform(Rng(seed, weight_name_), weight.data(), weight.numel(), -bound, bound);
  if (opt_.bias) fill_uniform(Rng(seed, bias_name_), bias.data(), bias.numel(), -bound, bound);
}

ConvGeometry Conv2d::geometry_for(const Shape& in) const {
  CHECK(in.ndim == 4 && in[1] == opt_.in_channels, "Conv2d(", opt_.in_channels, " -> ",
        opt_.out_channels, "): input must be (N, ", opt_.in_channels, ", H, W), got ", in.str());
  ConvGeometry g;
  g.channels = in[1];
  g.height = in[2];
  g.width = in[3];
  g.kernel_h = opt_.kernel.h, g.kernel_w = opt_.kernel.w;
  g.stride_h = opt_.stride.h, g.stride_w = opt_.stride.w;
  g.pad_h = opt_.padding.h, g.pad_w = opt_.padding.w;
  g.dilation_h = opt_.dilation.h, g.dilation_w = opt_.dilation.w;
  // Floor division on a possibly negative numerator: the check below rejects those anyway.
  const int64_t span_h = g.dilation_h * (g.kernel_h - 1) + 1;
  const int64_t span_w = g.dilation_w * (g.kernel_w - 1) + 1;
  const int64_t num_h = g.height + 2 * g.pad_h - span_h, num_w = g.width + 2 * g.pad_w - span_w;
  CHECK(num_h >= 0 && num_w >= 0, "Conv2d: input ", g.height, "x", g.width, " with padding ",
        g.pad_h, "x", g.pad_w, " is smaller than the dilated kernel ", span_h, "x", span_w);
  g.out_h = num_h / g.stride_h + 1;
  g.out_w = num_w / g.stride_w + 1;
  return g;
}

Shape Conv2d::output_shape(const Shape& in) const {
  const ConvGeometry g = geometry_for(in);
  return {in[0], opt_.out_channels, g.out_h, g.out_w};
}

void Conv2d::plan(const Shape& in, const ExecConfig& cfg) {
  const ConvGeometry g = geometry_for(in);
  CHECK(in[0] >= 1, "Conv2d: plan needs a batch of at least 1, got ", in.str());
  ColumnPlan cols(g);
  const int64_t N = in[0], P = g.out_plane(), rows = cols.rows();
  int64_t chunk = std::clamp<int64_t>((kTargetColumns + P - 1) / P, 1, N);
  chunk = std::max<int64_t>(1, std::min(chunk, kColumnBudget / (rows * P)));
  // Equal chunks: 16 images and a wanted chunk of 11 give two chunks of 8, not 11 + a narrow 5.
  const int64_t nchunks = (N + chunk - 1) / chunk;
  chunk = (N + nchunks - 1) / nchunks;
  CHECK(chunk * P <= INT_MAX && rows <= INT_MAX,
        "Conv2d: input ", in.str(), " is too large for 32-bit GEMM sizes");
  geo_ = g;
  cols_ = std::move(cols);
  planned_ = in;
  chunk_ = chunk;
  precision_ = cfg.precision;
  computed_by_owner_ = false;
  choice_ = choose_conv(g, opt_.groups, cfg);
  gpu_plan_.reset();
  direct_ = DirectConv();
  use_winograd_ = parallel_chunks_ = per_image_ = false;
  grad_groups_ = col_floats_ = rows_floats_ = 0;
  chunk_grads_ = live_weight_ = live_grad_ = Tensor();
  switch (choice_.impl) {
    case ConvImpl::kCudnn: return plan_cudnn(cfg);
    case ConvImpl::kDirect: return plan_direct(cfg);
    case ConvImpl::kDirectForward:  // the direct kernels, and the weight gradient on im2col
      plan_direct(cfg);
      return plan_im2col(cfg);
    case ConvImpl::kWinograd:
    case ConvImpl::kIm2col: return plan_im2col(cfg);
  }
}

void Conv2d::plan_cudnn(const ExecConfig& cfg) {
  const ConvGeometry& g = geo_;
  gpu_format_ = cfg.format_for(planned_);
  gpu_plan_ = gpu::backend().conv_plan(g, planned_[0], opt_.out_channels, opt_.groups, gpu_format_,
                                       cfg.precision, cfg.deterministic);
  gpu_weight_ = gpu_grad_weight_ = Tensor();
  if (!gpu_format_.plain()) {
    const Shape w = {opt_.out_channels, g.channels / opt_.groups, g.kernel_h, g.kernel_w};
    gpu_weight_ = Tensor::empty(w, Device::CUDA, gpu_format_);
    gpu_grad_weight_ = Tensor::empty(w, Device::CUDA, gpu_format_);
  }
}

// All three passes on the direct kernels (kDirect): no columns, rows or chunks of images; or
// (kDirectForward) forward and the input gradient, plan_im2col then planning the weight gradient.
void Conv2d::plan_direct(const ExecConfig& cfg) {
  direct_ = DirectConv(geo_, opt_.out_channels, planned_[0], precision_ != Precision::kFp32, cfg.isa);
  CHECK(direct_weight_grad() == (choice_.impl == ConvImpl::kDirect),
        "Conv2d: the direct kernels' plan disagrees with choose_conv (internal error)");
  if (choice_.impl != ConvImpl::kDirect) return;  // plan_im2col sizes the workspace
  workspace_floats_ = direct_.workspace_floats();
  workspace_base();  // sized now, so that the step allocates nothing
}

// The im2col + GEMM path: chunks of images (side by side for small layers, in groups for bf16),
// or one GEMM per image (bf16 1x1 layers of large planes); Winograd's workspaces.
void Conv2d::plan_im2col(const ExecConfig& cfg) {
  const ConvGeometry& g = geo_;
  const bool fp32 = precision_ == Precision::kFp32;
  const int64_t N = planned_[0], P = g.out_plane(), rows = cols_.rows();
  int64_t chunk = chunk_;
  use_winograd_ = choice_.impl == ConvImpl::kWinograd;
  // Small layers run their chunks in parallel (parallel_chunks_), in chunks of at least
  // kParallelColumns columns: a rule on the geometry alone, never on the thread count, so that
  // the weight gradient's summation order, and with it every bit, is the same for any threads.
  const int64_t WG = opt_.out_channels * (rows / opt_.groups);
  const int64_t small_chunk = std::min<int64_t>(N, (kParallelColumns + P - 1) / P);
  const int64_t small_chunks = (N + small_chunk - 1) / small_chunk;
  parallel_chunks_ = cfg.parallel_small_convs && WG * P <= kSmallImageMacs && small_chunks >= 2 &&
                     small_chunks * WG <= kChunkGradBudget && !use_winograd_;
  if (parallel_chunks_) {
    chunk = (N + small_chunks - 1) / small_chunks;
    chunk_grads_ = Tensor::empty({small_chunks, WG});
  } else {
    chunk_grads_ = Tensor();
  }
  chunk_ = chunk;
#if !(defined(MPICNN_F64) && MPICNN_F64)
  per_image_ = !fp32 && !direct_.planned() && !parallel_chunks_ && opt_.groups == 1 &&
               g.is_pointwise() && P >= kPerImagePlane;
#endif
  col_floats_ = (g.is_pointwise() && (chunk == 1 || per_image_)) ? 0 : rows * chunk * P;
  rows_floats_ = chunk > 1 && !per_image_ ? opt_.out_channels * chunk * P : 0;
  workspace_floats_ = col_floats_ + rows_floats_;
#if !(defined(MPICNN_F64) && MPICNN_F64)
  if (per_image_) {  // the packed weights (W or W^T), or the weight gradient's group sums
    const int oc = int(opt_.out_channels), ic = int(g.channels);
    workspace_floats_ =
        std::max((std::max(bf16_packed_a_size(oc, ic), bf16_packed_a_size(ic, oc)) + 1) / 2,
                 std::min<int64_t>(N, kWgradGroups) * oc * ic);
  }
#endif
  if (direct_.planned())
    workspace_floats_ = std::max(workspace_floats_, direct_.workspace_floats());
  if (use_winograd_) {
    wino_fwd_ = WinogradConv(g.channels, opt_.out_channels, g.height, g.width, g.pad_h, g.pad_w,
                             N, kWinogradBudget);
    wino_bwd_ = WinogradConv(opt_.out_channels, g.channels, g.out_h, g.out_w, 2 - g.pad_h,
                             2 - g.pad_w, N, kWinogradBudget);
    workspace_floats_ = std::max({workspace_floats_, wino_fwd_.workspace_floats(),
                                  wino_bwd_.workspace_floats()});
  }
  // bf16 layers in several chunks, not small ones: groups of chunks side by side (see the
  // header), as many as kWgradGroups and kChunkGradBudget allow: again a rule on the geometry
  // alone. float32 keeps one chunk at a time.
  const int64_t chunks = (N + chunk - 1) / chunk;
  grad_groups_ = 0;
  if (!fp32 && !parallel_chunks_ && !per_image_ && !use_winograd_ && chunks >= 2)
    grad_groups_ = std::min({chunks, kWgradGroups, kChunkGradBudget / WG});
  if (grad_groups_ < 2) grad_groups_ = 0;
  if (grad_groups_) group_grads(grad_groups_ * WG);
  workspace_base();  // sized now, so that the step allocates nothing
  if (parallel_chunks_ || grad_groups_) {
#pragma omp parallel
    workspace_base();  // and every thread's, which runs chunks
  }
  if (cols_.all_taps_live()) {
    live_weight_ = live_grad_ = Tensor();
  } else {
    const Shape live{opt_.out_channels, rows / opt_.groups};
    live_weight_ = Tensor::empty(live);
    live_grad_ = Tensor::empty(live);
  }
}

std::string Conv2d::plan_note() const {
  const std::string precision = precision_name(precision_);
  if (computed_by_owner_) return precision + " GEMM run by its block";
  if (planned_.ndim == 0) return "not planned";
  if (gpu_plan_) return "cuDNN " + std::string(format_name(gpu_format_)) + ", " + precision;
  const std::string isa = direct_.isa();
  if (direct_weight_grad()) return "direct " + isa + " " + precision;
  std::string s;
  if (direct_.planned())
    s = "direct " + isa + " " + precision + " forward and input gradient, weight gradient on ";
  s += use_winograd_ ? "winograd + im2col" : "im2col";
  s += " + " + precision + " GEMM";
  if (per_image_) s += ", one GEMM per image";
  if (parallel_chunks_)
    s += ", " + std::to_string((planned_[0] + chunk_ - 1) / chunk_) + " chunks side by side";
  else if (grad_groups_)
    s += ", chunks in " + std::to_string(grad_groups_) + " groups side by side";
  else if (chunk_ > 1)
    s += ", " + std::to_string(chunk_) + " images per GEMM";
  if (direct_.planned()) s += " (the direct bf16 weight gradient needs stride 1, rows of 8+)";
  else if (choice_.why_not_direct) s += std::string(" (not direct: ") + choice_.why_not_direct + ")";
  return s;
}

const real* Conv2d::gemm_weight() {
  if (cols_.all_taps_live()) return weight.data();
  // (OC, IC/groups, taps) -> (OC, IC/groups, live taps)
  const std::vector<int32_t>& taps = cols_.live_taps();
  const int64_t T = int64_t(taps.size()), KT = geo_.taps();
  const int64_t n = opt_.out_channels * (opt_.in_channels / opt_.groups);
  const real* w = weight.data();
  real* lw = live_weight_.data();
#pragma omp parallel for schedule(static) if (n * T > kParallelMin)
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < T; ++j) lw[i * T + j] = w[i * KT + taps[size_t(j)]];
  return lw;
}

void Conv2d::check_ready(const Tensor& in) const {
  CHECK(weight.defined(), "Conv2d: parameters not allocated (ParamStore::allocate)");
  CHECK(planned_.ndim == 4, "Conv2d: call plan() before forward/backward");
  CHECK(in.dim() == 4 && in.size(1) == planned_[1] && in.size(2) == planned_[2] &&
            in.size(3) == planned_[3] && in.size(0) >= 1 && in.size(0) <= planned_[0],
        "Conv2d: input ", in.shape().str(), " does not fit the plan for ", planned_.str(),
        " (same C, H, W and at most ", planned_[0], " images)");
}


void Conv2d::forward(Tensor& out, const Tensor& in) {
  check_ready(in);
  const ConvGeometry& g = geo_;
  const int64_t N = in.size(0), OC = opt_.out_channels;
  CHECK_SHAPE(out, {N, OC, g.out_h, g.out_w});
  if (on_gpu_as("Conv2d", gpu_format_, {&out, &in}, {&weight})) {
    CHECK(gpu_plan_, "Conv2d: planned on the CPU, called with GPU tensors");
    if (!gpu_format_.plain()) {  // the typed KRSC copy of this step's weights, then the bias
      gpu::Backend& be = gpu::backend();
      const Shape& w = gpu_weight_.shape();
      be.convert(gpu_weight_.raw(), gpu_format_, weight.data(), Format{}, w[0], w[1], w[2], w[3],
                 /*accumulate=*/false);
      be.conv_forward(*gpu_plan_, out.raw(), in.raw(), gpu_weight_.raw(), nullptr, int(N));
      if (opt_.bias)
        be.add_bias_nhwc(gpu_format_.elem, out.raw(), bias.data(), N * g.out_plane(), OC);
      return;
    }
    gpu::backend().conv_forward(*gpu_plan_, out.data(), in.data(), weight.data(),
                                opt_.bias ? bias.data() : nullptr, int(N));
    return;
  }
  const real* b = opt_.bias ? bias.data() : nullptr;
  if (direct_.planned()) {
    direct_.forward(out.data(), in.data(), weight.data(), b, N, workspace_base());
    return;
  }
  if (use_winograd_) {
    real* ws = workspace_base();
    winograd_weights(ws, weight.data(), OC, g.channels, /*transposed=*/false);
    wino_fwd_.forward(out.data(), in.data(), b, N, ws);
    return;
  }
  if (per_image_) return forward_per_image(out, in, b);
  const real* w = gemm_weight();  // (OC, Kg)
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

void Conv2d::forward_chunk(Tensor& out, const Tensor& in, const real* w, const real* b,
                           int64_t n0) {
  const ConvGeometry& g = geo_;
  const int64_t N = in.size(0), OC = opt_.out_channels, G = opt_.groups;
  const int64_t P = g.out_plane(), OCg = OC / G, Kg = cols_.rows() / G;
  real* const col = workspace_base();  // (IC*T, chunk*P)
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
#pragma omp parallel for collapse(2) schedule(static) if (OC * BP > kParallelMin)
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

void Conv2d::forward_per_image(Tensor& out, const Tensor& in, const real* b) {
#if !(defined(MPICNN_F64) && MPICNN_F64)
  const int64_t N = in.size(0), OC = opt_.out_channels, IC = geo_.channels, P = geo_.out_plane();
  bf16_t* pw = reinterpret_cast<bf16_t*>(workspace_base());
  pack_a_bf16(pw, false, int(OC), int(IC), weight.data(), int(IC));  // W (OC, IC)
  for_units(N, [&](int64_t n) {
    real* y = out.data() + n * OC * P;
    if (b) fill_bias(y, b, OC, P);  // then the GEMM adds onto it, as the one-image chunk
    gemm_bf16_packed_a(pw, int(OC), int(P), int(IC), 1.f, false, in.data() + n * IC * P,
                       int(P), b ? 1.f : 0.f, y, int(P));
  });
#else
  (void)out, (void)in, (void)b;
  FAIL("Conv2d: bf16 in the float64 build");
#endif
}

void Conv2d::backward_per_image(Tensor& din, const Tensor& dout, const Tensor& in, bool wgrad) {
#if !(defined(MPICNN_F64) && MPICNN_F64)
  const int64_t N = dout.size(0), OC = opt_.out_channels, IC = geo_.channels, P = geo_.out_plane();
  if (wgrad) weight_grad_per_image(dout, in);
  if (!din.defined()) return;
  bf16_t* pw = reinterpret_cast<bf16_t*>(workspace_base());
  pack_a_bf16(pw, true, int(IC), int(OC), weight.data(), int(IC));  // W^T (IC, OC)
  for_units(N, [&](int64_t n) {
    gemm_bf16_packed_a(pw, int(IC), int(P), int(OC), 1.f, false, dout.data() + n * OC * P,
                       int(P), 0.f, din.data() + n * IC * P, int(P));
  });
#else
  (void)din, (void)dout, (void)in, (void)wgrad;
  FAIL("Conv2d: bf16 in the float64 build");
#endif
}

// dW (OC, IC) += the sum over images of dy_n (OC, P) * x_n^T. The images go in
// kWgradGroups groups of consecutive images, each group's sum in image order into its own slice
// of the workspace, the groups then added to dW in group order: the groups are fixed by the
// batch alone, so the bits do not depend on the thread count. The groups run side by side
// where side_by_side says so, else one after the other, each GEMM on all threads.
void Conv2d::weight_grad_per_image(const Tensor& dout, const Tensor& in) {
#if !(defined(MPICNN_F64) && MPICNN_F64)
  const int64_t N = dout.size(0), OC = opt_.out_channels, IC = geo_.channels, P = geo_.out_plane();
  const int64_t G = std::min<int64_t>(N, kWgradGroups), WG = OC * IC;
  real* const parts = workspace_base();
  for_units(G, [&](int64_t gi) {
    const int64_t n0 = gi * N / G, n1 = (gi + 1) * N / G;
    for (int64_t n = n0; n < n1; ++n)
      gemm_bf16(false, true, int(OC), int(IC), int(P), 1.f, dout.data() + n * OC * P, int(P),
                in.data() + n * IC * P, int(P), n == n0 ? 0.f : 1.f, parts + gi * WG, int(IC));
  });
  add_parts(grad_weight.data(), parts, G, WG);
#else
  (void)dout, (void)in;
  FAIL("Conv2d: bf16 in the float64 build");
#endif
}

void Conv2d::add_bias_grad(const Tensor& dout) {
  const int64_t N = dout.size(0), OC = opt_.out_channels, P = geo_.out_plane();
  const real* dy = dout.data();
  real* gb = grad_bias.data();
  // Double accumulators: a channel of a large batch sums ~1e6 terms.
#pragma omp parallel for schedule(static) if (N * OC * P > kParallelMin)
  for (int64_t oc = 0; oc < OC; ++oc) {
    double acc = 0;
    for (int64_t n = 0; n < N; ++n) {
      const real* s = dy + (n * OC + oc) * P;
      real part = 0.f;
#pragma omp simd reduction(+ : part)
      for (int64_t p = 0; p < P; ++p) part += s[p];
      acc += part;
    }
    gb[oc] += real(acc);
  }
}

void Conv2d::backward(Tensor& din, const Tensor& dout, const Tensor& in, const Tensor& /*out*/) {
  check_ready(in);
  const ConvGeometry& g = geo_;
  const int64_t N = in.size(0), OC = opt_.out_channels, G = opt_.groups;
  const int64_t Kg = cols_.rows() / G;
  CHECK_SHAPE(dout, {N, OC, g.out_h, g.out_w});
  if (din.defined()) CHECK_SHAPE(din, {N, g.channels, g.height, g.width});
  if (frozen_ && !din.defined()) return;
  const bool wgrad = !frozen_;  // frozen: no filter gradient (cuDNN backward-filter, GEMM)
  if (on_gpu_as("Conv2d backward", gpu_format_, {&din, &dout, &in}, {&weight})) {
    CHECK(gpu_plan_, "Conv2d: planned on the CPU, called with GPU tensors");
    if (!gpu_format_.plain()) {
      // gpu_weight_ still holds this step's weights, converted by forward. The weight gradient
      // is written fresh in the activations' type, then added, converted, into the float slab;
      // the bias gradient is summed in float straight into it.
      gpu::Backend& be = gpu::backend();
      be.conv_backward(*gpu_plan_, din.defined() ? din.raw() : nullptr,
                       wgrad ? gpu_grad_weight_.raw() : nullptr, nullptr, dout.raw(), in.raw(),
                       gpu_weight_.raw(), int(N), /*accumulate_params=*/false);
      if (wgrad) {
        const Shape& w = gpu_grad_weight_.shape();
        be.convert(grad_weight.data(), Format{}, gpu_grad_weight_.raw(), gpu_format_, w[0], w[1],
                   w[2], w[3], /*accumulate=*/true);
      }
      if (wgrad && opt_.bias)
        be.bias_grad_nhwc(gpu_format_.elem, grad_bias.data(), dout.raw(), N * g.out_plane(), OC);
      return;
    }
    gpu::backend().conv_backward(*gpu_plan_, din.defined() ? din.data() : nullptr,
                                 wgrad ? grad_weight.data() : nullptr,
                                 wgrad && opt_.bias ? grad_bias.data() : nullptr,
                                 dout.data(), in.data(), weight.data(), int(N));
    return;
  }
  if (wgrad && opt_.bias) add_bias_grad(dout);
  // bf16 on the direct kernels with images interleaved: the weight gradient by im2col's bf16
  // GEMMs below (see plan).
  const bool direct_wgrad = direct_weight_grad();
  if (direct_.planned()) {
    direct_.backward(din.defined() ? din.data() : nullptr,
                     wgrad && direct_wgrad ? grad_weight.data() : nullptr, dout.data(),
                     in.data(), weight.data(), N, workspace_base());
    if (MUTANT(1) && wgrad && direct_wgrad && weight_name_ == "conv1.weight") {
      real* gw = grad_weight.data();
      for (int64_t e = 0; e < grad_weight.numel(); ++e) gw[e] *= real(1.001);
    }
    if (direct_wgrad || !wgrad) return;
  }
  if (per_image_) return backward_per_image(din, dout, in, wgrad);
  // Input gradient by im2col below, by Winograd after the weight gradient's loop, or done.
  const bool data_im2col = din.defined() && !use_winograd_ && !direct_.planned();
  const real* w = data_im2col ? gemm_weight() : nullptr;  // (OC, Kg)
  // With dead taps the GEMMs accumulate into the live columns, added to grad_weight at the end.
  const bool live = wgrad && !cols_.all_taps_live();
  if (live) live_grad_.fill(0.f);
  real* gw = live ? live_grad_.data() : grad_weight.data();  // (OC, Kg)
  const int64_t nchunks = (N + chunk_ - 1) / chunk_;
  if (parallel_chunks_ && (wgrad || data_im2col)) {
    // Small layer: the chunks run side by side (see forward). Each chunk's weight gradient goes
    // to its own slice of chunk_grads_, summed into gw in chunk order below, so the bits do
    // not depend on the thread count.
    real* parts = wgrad ? chunk_grads_.data() : nullptr;
    const int64_t WG = OC * Kg;
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < nchunks; ++c)
      backward_chunk(din, dout, in, w, parts ? parts + c * WG : nullptr, 0.f, data_im2col,
                     c * chunk_);
    if (wgrad) add_parts(gw, parts, nchunks, WG);
  } else if (wgrad && grad_groups_) {
    // bf16: fixed groups of chunks, each group's weight gradient summed in chunk order into its
    // own slice of the group buffer, then added into gw in group order (same bits for any
    // thread count); the groups side by side when they share out over the threads.
    const int64_t G = grad_groups_, WG = OC * Kg;
    real* parts = group_grads(G * WG);
    for_units(G, [&](int64_t gi) {
      const int64_t c0 = gi * nchunks / G, c1 = (gi + 1) * nchunks / G;
      for (int64_t c = c0; c < c1; ++c)
        backward_chunk(din, dout, in, w, parts + gi * WG, c == c0 ? 0.f : 1.f, data_im2col,
                       c * chunk_);
    });
    add_parts(gw, parts, G, WG);
  } else if (wgrad || data_im2col) {
    for (int64_t c = 0; c < nchunks; ++c)
      backward_chunk(din, dout, in, w, wgrad ? gw : nullptr, 1.f, data_im2col, c * chunk_);
  }
  if (din.defined() && use_winograd_) {
    // The transposed convolution: dout through the rotated, transposed weights, padded 2 - p.
    real* ws = workspace_base();
    winograd_weights(ws, weight.data(), OC, g.channels, /*transposed=*/true);
    wino_bwd_.forward(din.data(), dout.data(), nullptr, N, ws);
  }
  if (live) {
    const std::vector<int32_t>& taps = cols_.live_taps();
    const int64_t T = int64_t(taps.size()), KT = g.taps(), n = OC * (g.channels / G);
    const real* lg = live_grad_.data();
    real* dst = grad_weight.data();
#pragma omp parallel for schedule(static) if (n * T > kParallelMin)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < T; ++j) dst[i * KT + taps[size_t(j)]] += lg[i * T + j];
  }
}

// One chunk of backward from image n0: gw (OC, Kg) '= beta * gw +' the chunk's weight gradient
// (skipped when null), and din's images '=' their gradient when data.
void Conv2d::backward_chunk(Tensor& din, const Tensor& dout, const Tensor& in, const real* w,
                            real* gw, real beta, bool data, int64_t n0) {
  const ConvGeometry& g = geo_;
  const int64_t N = in.size(0), OC = opt_.out_channels, G = opt_.groups;
  const int64_t P = g.out_plane(), OCg = OC / G, Kg = cols_.rows() / G;
  const int64_t B = std::min(chunk_, N - n0), BP = B * P;
  real* const col = workspace_base();  // (IC*T, chunk*P)
  real* const rows_buf = col + col_floats_;  // (OC, chunk*P)
  const int64_t x_off = n0 * g.channels * g.in_plane();
  const real* x = in.data() + x_off;               // (B, IC, H, W)
  const real* dy = dout.data() + n0 * OC * P;      // (B, OC, OH, OW)
  const real* rows = dy;                           // (OC, B*P)
  if (B > 1) {
    real* r = rows_buf;
#pragma omp parallel for collapse(2) schedule(static) if (OC * BP > kParallelMin)
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
    const real alpha = MUTANT(1) && weight_name_ == "conv1.weight" ? real(1.001) : real(1);
    for (int64_t gi = 0; gi < G; ++gi)
      gemm_in(Device::CPU, precision_, false, true, int(OCg), int(Kg), int(BP), alpha,
              rows + gi * OCg * BP, int(BP), cols + gi * Kg * BP, int(BP), beta, gw + gi * OCg * Kg,
              int(Kg));
  }
  if (!data) return;
  // The columns are spent: their buffer takes the column gradient (pointwise: din itself).
  real* dx = din.data() + x_off;            // (B, IC, H, W)
  real* dcol = direct ? dx : col;           // (IC*T, B*P)
  for (int64_t gi = 0; gi < G; ++gi)
    gemm_in(Device::CPU, precision_, true, false, int(Kg), int(BP), int(OCg), 1.f,
            w + gi * OCg * Kg, int(Kg), rows + gi * OCg * BP, int(BP), 0.f, dcol + gi * Kg * BP,
            int(BP));
  if (!direct) cols_.col2im(dx, dcol, B);
}

}  // namespace mpicnn
