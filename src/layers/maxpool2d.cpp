// MaxPool2d forward/backward on CPU: OpenMP over (N*C) planes, PyTorch's scan order and tie
// rule so that outputs and gradient positions match torch exactly. Forward is vectorised
// across the output columns whose window lies inside the input's width: each lane is one output
// and sees its window's cells in the same order, with the same comparison, as the scalar loop
// (the first maximum wins, a NaN wins and stays), so both give the same bits and indices.
#include "layers/maxpool2d.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#if defined(__AVX512F__) && !(defined(MPICNN_F64) && MPICNN_F64)
#include <immintrin.h>
#define MPICNN_MAXPOOL_AVX512 1
#endif

#include "core/gpu.h"
#include "core/mutant.h"

namespace mpicnn {

namespace {

// First valid cell of a dilated window starting at `start` (may be negative), and the end
// of its span clipped to the input.
inline void clip_window(int64_t& begin, int64_t& end, int64_t start, int kernel, int dilation,
                        int64_t size) {
  end = std::min(start + int64_t(kernel - 1) * dilation + 1, size);
  begin = start;
  if (begin < 0) begin += (-begin + dilation - 1) / dilation * dilation;
}

// Output (oh, ow) of a plane by the scalar scan: PyTorch's order and rule.
inline void max_cell(real* y, int32_t* arg, const real* x, int64_t h0, int64_t h1, int64_t ow,
                     int64_t W, const MaxPool2dOptions& o) {
  int64_t w0, w1;
  clip_window(w0, w1, ow * o.stride[1] - o.padding[1], o.kernel[1], o.dilation[1], W);
  // PyTorch starts from the first cell, so an all -inf window points at it.
  int64_t best_i = (h0 < h1 && w0 < w1) ? h0 * W + w0 : -1;
  real best = -std::numeric_limits<real>::infinity();
  for (int64_t h = h0; h < h1; h += o.dilation[0])
    for (int64_t w = w0; w < w1; w += o.dilation[1]) {
      const real v = x[h * W + w];
      if (v > best || (MUTANT(7) && v == best) || std::isnan(v)) best = v, best_i = h * W + w;
    }
  y[ow] = best;
  arg[ow] = int32_t(best_i);
}

#ifdef MPICNN_MAXPOOL_AVX512
// Stride-2 windows of 1-3 columns (ResNet's 3x3/2, VGG's and AlexNet's pools) over the columns
// [lo, hi) with whole windows, 16 outputs a vector: each window row's even and odd cells come
// out of two loads by permutes (masked to the cells the window reads, so nothing past the row
// is touched), then the same scan order and comparison as max_cell.
void max_row_s2(real* __restrict yr, int32_t* __restrict ar, const real* __restrict x,
                int64_t h0, int64_t h1, int64_t W, int64_t lo, int64_t hi,
                const MaxPool2dOptions& o, bool tie_last) {
  const int32_t pw = o.padding[1], kw = o.kernel[1], dh = o.dilation[0];
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  // Lanes [0, n) of a 16-lane mask, for n up to 16 (0 below 1).
  auto lanes = [](int64_t n) {
    return __mmask16(n >= 16 ? 0xFFFF : n <= 0 ? 0 : (1u << n) - 1);
  };
  for (int64_t ow = lo; ow < hi; ow += 16) {
    const int64_t n = std::min<int64_t>(16, hi - ow);
    const int64_t last = 2 * (n - 1) + 1;  // the last cell the even/odd pair reads
    const __mmask16 ma = lanes(last + 1), mb = lanes(last - 15);
    const __mmask16 mc = lanes(2 * n - 1), md = lanes(2 * n - 17);  // cells 2 .. 2n from +2
    __m512 best = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    const __m512i first = _mm512_add_epi32(_mm512_set1_epi32(int32_t(h0 * W - pw + 2 * ow)), even);
    __m512i arg = first;
    for (int64_t h = h0; h < h1; h += dh) {
      const real* row = x + h * W - pw + 2 * ow;
      const __m512 a = _mm512_maskz_loadu_ps(ma, row), b = _mm512_maskz_loadu_ps(mb, row + 16);
      __m512 cells[3] = {_mm512_permutex2var_ps(a, even, b), _mm512_permutex2var_ps(a, odd, b),
                         _mm512_setzero_ps()};
      if (kw == 3)
        cells[2] = _mm512_permutex2var_ps(_mm512_maskz_loadu_ps(mc, row + 2), even,
                                          _mm512_maskz_loadu_ps(md, row + 18));
      const __m512i at = _mm512_add_epi32(first, _mm512_set1_epi32(int32_t((h - h0) * W)));
      for (int32_t k = 0; k < kw; ++k) {
        const __m512 v = cells[k];
        __mmask16 take = _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        if (tie_last) take |= _mm512_cmp_ps_mask(v, best, _CMP_EQ_OQ);
        best = _mm512_mask_mov_ps(best, take, v);
        arg = _mm512_mask_mov_epi32(arg, take, _mm512_add_epi32(at, _mm512_set1_epi32(k)));
      }
    }
    _mm512_mask_storeu_ps(yr + ow, lanes(n), best);
    _mm512_mask_storeu_epi32(ar + ow, lanes(n), arg);
  }
}
#endif

// Prefetches rows [h0, h1) of an (H, W) plane x.
inline void prefetch_rows(const real* x, int64_t h0, int64_t h1, int64_t W) {
  const char* end = reinterpret_cast<const char*>(x + h1 * W);
  for (const char* c = reinterpret_cast<const char*>(x + h0 * W); c < end; c += 64)
    __builtin_prefetch(c);
}

// One (H, W) plane: y and arg (OH, OW), x (H, W). Columns [lo, hi) have whole windows in the
// width (no clipping): there the lanes run over output columns, one window cell at a time.
void max_plane(real* y, int32_t* arg, const real* __restrict x, int64_t H, int64_t W, int64_t OH,
               int64_t OW, const MaxPool2dOptions& o) {
  const int32_t sw = o.stride[1], pw = o.padding[1], dw = o.dilation[1], kw = o.kernel[1];
  const int64_t lo = std::min<int64_t>(OW, (pw + sw - 1) / sw);
  const int64_t span = int64_t(kw - 1) * dw + 1;
  const int64_t room = W + pw - span;  // the last whole window starts at room (if >= 0)
  const int64_t hi = room < 0 ? lo : std::max<int64_t>(lo, std::min<int64_t>(OW, room / sw + 1));
  const bool tie_last = MUTANT(7);
  for (int64_t oh = 0; oh < OH; ++oh) {
    int64_t h0, h1;
    clip_window(h0, h1, oh * o.stride[0] - o.padding[0], o.kernel[0], o.dilation[0], H);
    // The rows the next two output rows add: a window's interleaved row streams defeat the
    // hardware prefetcher (ResNet's 3x3/2 pool at batch 16: 8.6 -> 2.2 ms with this).
    prefetch_rows(x, h1, std::min<int64_t>(H, h1 + 2 * o.stride[0]), W);
    real* __restrict yr = y + oh * OW;
    int32_t* __restrict ar = arg + oh * OW;
    for (int64_t ow = 0; ow < lo; ++ow) max_cell(yr, ar, x, h0, h1, ow, W, o);
    int64_t from = lo;  // the columns left to the loop below
#ifdef MPICNN_MAXPOOL_AVX512
    if (h0 < h1 && sw == 2 && dw == 1 && kw <= 3) {
      max_row_s2(yr, ar, x, h0, h1, W, lo, hi, o, tie_last);
      from = hi;
    }
#endif
    if (h0 < h1) {
      const int32_t first = int32_t(h0 * W) - pw;  // + ow * sw: the window's first cell
#pragma omp simd
      for (int64_t ow = from; ow < hi; ++ow) {
        yr[ow] = -std::numeric_limits<real>::infinity();
        ar[ow] = first + int32_t(ow) * sw;
      }
      for (int64_t h = h0; h < h1; h += o.dilation[0])
        for (int32_t k = 0; k < kw; ++k) {
          const int32_t base = int32_t(h * W) - pw + k * dw;  // + ow * sw: this cell
#pragma omp simd
          for (int64_t ow = from; ow < hi; ++ow) {
            const int32_t i = base + int32_t(ow) * sw;
            const real v = x[i], best = yr[ow];
            const bool take = v > best || (tie_last && v == best) || v != v;
            yr[ow] = take ? v : best;
            ar[ow] = take ? i : ar[ow];
          }
        }
    } else {
      for (int64_t ow = from; ow < hi; ++ow) max_cell(yr, ar, x, h0, h1, ow, W, o);
    }
    for (int64_t ow = hi; ow < OW; ++ow) max_cell(yr, ar, x, h0, h1, ow, W, o);
  }
}

}  // namespace

MaxPool2d::MaxPool2d(int kernel, int stride, int padding, int dilation, bool ceil_mode)
    : MaxPool2d(MaxPool2dOptions{.kernel = {kernel, kernel},
                                 .stride = {stride, stride},
                                 .padding = {padding, padding},
                                 .dilation = {dilation, dilation},
                                 .ceil_mode = ceil_mode}) {}

MaxPool2d::MaxPool2d(const MaxPool2dOptions& opt) : opt_(opt) {
  check_pool_window("MaxPool2d", opt_.kernel, opt_.stride, opt_.padding);
  CHECK(opt_.dilation[0] > 0 && opt_.dilation[1] > 0, "MaxPool2d: dilation ",
        hw_str(opt_.dilation), " must be positive");
}

Shape MaxPool2d::output_shape(const Shape& in) const {
  CHECK(in.ndim == 4, "MaxPool2d: input must be 4-D (N, C, H, W), got ", in.str());
  const auto& o = opt_;
  const int64_t oh = pool_output_size(in.d[2], o.kernel[0], o.stride[0], o.padding[0],
                                      o.dilation[0], o.ceil_mode);
  const int64_t ow = pool_output_size(in.d[3], o.kernel[1], o.stride[1], o.padding[1],
                                      o.dilation[1], o.ceil_mode);
  CHECK(oh >= 1 && ow >= 1, "MaxPool2d: input ", in.str(), " is too small for kernel ",
        hw_str(o.kernel), ", stride ", hw_str(o.stride), ", padding ", hw_str(o.padding), ", dilation ",
        hw_str(o.dilation), " (output would be ", oh, "x", ow, ")");
  return {in.d[0], in.d[1], oh, ow};
}

gpu::PoolDesc MaxPool2d::desc(const Shape& in) const {
  const Shape os = output_shape(in);
  gpu::PoolDesc d;
  d.c = int(in[1]), d.h = int(in[2]), d.w = int(in[3]), d.oh = int(os[2]), d.ow = int(os[3]);
  d.kh = opt_.kernel[0], d.kw = opt_.kernel[1], d.stride_h = opt_.stride[0];
  d.stride_w = opt_.stride[1], d.pad_h = opt_.padding[0], d.pad_w = opt_.padding[1];
  d.dil_h = opt_.dilation[0], d.dil_w = opt_.dilation[1];
  return d;
}

void MaxPool2d::plan(const Shape& in, const ExecConfig& cfg) {
  const Shape out = output_shape(in);
  CHECK(in.d[2] * in.d[3] <= std::numeric_limits<int32_t>::max(), "MaxPool2d: input plane ",
        in.d[2], "x", in.d[3], " is too large for int32 argmax indices");
  if (cfg.device == Device::CUDA) {
    argmax_.clear();
    argmax_dev_ = gpu::backend().alloc(size_t(out.numel()) * sizeof(int32_t));
  } else {
    argmax_.assign(size_t(out.numel()), -1);
    argmax_dev_.reset();
  }
  planned_ = in;
  forward_batch_ = -1;
}

void MaxPool2d::forward(Tensor& out, const Tensor& in) {
  CHECK(planned_.ndim == 4, "MaxPool2d: forward before plan()");
  CHECK(in.dim() == 4 && in.size(1) == planned_.d[1] && in.size(2) == planned_.d[2] &&
            in.size(3) == planned_.d[3] && in.size(0) <= planned_.d[0],
        "MaxPool2d: input ", in.shape().str(), " does not fit the planned ", planned_.str(),
        "; plan() with the largest input first");
  const Shape os = output_shape(in.shape());
  CHECK(out.shape() == os, "MaxPool2d: out has shape ", out.shape().str(), ", expected ",
        os.str());
  CHECK(!overlaps(out, in), "MaxPool2d: out must not alias in");
  if (on_gpu_as("MaxPool2d", in.format(), {&out, &in})) {
    CHECK(argmax_dev_, "MaxPool2d: planned on the CPU, called with GPU tensors");
    auto* arg = static_cast<int32_t*>(argmax_dev_.get());
    gpu::backend().maxpool_forward(in.format(), out.raw(), arg, in.raw(), in.size(0),
                                   desc(in.shape()));
    forward_batch_ = in.size(0);
    return;
  }
  CHECK(!argmax_.empty() || out.numel() == 0, "MaxPool2d: planned on the GPU, called with CPU tensors");
  const int64_t H = in.size(2), W = in.size(3), OH = os.d[2], OW = os.d[3];
  const int64_t planes = os.d[0] * os.d[1];
  const real* x = in.data();
  real* y = out.data();
  int32_t* arg = argmax_.data();
  const int64_t work = out.numel() * opt_.kernel[0] * opt_.kernel[1];
#pragma omp parallel for schedule(static) if (work > 32768)
  for (int64_t p = 0; p < planes; ++p)
    max_plane(y + p * OH * OW, arg + p * OH * OW, x + p * H * W, H, W, OH, OW, opt_);
  forward_batch_ = in.size(0);
}

void MaxPool2d::backward(Tensor& din, const Tensor& dout, const Tensor& in, const Tensor& out) {
  if (!din.defined()) return;
  CHECK(forward_batch_ >= 0, "MaxPool2d: backward before forward");
  // The argmax indices are only valid for the shape of the last forward.
  CHECK(in.dim() == 4 && in.size(0) == forward_batch_ && in.size(1) == planned_.d[1] &&
            in.size(2) == planned_.d[2] && in.size(3) == planned_.d[3],
        "MaxPool2d backward: input ",
        in.shape().str(), " is not from the last forward (batch ", forward_batch_, ")");
  const Shape os = output_shape(in.shape());
  CHECK(din.shape() == in.shape() && dout.shape() == os && out.shape() == os,
        "MaxPool2d backward: din ", din.shape().str(), ", dout ", dout.shape().str(), ", out ",
        out.shape().str(), " for input ", in.shape().str(), " (expected output ", os.str(), ")");
  CHECK(!overlaps(din, dout), "MaxPool2d backward: din must not alias dout");
  if (on_gpu_as("MaxPool2d backward", din.format(), {&din, &dout})) {
    CHECK(argmax_dev_, "MaxPool2d backward: CUDA tensors, but the layer was planned on the CPU");
    const auto* arg = static_cast<const int32_t*>(argmax_dev_.get());
    return gpu::backend().maxpool_backward(din.format(), din.raw(), dout.raw(), arg, in.size(0),
                                           desc(in.shape()));
  }
  const int64_t HW = in.size(2) * in.size(3), OHW = os.d[2] * os.d[3];
  const int64_t planes = os.d[0] * os.d[1];
  const real* dy = dout.data();
  real* dx = din.data();
  const int32_t* arg = argmax_.data();
#pragma omp parallel for schedule(static) if (din.numel() + dout.numel() > 32768)
  for (int64_t p = 0; p < planes; ++p) {
    real* g = dx + p * HW;
    const real* d = dy + p * OHW;
    const int32_t* a = arg + p * OHW;
    for (int64_t i = 0; i < HW; ++i) g[i] = 0.f;
    // Same order as PyTorch, so overlapping windows sum identically.
    for (int64_t i = 0; i < OHW; ++i)
      if (a[i] >= 0) g[a[i]] += d[i];
  }
}

}  // namespace mpicnn
