// RoIAlign on CPU (torchvision 0.14's CPU kernel, float arithmetic in the same order) and the
// FPN multi-scale wrapper. Not a GPU kernel; not a Layer (rois are a second, non-differentiable
// input, so the detection head drives these calls itself).
#include "detect/roi_align.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

// torch rounds after every operation; GCC contracts a*b+c into one fused multiply-add in C++ by
// default, which rounds once and moves sample coordinates and sums off torchvision's by ulps.
// For the whole file, so OpenMP's outlined loop bodies and the templates are covered too.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace mpicnn::detect {

namespace {

// Every channel plane is read once per chunk of rois, the chunk's interpolation tables (32
// bytes a sample) once per channel: chunks as large as L3 comfortably holds (8 MiB: 1024 rois
// of 7x7 bins at 2x2 samples) keep the planes from being pulled from memory again per chunk.
// The bound also caps what an adaptive sampling ratio on huge rois can ask for.
constexpr int64_t kChunkSamples = int64_t(1) << 18;
// An adaptive grid asking for more samples than this (4 GiB of tables) for one roi is a bad
// roi, not work to do; the per-side bound keeps the grid arithmetic inside int.
constexpr float kMaxGridSide = 65536.f;
constexpr int64_t kMaxRoiSamples = int64_t(1) << 27;

// One call's problem. rows (may be null) lists the roi indices to pool, and the same indices
// address out/dout rows, so MultiScaleRoIAlign runs one level without gathering copies.
struct Problem {
  const float* rois;  // (K_all, 5)
  const int64_t* rows;
  int64_t K, N, C, H, W;
  int PH, PW;
  float scale;
  int sampling_ratio;
  bool aligned;
  int64_t roi(int64_t i) const { return rows ? rows[i] : i; }
  int64_t batch(int64_t i) const { return int64_t(rois[roi(i) * 5]); }
};

struct Geometry {
  float start_h, start_w, bin_h, bin_w;
  int grid_h, grid_w;  // 0 for degenerate aligned rois: no samples, output 0
};

int grid_side(float roi_side, int bins, int sampling_ratio, int64_t k) {
  if (sampling_ratio > 0) return sampling_ratio;
  const float v = std::ceil(roi_side / float(bins));
  MPICNN_CHECK(v <= kMaxGridSide, "roi_align: roi ", k, " spans ", roi_side,
               " feature cells (or is not finite): too many adaptive sampling points");
  return v > 0.f ? int(v) : 0;
}

// torchvision's roi geometry: no rounding; legacy (not aligned) rois are at least 1x1.
Geometry geometry(const Problem& p, int64_t i) {
  const int64_t k = p.roi(i);
  const float* r = p.rois + k * 5;
  const float offset = p.aligned ? 0.5f : 0.f;
  Geometry g;
  g.start_w = r[1] * p.scale - offset;
  g.start_h = r[2] * p.scale - offset;
  const float end_w = r[3] * p.scale - offset;
  const float end_h = r[4] * p.scale - offset;
  float roi_w = end_w - g.start_w, roi_h = end_h - g.start_h;
  if (!p.aligned) {
    roi_w = std::max(roi_w, 1.f);
    roi_h = std::max(roi_h, 1.f);
  }
  g.bin_h = roi_h / float(p.PH);
  g.bin_w = roi_w / float(p.PW);
  g.grid_h = grid_side(roi_h, p.PH, p.sampling_ratio, k);
  g.grid_w = grid_side(roi_w, p.PW, p.sampling_ratio, k);
  return g;
}

// Samples of one roi in [ph][pw][iy][ix] order. The coordinate expressions keep
// torchvision's operation order so the float results agree bit for bit.
void fill_samples(RoiSample* out, const Geometry& g, int64_t H, int64_t W, int PH, int PW) {
  const float fh = float(H), fw = float(W);
  for (int ph = 0; ph < PH; ++ph)
    for (int pw = 0; pw < PW; ++pw)
      for (int iy = 0; iy < g.grid_h; ++iy) {
        const float yy = g.start_h + float(ph) * g.bin_h +
                         float(iy + .5f) * g.bin_h / float(g.grid_h);
        for (int ix = 0; ix < g.grid_w; ++ix) {
          const float xx = g.start_w + float(pw) * g.bin_w +
                           float(ix + .5f) * g.bin_w / float(g.grid_w);
          RoiSample& s = *out++;
          float y = yy, x = xx;
          // Written as !(inside) so NaN coordinates are empty too.
          if (!(y >= -1.f && y <= fh && x >= -1.f && x <= fw)) {
            s = RoiSample{{0, 0, 0, 0}, {0.f, 0.f, 0.f, 0.f}};
            continue;
          }
          y = std::max(y, 0.f);
          x = std::max(x, 0.f);
          int y_low = int(y), x_low = int(x), y_high, x_high;
          if (y_low >= H - 1) {
            y_high = y_low = int(H - 1);
            y = float(y_low);
          } else {
            y_high = y_low + 1;
          }
          if (x_low >= W - 1) {
            x_high = x_low = int(W - 1);
            x = float(x_low);
          } else {
            x_high = x_low + 1;
          }
          const float ly = y - float(y_low), lx = x - float(x_low);
          const float hy = 1.f - ly, hx = 1.f - lx;
          const int32_t row_low = int32_t(y_low * W), row_high = int32_t(y_high * W);
          s = RoiSample{{row_low + x_low, row_low + x_high, row_high + x_low, row_high + x_high},
                        {hy * hx, hy * lx, ly * hx, ly * lx}};
        }
      }
}

// Builds the tables of rois [i0, i1) and returns i1: as many rois as fit kChunkSamples, at
// least one. scratch.offset/count then describe roi i0 + j at index j. Throws (before any
// parallel region) on a roi with too many adaptive samples.
int64_t build_chunk(RoiAlignScratch& s, const Problem& p, int64_t i0) {
  s.offset.clear();
  s.count.clear();
  const int64_t bins = int64_t(p.PH) * p.PW;
  int64_t total = 0, i = i0;
  for (; i < p.K; ++i) {
    const Geometry g = geometry(p, i);
    const int64_t grid = int64_t(g.grid_h) * g.grid_w, n = bins * grid;
    MPICNN_CHECK(n <= kMaxRoiSamples, "roi_align: roi ", p.roi(i), " needs ", n,
                 " adaptive sampling points: too many");
    if (i > i0 && total + n > kChunkSamples) break;
    s.offset.push_back(total);
    // Forward divides by max(grid, 1); backward by the grid, which only differs when there are
    // no samples to divide.
    s.count.push_back(float(std::max(grid, int64_t(1))));
    total += n;
  }
  s.offset.push_back(total);
  if (int64_t(s.samples.size()) < total) s.samples.resize(size_t(total));
  const int64_t n = i - i0;
#pragma omp parallel for schedule(dynamic, 1) if (total >= 4096)
  for (int64_t j = 0; j < n; ++j)
    fill_samples(s.samples.data() + s.offset[size_t(j)], geometry(p, i0 + j), p.H, p.W, p.PH,
                 p.PW);
  return i;
}

void check_problem(const Problem& p, const char* what) {
  MPICNN_CHECK(p.K >= 0 && p.N > 0 && p.C > 0 && p.H > 0 && p.W > 0 && p.PH > 0 && p.PW > 0,
               what, ": bad sizes K ", p.K, " N ", p.N, " C ", p.C, " H ", p.H, " W ", p.W,
               " PH ", p.PH, " PW ", p.PW);
  MPICNN_CHECK(p.H * p.W <= int64_t(INT32_MAX), what, ": feature plane ", p.H, "x", p.W,
               " is too large");
  for (int64_t i = 0; i < p.K; ++i) {
    const float b = p.rois[p.roi(i) * 5];
    // torchvision truncates the float index; anything outside [0, N) would read another batch.
    MPICNN_CHECK(b > -1.f && b < float(p.N), what, ": roi ", p.roi(i), " has batch index ", b,
                 ", outside [0, ", p.N, ")");
  }
}

void run_forward(float* out, const float* feat, const Problem& p, RoiAlignScratch& s) {
  check_problem(p, "roi_align_forward");
  const int64_t HW = p.H * p.W, bins = int64_t(p.PH) * p.PW;
  for (int64_t i0 = 0; i0 < p.K;) {
    const int64_t i1 = build_chunk(s, p, i0), n = i1 - i0;
    const int64_t work = s.offset[size_t(n)] * p.C;
#pragma omp parallel for collapse(2) schedule(static) if (work > 32768)
    for (int64_t c = 0; c < p.C; ++c)
      for (int64_t j = 0; j < n; ++j) {
        const int64_t k = p.roi(i0 + j);
        const float* plane = feat + (p.batch(i0 + j) * p.C + c) * HW;
        float* o = out + (k * p.C + c) * bins;
        const RoiSample* smp = s.samples.data() + s.offset[size_t(j)];
        const int64_t per_bin = (s.offset[size_t(j) + 1] - s.offset[size_t(j)]) / bins;
        const float count = s.count[size_t(j)];
        for (int64_t b = 0; b < bins; ++b) {
          float v = 0.f;
          for (int64_t q = 0; q < per_bin; ++q, ++smp)
            v += smp->w[0] * plane[smp->pos[0]] + smp->w[1] * plane[smp->pos[1]] +
                 smp->w[2] * plane[smp->pos[2]] + smp->w[3] * plane[smp->pos[3]];
          o[b] = v / count;
        }
      }
    i0 = i1;
  }
}

// (dout * w) / count, as torchvision rounds it; when count is a power of two the product by
// its reciprocal is the same number, and much cheaper than a division.
template <bool kPow2>
void scatter_roi(float* plane, const float* d, const RoiSample* smp, int64_t bins,
                 int64_t per_bin, float count) {
  const float inv = 1.f / count;
  for (int64_t b = 0; b < bins; ++b) {
    const float g = d[b];
    for (int64_t q = 0; q < per_bin; ++q, ++smp) {
      if (smp->w[0] == 0.f) continue;  // outside the map (inside, w[0] = hy * hx > 0)
      for (int t = 0; t < 4; ++t)
        plane[smp->pos[t]] += kPow2 ? (g * smp->w[t]) * inv : (g * smp->w[t]) / count;
    }
  }
}

void run_backward(float* dfeat, const float* dout, const Problem& p, RoiAlignScratch& s) {
  check_problem(p, "roi_align_backward");
  const int64_t HW = p.H * p.W, bins = int64_t(p.PH) * p.PW;
  for (int64_t i0 = 0; i0 < p.K;) {
    const int64_t i1 = build_chunk(s, p, i0), n = i1 - i0;
    const int64_t work = s.offset[size_t(n)] * p.C;
    // Channels, not rois: two rois of one image write the same cells, and one thread per
    // channel keeps every cell's sum in roi order whatever the thread count.
#pragma omp parallel for schedule(dynamic, 1) if (work > 32768)
    for (int64_t c = 0; c < p.C; ++c)
      for (int64_t j = 0; j < n; ++j) {
        const int64_t k = p.roi(i0 + j);
        float* plane = dfeat + (p.batch(i0 + j) * p.C + c) * HW;
        const float* d = dout + (k * p.C + c) * bins;
        const RoiSample* smp = s.samples.data() + s.offset[size_t(j)];
        const int64_t per_bin = (s.offset[size_t(j) + 1] - s.offset[size_t(j)]) / bins;
        if ((per_bin & (per_bin - 1)) == 0)
          scatter_roi<true>(plane, d, smp, bins, per_bin, s.count[size_t(j)]);
        else
          scatter_roi<false>(plane, d, smp, bins, per_bin, s.count[size_t(j)]);
      }
    i0 = i1;
  }
}

}  // namespace

void roi_align_forward(float* out, const float* feat, const float* rois, int64_t K, int64_t N,
                       int64_t C, int64_t H, int64_t W, int PH, int PW, double spatial_scale,
                       int sampling_ratio, bool aligned, RoiAlignScratch* scratch) {
  RoiAlignScratch local;
  const Problem p{rois, nullptr, K, N, C, H, W, PH, PW, float(spatial_scale), sampling_ratio,
                  aligned};
  run_forward(out, feat, p, scratch ? *scratch : local);
}

void roi_align_backward(float* dfeat, const float* dout, const float* rois, int64_t K, int64_t N,
                        int64_t C, int64_t H, int64_t W, int PH, int PW, double spatial_scale,
                        int sampling_ratio, bool aligned, RoiAlignScratch* scratch) {
  RoiAlignScratch local;
  const Problem p{rois, nullptr, K, N, C, H, W, PH, PW, float(spatial_scale), sampling_ratio,
                  aligned};
  run_backward(dfeat, dout, p, scratch ? *scratch : local);
}

double infer_scale(int64_t feature_size, int64_t image_size) {
  MPICNN_CHECK(feature_size > 0 && image_size > 0, "infer_scale: sizes must be positive, got ",
               feature_size, " and ", image_size);
  const float approx = float(double(feature_size) / double(image_size));
  // nearbyint rounds half to even under the default rounding mode, like torch.round.
  return std::ldexp(1.0, int(std::nearbyint(std::log2(approx))));
}

int LevelMapper::level(const float* box) const {
  const float area = (box[2] - box[0]) * (box[3] - box[1]);
  MPICNN_CHECK(area >= 0.f, "LevelMapper: box (", box[0], ", ", box[1], ", ", box[2], ", ", box[3],
               ") has a negative or non-finite area");
  const float s = std::sqrt(area);
  const float t = std::floor(float(canonical_level) + std::log2(s / float(canonical_scale)) + eps);
  return int(std::clamp(t, float(k_min), float(k_max))) - k_min;
}

MultiScaleRoIAlign::MultiScaleRoIAlign(int output_size, int sampling_ratio, int canonical_scale,
                                       int canonical_level)
    : output_size_(output_size), sampling_ratio_(sampling_ratio) {
  MPICNN_CHECK(output_size > 0, "MultiScaleRoIAlign: output_size must be positive, got ",
               output_size);
  mapper_.canonical_scale = canonical_scale;
  mapper_.canonical_level = canonical_level;
}

void MultiScaleRoIAlign::plan(const std::vector<Shape>& level_shapes, int64_t image_h,
                              int64_t image_w, int64_t max_rois) {
  MPICNN_CHECK(!level_shapes.empty(), "MultiScaleRoIAlign: no feature levels");
  MPICNN_CHECK(image_h > 0 && image_w > 0, "MultiScaleRoIAlign: bad image size ", image_h, "x",
               image_w);
  scales_.clear();
  for (const Shape& s : level_shapes) {
    MPICNN_CHECK(s.ndim == 4, "MultiScaleRoIAlign: level shape ", s.str(), " is not (N, C, H, W)");
    scales_.push_back(infer_scale(s[2], image_h));  // torchvision keeps the height's scale
  }
  // torchvision: int(-log2(float32(scale))) of the first and last levels.
  mapper_.k_min = int(-std::log2(float(scales_.front())));
  mapper_.k_max = int(-std::log2(float(scales_.back())));
  MPICNN_CHECK(mapper_.k_max - mapper_.k_min + 1 == int(scales_.size()),
               "MultiScaleRoIAlign: ", scales_.size(), " levels but scales 2^-", mapper_.k_min,
               " .. 2^-", mapper_.k_max, ": levels must halve in size one after another");
  shapes_ = level_shapes;
  roi_level_.reserve(size_t(max_rois));
  rows_.reserve(size_t(max_rois));
  level_begin_.reserve(scales_.size() + 1);
}

void MultiScaleRoIAlign::forward(float* out, const std::vector<FeatureLevel>& levels,
                                 const float* rois, int64_t K, int64_t image_h, int64_t image_w) {
  if (scales_.empty()) {
    std::vector<Shape> shapes;
    for (const FeatureLevel& l : levels) shapes.push_back(l.shape);
    plan(shapes, image_h, image_w, K);
  }
  const size_t L = scales_.size();
  MPICNN_CHECK(levels.size() == L, "MultiScaleRoIAlign: planned for ", L, " levels, got ",
               levels.size());
  for (size_t l = 0; l < L; ++l) {
    const Shape& s = levels[l].shape;
    MPICNN_CHECK(levels[l].data && s.ndim == 4 && s[0] == levels[0].shape[0] &&
                     s[1] == levels[0].shape[1],
                 "MultiScaleRoIAlign: level ", l, " has shape ", s.str(), ", level 0 has ",
                 levels[0].shape.str(), " (N and C must agree)");
    shapes_[l] = s;
  }
  MPICNN_CHECK(K >= 0, "MultiScaleRoIAlign: negative roi count ", K);
  roi_level_.resize(size_t(K));
  for (int64_t k = 0; k < K; ++k) roi_level_[size_t(k)] = mapper_.level(rois + k * 5 + 1);
  // One pass per level keeps each level's rois ascending (torchvision's torch.where order)
  // without a scratch vector.
  rows_.clear();
  level_begin_.assign(1, 0);
  for (size_t l = 0; l < L; ++l) {
    for (int64_t k = 0; k < K; ++k)
      if (roi_level_[size_t(k)] == int(l)) rows_.push_back(k);
    level_begin_.push_back(int64_t(rows_.size()));
  }
  for (size_t l = 0; l < L; ++l) {
    const Shape& s = shapes_[l];
    const Problem p{rois, rows_.data() + level_begin_[l], level_begin_[l + 1] - level_begin_[l],
                    s[0], s[1], s[2], s[3], output_size_, output_size_, float(scales_[l]),
                    sampling_ratio_, false};
    run_forward(out, levels[l].data, p, scratch_);
  }
  last_K_ = K;
}

void MultiScaleRoIAlign::backward(const std::vector<float*>& dfeats, const float* dout,
                                  const float* rois, int64_t K) {
  MPICNN_CHECK(K == last_K_, "MultiScaleRoIAlign::backward: ", K,
               " rois, the last forward had ", last_K_);
  MPICNN_CHECK(dfeats.size() == scales_.size(), "MultiScaleRoIAlign::backward: ", dfeats.size(),
               " gradient levels for ", scales_.size(), " levels");
  for (size_t l = 0; l < scales_.size(); ++l) {
    const Shape& s = shapes_[l];
    const Problem p{rois, rows_.data() + level_begin_[l], level_begin_[l + 1] - level_begin_[l],
                    s[0], s[1], s[2], s[3], output_size_, output_size_, float(scales_[l]),
                    sampling_ratio_, false};
    run_backward(dfeats[l], dout, p, scratch_);
  }
}

}  // namespace mpicnn::detect
