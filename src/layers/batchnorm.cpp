// BatchNorm2d on CPU: one OpenMP task per channel, double accumulators for the statistics
// (sums over N*H*W can reach millions of terms).
#include "layers/batchnorm.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/gpu.h"
#include "core/mutant.h"

namespace mpicnn {

BatchNorm2d::BatchNorm2d(int channels, real eps, real momentum)
    : channels_(channels), eps_(eps), momentum_(momentum) {
  CHECK(channels >= 1, "BatchNorm2d: channels must be >= 1, got ", channels);
  CHECK(eps > 0.f, "BatchNorm2d: eps must be > 0");
  CHECK(momentum >= 0.f && momentum <= 1.f, "BatchNorm2d: momentum must be in [0, 1]");
  saved_mean_ = Tensor::zeros({channels});
  saved_invstd_ = Tensor::zeros({channels});
}

void BatchNorm2d::plan(const Shape& /*in*/) {
  // Saved statistics live where the activations do (the model's device).
  saved_mean_ = Tensor::zeros({channels_});
  saved_invstd_ = Tensor::zeros({channels_});
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

// One (n, c) plane of the forward's apply pass: q = p * scale + shift, plus the residual r,
// then the ReLU; the same expressions, in the same order, as the separate layers compute them
// (BatchNorm, then accumulate, then ReLU), so fused and unfused results are bit-identical.
// q may be p (an inference plan runs BatchNorm in place: module.h's plan_mode).
template <bool kResidual, bool kRelu>
void apply_plane(real* q, const real* p, const real* __restrict r,
                 real scale, real shift, int64_t hw) {
#pragma omp simd
  for (int64_t i = 0; i < hw; ++i) {
    real v = p[i] * scale + shift;
    if constexpr (kResidual) v += r[i];
    if constexpr (kRelu) v = v > 0.f ? v : 0.f;
    q[i] = v;
  }
}

using ApplyFn = void (*)(real*, const real*, const real*, real, real, int64_t);

ApplyFn apply_fn(bool residual, bool relu) {
  if (residual) return relu ? apply_plane<true, true> : apply_plane<true, false>;
  return relu ? apply_plane<false, true> : apply_plane<false, false>;
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
  if (on_gpu("BatchNorm2d", {&out, &in, &weight, &saved_mean_, residual})) {
    gpu::backend().batchnorm_forward(out.data(), saved_mean_.data(), saved_invstd_.data(),
                                     running_mean.data(), running_var.data(), in.data(),
                                     weight.data(), bias.data(),
                                     residual ? residual->data() : nullptr, relu, N, C, HW, eps_,
                                     momentum_, train);
    if (train) ++num_batches_tracked;
    saved_training_ = train;
    return;
  }
  const real* x = in.data();
  const real* res = residual ? residual->data() : nullptr;
  real* y = out.data();
  real* mean_s = saved_mean_.data();
  real* invstd_s = saved_invstd_.data();
  real* rm = running_mean.data();
  real* rv = running_var.data();
  const real* g = weight.data();
  const real* b = bias.data();
  const ApplyFn apply = apply_fn(res != nullptr, relu);

#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < C; ++c) {
    real mean, invstd;
    if (train) {
      double s = 0, ss = 0;
      for (int64_t n = 0; n < N; ++n) {
        const real* p = x + (n * C + c) * HW;
        double ps = 0;
#pragma omp simd reduction(+ : ps)
        for (int64_t i = 0; i < HW; ++i) ps += p[i];
        s += ps;
      }
      const double mu = s / double(M);
      for (int64_t n = 0; n < N; ++n) {
        const real* p = x + (n * C + c) * HW;
        double pss = 0;
#pragma omp simd reduction(+ : pss)
        for (int64_t i = 0; i < HW; ++i) pss += (p[i] - mu) * (p[i] - mu);
        ss += pss;
      }
      const double var = ss / double(M);  // biased: used to normalise
      mean = real(mu);
      invstd = real(1.0 / std::sqrt(var + double(eps_)));
      // Running stats use the unbiased variance, as PyTorch does.
      rm[c] = real((1.0 - momentum_) * rm[c] + momentum_ * mu);
      rv[c] = real((1.0 - momentum_) * rv[c] + momentum_ * var * (MUTANT(3) ? 1.0 : double(M) / double(M - 1)));
    } else {
      mean = rm[c];
      invstd = real(1.0 / std::sqrt(double(rv[c]) + double(eps_)));
    }
    mean_s[c] = mean;
    invstd_s[c] = invstd;
    const real scale = g[c] * invstd, shift = b[c] - mean * scale;
    for (int64_t n = 0; n < N; ++n) {
      const int64_t off = (n * C + c) * HW;
      apply(y + off, x + off, res ? res + off : nullptr, scale, shift, HW);
    }
  }
  if (train) ++num_batches_tracked;
  saved_training_ = train;
}

namespace {

// Backward of one channel over its N planes: the sums of dy and dy * xhat, then (when dx is
// wanted) dx. With kRelu, dy is the gradient of the fused ReLU's output y: the ReLU's backward
// (y > 0 ? dy : 0, as ReLU::backward computes it) is applied as the values are read.
template <bool kRelu>
void channel_backward(real* dx, double* sdy_out, double* sdyx_out, const real* x, const real* dy,
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
    const real* p = x + (n * C + c) * HW;
    const real* d = dy + (n * C + c) * HW;
    const real* yy = kRelu ? y + (n * C + c) * HW : nullptr;
    double a = 0, bsum = 0;
#pragma omp simd reduction(+ : a, bsum)
    for (int64_t i = 0; i < HW; ++i) {
      const real gi = grad(d, yy, i);
      a += gi;
      bsum += gi * ((p[i] - mean) * invstd);
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
    const real* p = x + (n * C + c) * HW;
    const real* d = dy + (n * C + c) * HW;
    const real* yy = kRelu ? y + (n * C + c) * HW : nullptr;
    real* q = dx + (n * C + c) * HW;
#pragma omp simd
    for (int64_t i = 0; i < HW; ++i)
      q[i] = k * (grad(d, yy, i) - mdy - (p[i] - mean) * invstd * mdyx);
  }
}

}  // namespace

void BatchNorm2d::backward(Tensor& din, const Tensor& dout, const Tensor& in,
                           const Tensor& out) {
  CHECK(dout.shape() == in.shape(), "BatchNorm2d backward: dout ", dout.shape().str(),
        " vs in ", in.shape().str());
  CHECK(!din.defined() || din.shape() == in.shape(), "BatchNorm2d backward: din ",
        din.shape().str(), " vs in ", in.shape().str());
  CHECK(!fused_relu_ || out.shape() == in.shape(), "BatchNorm2d backward with a fused ReLU: out ",
        out.shape().str(), " vs in ", in.shape().str());
  const int64_t N = in.size(0), C = channels_, HW = in.size(2) * in.size(3), M = N * HW;
  if (frozen_ && !din.defined()) return;
  if (on_gpu("BatchNorm2d backward", {&din, &dout, &in, &weight})) {
    gpu::backend().batchnorm_backward(din.defined() ? din.data() : nullptr,
                                      frozen_ ? nullptr : grad_weight.data(),
                                      frozen_ ? nullptr : grad_bias.data(), dout.data(),
                                      fused_relu_ ? out.data() : nullptr, in.data(), weight.data(),
                                      saved_mean_.data(), saved_invstd_.data(), N, C, HW,
                                      saved_training_);
    return;
  }
  const real* x = in.data();
  const real* dy = dout.data();
  const real* y = fused_relu_ ? out.data() : nullptr;
  real* dx = din.defined() ? din.data() : nullptr;
  const real* mean_s = saved_mean_.data();
  const real* invstd_s = saved_invstd_.data();
  const real* g = weight.data();
  real* gw = frozen_ ? nullptr : grad_weight.data();  // frozen: no parameter gradients
  real* gb = frozen_ ? nullptr : grad_bias.data();
  const bool batch_stats = saved_training_;
  const auto channel = fused_relu_ ? channel_backward<true> : channel_backward<false>;

#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < C; ++c) {
    const real mean = mean_s[c], invstd = invstd_s[c];
    double sdy, sdyx;
    channel(dx, &sdy, &sdyx, x, dy, y, N, C, c, HW, mean, invstd, g[c] * invstd, batch_stats, M);
    if (gw) {
      if constexpr (!MUTANT(2)) gb[c] += real(sdy);
      gw[c] += real(sdyx);
    }
  }
}

}  // namespace mpicnn
