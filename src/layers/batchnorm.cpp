// BatchNorm2d on CPU: one OpenMP task per channel, double accumulators for the statistics
// (sums over N*H*W can reach millions of terms).
#include "layers/batchnorm.h"

#include <cmath>

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
  store.buffer_i64(prefix + "num_batches_tracked", &num_batches_tracked);
}

void BatchNorm2d::reset_parameters(uint64_t /*seed*/) {
  weight.fill(1.f);
  bias.fill(0.f);
  running_mean.fill(0.f);
  running_var.fill(1.f);
  num_batches_tracked = 0;
}

void BatchNorm2d::forward(Tensor& out, const Tensor& in) {
  CHECK(in.dim() == 4 && in.size(1) == channels_, "BatchNorm2d(", channels_,
        "): input must be (N, ", channels_, ", H, W), got ", in.shape().str());
  CHECK(out.shape() == in.shape(), "BatchNorm2d: out ", out.shape().str(), " vs in ",
        in.shape().str());
  CHECK(weight.defined(), "BatchNorm2d: parameters not allocated (ParamStore::allocate)");
  const int64_t N = in.size(0), C = channels_, HW = in.size(2) * in.size(3), M = N * HW;
  const bool train = training_ && !use_running_stats_;
  if (train) CHECK(M > 1, "BatchNorm2d: training needs more than one value per channel, got input ", in.shape().str());
  if (on_gpu("BatchNorm2d", {&out, &in, &weight, &saved_mean_})) {
    gpu::backend().batchnorm_forward(out.data(), saved_mean_.data(), saved_invstd_.data(),
                                     running_mean.data(), running_var.data(), in.data(),
                                     weight.data(), bias.data(), N, C, HW, eps_, momentum_, train);
    if (train) ++num_batches_tracked;
    saved_training_ = train;
    return;
  }
  const real* x = in.data();
  real* y = out.data();
  real* mean_s = saved_mean_.data();
  real* invstd_s = saved_invstd_.data();
  real* rm = running_mean.data();
  real* rv = running_var.data();
  const real* g = weight.data();
  const real* b = bias.data();

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
      const real* p = x + (n * C + c) * HW;
      real* q = y + (n * C + c) * HW;
#pragma omp simd
      for (int64_t i = 0; i < HW; ++i) q[i] = p[i] * scale + shift;
    }
  }
  if (train) ++num_batches_tracked;
  saved_training_ = train;
}

void BatchNorm2d::backward(Tensor& din, const Tensor& dout, const Tensor& in,
                           const Tensor& /*out*/) {
  CHECK(dout.shape() == in.shape(), "BatchNorm2d backward: dout ", dout.shape().str(),
        " vs in ", in.shape().str());
  CHECK(!din.defined() || din.shape() == in.shape(), "BatchNorm2d backward: din ",
        din.shape().str(), " vs in ", in.shape().str());
  const int64_t N = in.size(0), C = channels_, HW = in.size(2) * in.size(3), M = N * HW;
  if (frozen_ && !din.defined()) return;
  if (on_gpu("BatchNorm2d backward", {&din, &dout, &in, &weight})) {
    gpu::backend().batchnorm_backward(din.defined() ? din.data() : nullptr,
                                      frozen_ ? nullptr : grad_weight.data(),
                                      frozen_ ? nullptr : grad_bias.data(), dout.data(), in.data(), weight.data(),
                                      saved_mean_.data(), saved_invstd_.data(), N, C, HW,
                                      saved_training_);
    return;
  }
  const real* x = in.data();
  const real* dy = dout.data();
  real* dx = din.defined() ? din.data() : nullptr;
  const real* mean_s = saved_mean_.data();
  const real* invstd_s = saved_invstd_.data();
  const real* g = weight.data();
  real* gw = frozen_ ? nullptr : grad_weight.data();  // frozen: no parameter gradients
  real* gb = frozen_ ? nullptr : grad_bias.data();
  const bool batch_stats = saved_training_;

#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < C; ++c) {
    const real mean = mean_s[c], invstd = invstd_s[c];
    // sum(dy) and sum(dy * xhat) give dbias, dweight and the batch-statistics terms of dx.
    double sdy = 0, sdyx = 0;
    for (int64_t n = 0; n < N; ++n) {
      const real* p = x + (n * C + c) * HW;
      const real* d = dy + (n * C + c) * HW;
      double a = 0, bsum = 0;
#pragma omp simd reduction(+ : a, bsum)
      for (int64_t i = 0; i < HW; ++i) {
        a += d[i];
        bsum += d[i] * ((p[i] - mean) * invstd);
      }
      sdy += a;
      sdyx += bsum;
    }
    if (gw) {
      if constexpr (!MUTANT(2)) gb[c] += real(sdy);
      gw[c] += real(sdyx);
    }
    if (!dx) continue;
    const real k = g[c] * invstd;
    // Training: dx = g*invstd * (dy - mean(dy) - xhat * mean(dy*xhat)); eval: dx = g*invstd*dy.
    const real mdy = batch_stats ? real(sdy / double(M)) : 0.f;
    const real mdyx = batch_stats ? real(sdyx / double(M)) : 0.f;
    for (int64_t n = 0; n < N; ++n) {
      const real* p = x + (n * C + c) * HW;
      const real* d = dy + (n * C + c) * HW;
      real* q = dx + (n * C + c) * HW;
#pragma omp simd
      for (int64_t i = 0; i < HW; ++i) q[i] = k * (d[i] - mdy - (p[i] - mean) * invstd * mdyx);
    }
  }
}

}  // namespace mpicnn
