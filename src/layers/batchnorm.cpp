// BatchNorm2d on CPU: one OpenMP task per channel, double accumulators for the statistics
// (sums over N*H*W can reach millions of terms).
#include "layers/batchnorm.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/gpu.h"
#include "core/half.h"
#include "core/mutant.h"
#include "layers/add.h"

namespace mpicnn {

BatchNorm2d::BatchNorm2d(int channels, real eps, real momentum)
    : channels_(channels), eps_(eps), momentum_(momentum) {
  CHECK(channels >= 1, "BatchNorm2d: channels must be >= 1, got ", channels);
  CHECK(eps > 0.f, "BatchNorm2d: eps must be > 0");
  CHECK(momentum >= 0.f && momentum <= 1.f, "BatchNorm2d: momentum must be in [0, 1]");
  saved_mean_ = Tensor::zeros({channels});
  saved_invstd_ = Tensor::zeros({channels});
}

void BatchNorm2d::plan(const Shape& in, const ExecConfig& cfg) {
  // Saved statistics live where the activations do (the model's device).
  saved_mean_ = Tensor::zeros({channels_}, cfg.device);
  saved_invstd_ = Tensor::zeros({channels_}, cfg.device);
  x16_.reset();
  x16_numel_ = 0;
  if (bf16_input_) {
    CHECK(cfg.device == Device::CPU, "BatchNorm2d: bf16 input is for the CPU");
    x16_numel_ = in.numel();
    x16_ = alloc_host(size_t(x16_numel_) * sizeof(uint16_t));
  }
}

void BatchNorm2d::register_state(ParamStore& store, const std::string& prefix) {
  store.param(prefix + "weight", {channels_}, &weight, &grad_weight, /*decay=*/false);
  store.param(prefix + "bias", {channels_}, &bias, &grad_bias, /*decay=*/false);
  store.buffer(prefix + "running_mean", {channels_}, &running_mean);
  store.buffer(prefix + "running_var", {channels_}, &running_var);
  if (count_in_state_) store.buffer_i64(prefix + "num_batches_tracked", &num_batches_tracked);
}

void BatchNorm2d::reset_parameters(uint64_t /*seed*/) {
  weight.fill(1.f);
  bias.fill(0.f);
  running_mean.fill(0.f);
  running_var.fill(1.f);
  num_batches_tracked = 0;
}

namespace {

// Every cache line of a plane (one image's channel), asked for ahead of the loop that reads
// it: a channel's planes lie C * H * W apart, a few KB each, and the hardware prefetcher,
// which stops at page boundaries, leaves most of each plane's lines to be waited for
// (bench/RESULTS.md: a bf16 BatchNorm's backward at 28x28 and 14x14, inputs from memory, a
// quarter faster).
template <class T>
void prefetch_plane(const T* p, int64_t n) {
  const char* b = reinterpret_cast<const char*>(p);
  for (int64_t o = 0; o < n * int64_t(sizeof(T)); o += 64) __builtin_prefetch(b + o, 0, 2);
}

// One (n, c) plane of the forward's apply pass: q = p * scale + shift, plus the residual r,
// then the ReLU; the same expressions, in the same order, as the separate layers compute them
// (BatchNorm, then accumulate, then ReLU), so fused and unfused results are bit-identical.
// q may be p (an inference plan runs BatchNorm in place: module.h's plan_mode). The input is
// float32, or bf16 words (set_bf16_input) read as the floats they are.
inline real value(real v) { return v; }
inline real value(uint16_t v) { return real(bf16_to_float(v)); }

template <class T, bool kResidual, bool kRelu>
void apply_plane(real* q, const T* p, const real* __restrict r, real scale, real shift,
                 int64_t hw) {
#pragma omp simd
  for (int64_t i = 0; i < hw; ++i) {
    real v = value(p[i]) * scale + shift;
    if constexpr (kResidual) v += r[i];
    if constexpr (kRelu) v = v > 0.f ? v : 0.f;
    q[i] = v;
  }
}

template <class T>
using ApplyFn = void (*)(real*, const T*, const real*, real, real, int64_t);

template <class T>
ApplyFn<T> apply_fn(bool residual, bool relu) {
  if (residual) return relu ? apply_plane<T, true, true> : apply_plane<T, true, false>;
  return relu ? apply_plane<T, false, true> : apply_plane<T, false, false>;
}

// Channel c of every image: y = x * scale + shift (+ res) (then relu), from its statistics.
template <class T>
void apply_channel(real* y, const T* x, const real* res, ApplyFn<T> apply, real mean,
                   real invstd, real g, real b, int64_t N, int64_t C, int64_t c, int64_t HW) {
  const real scale = g * invstd, shift = b - mean * scale;
  for (int64_t n = 0; n < N; ++n) {
    const int64_t off = (n * C + c) * HW;
    if (res && n + 1 < N) prefetch_plane(res + off + C * HW, HW);
    apply(y + off, x + off, res ? res + off : nullptr, scale, shift, HW);
  }
}

// One plane rounded to bf16 into q; returns the sum of the rounded values (the mean's pass).
double round_plane(uint16_t* __restrict q, const real* __restrict p, int64_t hw) {
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < hw; ++i) {
    q[i] = float_to_bf16(float(p[i]));
    s += value(q[i]);
  }
  return s;
}

// The CPU forward (statistics as forward_impl documents) over the float32 input x32, or with
// kBf16 over its bf16 rounding, written to x16 plane by plane as the mean's pass reads x32
// (in eval mode too) and read by the later passes: y may be x32's memory.
template <bool kBf16>
void forward_cpu(real* y, const real* x32, uint16_t* x16, const real* res, bool relu,
                 real* mean_s, real* invstd_s, real* rm, real* rv, const real* g, const real* b,
                 int64_t N, int64_t C, int64_t HW, bool train, real eps, real momentum) {
  using T = std::conditional_t<kBf16, uint16_t, real>;
  const T* x;
  if constexpr (kBf16) x = x16;
  else x = x32;
  const int64_t M = N * HW;
  const ApplyFn<T> apply = apply_fn<T>(res != nullptr, relu);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < C; ++c) {
    real mean, invstd;
    if (train) {
      double s = 0, ss = 0;
      for (int64_t n = 0; n < N; ++n) {
        const int64_t off = (n * C + c) * HW;
        if (n + 1 < N) prefetch_plane(x32 + off + C * HW, HW);
        double ps = 0;
        if constexpr (kBf16) {
          ps = round_plane(x16 + off, x32 + off, HW);
        } else {
          const real* p = x32 + off;
#pragma omp simd reduction(+ : ps)
          for (int64_t i = 0; i < HW; ++i) ps += p[i];
        }
        s += ps;
      }
      const double mu = s / double(M);
      for (int64_t n = 0; n < N; ++n) {
        const T* p = x + (n * C + c) * HW;
        double pss = 0;
#pragma omp simd reduction(+ : pss)
        for (int64_t i = 0; i < HW; ++i) pss += (value(p[i]) - mu) * (value(p[i]) - mu);
        ss += pss;
      }
      const double var = ss / double(M);  // biased: used to normalise
      mean = real(mu);
      invstd = real(1.0 / std::sqrt(var + double(eps)));
      // Running stats use the unbiased variance, as PyTorch does.
      rm[c] = real((1.0 - momentum) * rm[c] + momentum * mu);
      rv[c] = real((1.0 - momentum) * rv[c] + momentum * var * (MUTANT(3) ? 1.0 : double(M) / double(M - 1)));
    } else {
      if constexpr (kBf16)
        for (int64_t n = 0; n < N; ++n)
          round_plane(x16 + (n * C + c) * HW, x32 + (n * C + c) * HW, HW);
      mean = rm[c];
      invstd = real(1.0 / std::sqrt(double(rv[c]) + double(eps)));
    }
    mean_s[c] = mean;
    invstd_s[c] = invstd;
    apply_channel(y, x, res, apply, mean, invstd, g[c], b[c], N, C, c, HW);
  }
}

}  // namespace

void BatchNorm2d::forward(Tensor& out, const Tensor& in) {
  forward_impl(out, in, nullptr, fused_relu_);
}

void BatchNorm2d::forward(Tensor& out, const Tensor& in, const Tensor& residual) {
  CHECK(residual.shape() == in.shape(), "BatchNorm2d: residual ", residual.shape().str(),
        " vs in ", in.shape().str());
  forward_impl(out, in, &residual, true);
}

void BatchNorm2d::forward_impl(Tensor& out, const Tensor& in, const Tensor* residual, bool relu) {
  CHECK(in.dim() == 4 && in.size(1) == channels_, "BatchNorm2d(", channels_,
        "): input must be (N, ", channels_, ", H, W), got ", in.shape().str());
  CHECK(out.shape() == in.shape(), "BatchNorm2d: out ", out.shape().str(), " vs in ",
        in.shape().str());
  CHECK(weight.defined(), "BatchNorm2d: parameters not allocated (ParamStore::allocate)");
  const int64_t N = in.size(0), C = channels_, HW = in.size(2) * in.size(3), M = N * HW;
  const bool train = training_ && !use_running_stats_;
  if (train) CHECK(M > 1, "BatchNorm2d: training needs more than one value per channel, got input ", in.shape().str());
  if (on_gpu_as("BatchNorm2d", in.format(), {&out, &in, residual}, {&weight, &saved_mean_})) {
    gpu::backend().batchnorm_forward(in.format(), out.raw(), saved_mean_.data(),
                                     saved_invstd_.data(), running_mean.data(),
                                     running_var.data(), in.raw(), weight.data(), bias.data(),
                                     residual ? residual->raw() : nullptr, relu, N, C, HW, eps_,
                                     momentum_, train);
    if (train) ++num_batches_tracked;
    saved_training_ = train;
    return;
  }
  const real* res = residual ? residual->data() : nullptr;
  CHECK(!bf16_input_ || in.numel() <= x16_numel_, "BatchNorm2d: input ", in.shape().str(),
        " exceeds the planned bf16 copy");
  const auto forward = bf16_input_ ? forward_cpu<true> : forward_cpu<false>;
  forward(out.data(), in.data(), static_cast<uint16_t*>(x16_.get()), res, relu,
          saved_mean_.data(), saved_invstd_.data(), running_mean.data(), running_var.data(),
          weight.data(), bias.data(), N, C, HW, train, eps_, momentum_);
  if (train) ++num_batches_tracked;
  saved_training_ = train;
}

void BatchNorm2d::recompute(Tensor& out, const Tensor& in) const {
  CHECK(in.dim() == 4 && in.size(1) == channels_ && out.shape() == in.shape(),
        "BatchNorm2d recompute: out ", out.shape().str(), ", in ", in.shape().str());
  CHECK(in.device() == Device::CPU && out.device() == Device::CPU && !bf16_input_,
        "BatchNorm2d recompute: float32 input on the CPU only");
  const int64_t N = in.size(0), C = channels_, HW = in.size(2) * in.size(3);
  const ApplyFn<real> apply = apply_fn<real>(false, fused_relu_);
  const real *x = in.data(), *mean = saved_mean_.data(), *invstd = saved_invstd_.data();
  const real *g = weight.data(), *b = bias.data();
  real* y = out.data();
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < C; ++c)
    apply_channel(y, x, nullptr, apply, mean[c], invstd[c], g[c], b[c], N, C, c, HW);
}

namespace {

// Backward of one channel over its N planes: the sums of dy and dy * xhat, then (when dx is
// wanted) dx. With kRelu, dy is the gradient of the fused ReLU's output y: the ReLU's backward
// (y > 0 ? dy : 0, as ReLU::backward computes it) is applied as the values are read.
// x: float32, or the bf16 copy of a bf16-input layer. With kAdd, dx '+=' the gradient, in one
// fused multiply-add (one rounding where backward and an accumulate after it make two).
template <class T, bool kRelu, bool kAdd>
void channel_backward(real* dx, double* sdy_out, double* sdyx_out, const T* x, const real* dy,
                      const real* y, int64_t N, int64_t C, int64_t c, int64_t HW, real mean,
                      real invstd, real k, bool batch_stats, int64_t M) {
  // The mask as a bitwise and (v or +0, exactly ReLU::backward's values): written as a
  // select, GCC left the reductions scalar with a branch per element, 1.7x slower than the
  // two separate passes (measured).
  auto grad = [](const real* d, const real* yy, int64_t i) {
    if constexpr (kRelu) {
      using Bits = std::conditional_t<sizeof(real) == 8, uint64_t, uint32_t>;
      const Bits keep = Bits(0) - Bits(yy[i] > 0.f);
      return std::bit_cast<real>(std::bit_cast<Bits>(d[i]) & keep);
    } else {
      return d[i];
    }
  };
  // sum(dy) and sum(dy * xhat) give dbias, dweight and the batch-statistics terms of dx.
  double sdy = 0, sdyx = 0;
  for (int64_t n = 0; n < N; ++n) {
    const T* p = x + (n * C + c) * HW;
    const real* d = dy + (n * C + c) * HW;
    const real* yy = kRelu ? y + (n * C + c) * HW : nullptr;
    if (n + 1 < N) {
      prefetch_plane(p + C * HW, HW);
      prefetch_plane(d + C * HW, HW);
      if (kRelu) prefetch_plane(yy + C * HW, HW);
    }
    double a = 0, bsum = 0;
#pragma omp simd reduction(+ : a, bsum)
    for (int64_t i = 0; i < HW; ++i) {
      const real gi = grad(d, yy, i);
      a += gi;
      bsum += gi * ((value(p[i]) - mean) * invstd);
    }
    sdy += a;
    sdyx += bsum;
  }
  *sdy_out = sdy;
  *sdyx_out = sdyx;
  if (!dx) return;
  // Training: dx = g*invstd * (dy - mean(dy) - xhat * mean(dy*xhat)); eval: dx = g*invstd*dy.
  const real mdy = batch_stats ? real(sdy / double(M)) : 0.f;
  const real mdyx = batch_stats ? real(sdyx / double(M)) : 0.f;
  for (int64_t n = 0; n < N; ++n) {
    const T* p = x + (n * C + c) * HW;
    const real* d = dy + (n * C + c) * HW;
    const real* yy = kRelu ? y + (n * C + c) * HW : nullptr;
    real* q = dx + (n * C + c) * HW;
#pragma omp simd
    for (int64_t i = 0; i < HW; ++i) {
      const real t = grad(d, yy, i) - mdy - (value(p[i]) - mean) * invstd * mdyx;
      if constexpr (kAdd) q[i] = std::fma(k, t, q[i]);
      else q[i] = k * t;
    }
  }
}

template <class T, bool kAdd>
using ChannelFn = decltype(&channel_backward<T, false, kAdd>);
template <class T, bool kAdd>
ChannelFn<T, kAdd> channel_fn(bool relu) {
  return relu ? channel_backward<T, true, kAdd> : channel_backward<T, false, kAdd>;
}

}  // namespace

void BatchNorm2d::backward(Tensor& din, const Tensor& dout, const Tensor& in,
                           const Tensor& out) {
  backward_impl(din, dout, in, out, /*add=*/false);
}

void BatchNorm2d::backward_add(Tensor& dacc, Tensor& dout, const Tensor& in, const Tensor& out) {
  CHECK(dacc.shape() == in.shape() && !overlaps(dacc, dout), "BatchNorm2d backward_add: dacc ",
        dacc.shape().str(), " vs in ", in.shape().str(), ", apart from dout");
  if (dacc.device() == Device::CPU) return backward_impl(dacc, dout, in, out, /*add=*/true);
  backward_impl(dout, dout, in, out, /*add=*/false);
  accumulate(dacc, dout);
}

void BatchNorm2d::backward_impl(Tensor& din, const Tensor& dout, const Tensor& in,
                                const Tensor& out, bool add) {
  CHECK(dout.shape() == in.shape(), "BatchNorm2d backward: dout ", dout.shape().str(),
        " vs in ", in.shape().str());
  CHECK(!din.defined() || din.shape() == in.shape(), "BatchNorm2d backward: din ",
        din.shape().str(), " vs in ", in.shape().str());
  CHECK(!fused_relu_ || out.shape() == in.shape(), "BatchNorm2d backward with a fused ReLU: out ",
        out.shape().str(), " vs in ", in.shape().str());
  const int64_t N = in.size(0), C = channels_, HW = in.size(2) * in.size(3), M = N * HW;
  if (frozen_ && !din.defined()) return;
  if (on_gpu_as("BatchNorm2d backward", in.format(), {&din, &dout, &in, fused_relu_ ? &out : nullptr},
                {&weight})) {
    gpu::backend().batchnorm_backward(in.format(), din.defined() ? din.raw() : nullptr,
                                      frozen_ ? nullptr : grad_weight.data(),
                                      frozen_ ? nullptr : grad_bias.data(), dout.raw(),
                                      fused_relu_ ? out.raw() : nullptr, in.raw(), weight.data(),
                                      saved_mean_.data(), saved_invstd_.data(), N, C, HW,
                                      saved_training_);
    return;
  }
  // The channels' backward over x of element type T (float32, or the bf16 copy).
  auto run = [&]<class T>(const T* x) {
    const real* dy = dout.data();
    const real* y = fused_relu_ ? out.data() : nullptr;
    real* dx = din.defined() ? din.data() : nullptr;
    const real* mean_s = saved_mean_.data();
    const real* invstd_s = saved_invstd_.data();
    const real* g = weight.data();
    real* gw = frozen_ ? nullptr : grad_weight.data();  // frozen: no parameter gradients
    real* gb = frozen_ ? nullptr : grad_bias.data();
    const bool batch_stats = saved_training_;
    const auto channel = add ? channel_fn<T, true>(fused_relu_) : channel_fn<T, false>(fused_relu_);
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < C; ++c) {
      const real mean = mean_s[c], invstd = invstd_s[c];
      double sdy, sdyx;
      channel(dx, &sdy, &sdyx, x, dy, y, N, C, c, HW, mean, invstd, g[c] * invstd, batch_stats,
              M);
      if (gw) {
        if constexpr (!MUTANT(2)) gb[c] += real(sdy);
        gw[c] += real(sdyx);
      }
    }
  };
  // A bf16-input layer's input memory may hold its output by now (in place): its copy is x.
  if (bf16_input_) run(static_cast<const uint16_t*>(x16_.get()));
  else run(in.data());
}

}  // namespace mpicnn
