// Folding an eval-mode BatchNorm2d into the Conv2d before it (layers/fold_math.h, the per-element
// math kernels/fold.cu runs for GPU inference), checked on the host without a GPU: the CPU
// Conv2d run on the folded w', b' against conv-then-BatchNorm computed in double, within a
// float32 bound derived below; and the opt-in switch (ExecConfig::fold, core/exec.h), which never
// changes a CPU model. The GPU path itself (FoldedConv, the fused cuDNN call) is
// tests/test_cuda.cpp's.
#include <cmath>
#include <cstring>

#include "layers/conv2d.h"
#include "layers/fold_math.h"
#include "models/registry.h"
#include "testing.h"

using namespace mpicnn;
using mpicnn::testing::fill_uniform;
using mpicnn::testing::random_tensor;

namespace {

// Conv2d with its own slabs, 3x3, stride 1, padding 1, planned for x.
struct Conv {
  Conv2d conv;
  ParamStore store;
  Conv(int in, int out, bool bias, const Shape& x)
      : conv(Conv2dOptions{.in_channels = in, .out_channels = out, .kernel = 3, .padding = 1,
                           .bias = bias}) {
    conv.register_state(store, "conv.");
    store.allocate();
    conv.plan(x, testing::exec());
  }
};

// An eval BatchNorm2d's parameters and running statistics, per channel.
struct BnStats {
  std::vector<float> gamma, beta, mean, var;
};

// The float32 bound of |conv(x, w') + b' - y*| for one output, y* = (v - mean) * s + beta exactly,
// v = sum_k w_k x_k + b, s = gamma / sqrt(var + eps). With u = 2^-24 and every rounding a factor
// (1 + d), |d| <= u (the one double rounding inside invstd adds 2^-53, within the slack below):
//   s~   = s (1 + d1)(1 + d2)                       invstd rounded to float, times gamma
//   w'_k = w_k s~ (1 + d3k)                         fold_math::weight
//   b'   = ((b - mean)(1 + d4) s~ + beta)(1 + d5)   fold_math::bias (b - mean, then one fma)
// and the convolution sums the K products w'_k x_k and b' in float, in any order, with or without
// FMAs: each term carries at most K + 1 further factors. So every term of y* is perturbed by at
// most K + 5 factors, and with gamma_n = n u / (1 - n u) (Higham, Lemma 3.1):
//   |y~ - y*| <= gamma_{K+5} (|s| sum_k |w_k x_k| + |s| |b - mean| + |beta|).
// The reference itself is double (error ~K 2^-53 of the same sum): gamma_{K+6} covers both.
double bound(int64_t K, double magnitude) {
  const double u = std::ldexp(1.0, -24), n = double(K + 6);
  return n * u / (1 - n * u) * magnitude;
}

// max over outputs of |folded - exact| / bound (<= 1: within the bound), for the folded
// convolution conv(x, w') + b' of a convolution (w, b) followed by BatchNorm `bn` with `eps`.
// fold_eps is the eps the fold is given (a wrong one shows the check can fail).
double folded_error_ratio(const Shape& xs, bool with_bias, const BnStats& bn, float eps,
                          float fold_eps) {
  const int IC = int(xs[1]), OC = int(bn.gamma.size());
  Conv orig(IC, OC, with_bias, xs), folded(IC, OC, true, xs);
  fill_uniform(orig.conv.weight, 3, -0.5f, 0.5f);
  if (with_bias) fill_uniform(orig.conv.bias, 4, -0.5f, 0.5f);
  const int64_t per_oc = orig.conv.weight.numel() / OC;
  for (int64_t i = 0; i < orig.conv.weight.numel(); ++i)
    fold_math::fold_element(folded.conv.weight.data(), folded.conv.bias.data(),
                            orig.conv.weight.data(), with_bias ? orig.conv.bias.data() : nullptr,
                            bn.gamma.data(), bn.beta.data(), bn.mean.data(), bn.var.data(),
                            fold_eps, per_oc, i);
  const Tensor x = random_tensor(xs, 5);
  Tensor y = Tensor::empty(folded.conv.output_shape(xs));
  folded.conv.forward(y, x);

  const int64_t N = xs[0], H = xs[2], W = xs[3];
  const float* w = orig.conv.weight.data();
  double worst = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int oc = 0; oc < OC; ++oc) {
      const double s = double(bn.gamma[size_t(oc)]) / std::sqrt(double(bn.var[size_t(oc)]) + double(eps));
      const double b = with_bias ? double(orig.conv.bias.data()[oc]) : 0.0;
      for (int64_t h = 0; h < H; ++h)
        for (int64_t ww = 0; ww < W; ++ww) {
          double v = b, mag = 0;
          for (int ic = 0; ic < IC; ++ic)
            for (int kh = 0; kh < 3; ++kh)
              for (int kw = 0; kw < 3; ++kw) {
                const int64_t ih = h + kh - 1, iw = ww + kw - 1;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                const double p = double(x.data()[((n * IC + ic) * H + ih) * W + iw]) *
                                 double(w[((oc * IC + ic) * 3 + kh) * 3 + kw]);
                v += p;
                mag += std::fabs(p);
              }
          const double mean = bn.mean[size_t(oc)], beta = bn.beta[size_t(oc)];
          const double want = (v - mean) * s + beta;
          const double m = std::fabs(s) * (mag + std::fabs(b - mean)) + std::fabs(beta);
          const double got = y.data()[((n * OC + oc) * H + h) * W + ww];
          worst = std::max(worst, std::isfinite(got) ? std::fabs(got - want) / bound(per_oc, m)
                                                     : INFINITY);
        }
    }
  return worst;
}

// Channel 0 has zero variance (s = gamma / sqrt(eps)), channel 1 a variance far below eps; the
// others random, with negative gammas and means of both signs.
BnStats stats(int channels) {
  BnStats bn;
  Tensor t = Tensor::empty({4, channels});
  fill_uniform(t, 7, -1.f, 1.f);
  for (int c = 0; c < channels; ++c) {
    const float* r = t.data();
    bn.gamma.push_back(r[c] * 1.5f);
    bn.beta.push_back(r[channels + c] * 0.5f);
    bn.mean.push_back(r[2 * channels + c] * 0.3f);
    bn.var.push_back(c == 0 ? 0.f : c == 1 ? 1e-7f : 0.5f + std::fabs(r[3 * channels + c]));
  }
  return bn;
}

}  // namespace

TEST_CASE("fold: the folded convolution equals conv then eval BatchNorm within the float32 bound") {
  const Shape xs{2, 5, 6, 7};
  const BnStats bn = stats(6);
  for (const float eps : {1e-5f, 1e-3f, 0.1f})
    for (const bool with_bias : {true, false}) {
      CAPTURE(eps);
      CAPTURE(with_bias);
      const double r = folded_error_ratio(xs, with_bias, bn, eps, eps);
      INFO("max error / bound ", r);
      CHECK(r <= 1.0);
      // The check can fail: the fold of another eps (the zero-variance channel then scales by
      // 1 / sqrt(eps / 10) instead of 1 / sqrt(eps)) is far outside the bound.
      CHECK(folded_error_ratio(xs, with_bias, bn, eps, eps / 10) > 100.0);
    }
}

TEST_CASE("fold: a bias-less convolution's folded bias is BatchNorm's own shift, bit for bit") {
  const BnStats bn = stats(6);
  const float w[6] = {0.25f, -1.5f, 3.f, 0.f, -0.125f, 7.f}, eps = 1e-5f;
  float wf[6], bf[6];
  for (int64_t i = 0; i < 6; ++i)
    fold_math::fold_element(wf, bf, w, nullptr, bn.gamma.data(), bn.beta.data(), bn.mean.data(),
                            bn.var.data(), eps, 1, i);
  for (size_t c = 0; c < 6; ++c) {
    CAPTURE(c);
    // BatchNorm2d's eval invstd (batchnorm.cpp, kernels/batchnorm.cu): the float eps in double.
    const float invstd = float(1.0 / std::sqrt(double(bn.var[c]) + double(eps)));
    const float scale = bn_math::scale(bn.gamma[c], invstd);
    CHECK(std::isfinite(scale));
    CHECK(bf[c] == bn_math::shift(bn.beta[c], bn.mean[c], scale));
    CHECK(wf[c] == w[c] * scale);
  }
}

TEST_CASE("fold: the switch is GPU-only, and a CPU model with it on computes the same bits") {
  ExecConfig gpu = testing::exec();
  gpu.device = Device::CUDA;
  CHECK(!gpu.folds());  // opt-in: off by default
  gpu.fold = true;
  CHECK(gpu.folds());
  ExecConfig cpu = testing::exec();
  cpu.fold = true;
  CHECK(!cpu.folds());  // never on the CPU

  // resnet18 (stem and downsample Sequentials, residual blocks) in eval mode with non-trivial
  // BatchNorm statistics: the same logits and the same state with the switch on and off.
  ModelOptions mo;
  mo.num_classes = 10;
  const Tensor x = random_tensor({2, 3, 32, 32}, 9);
  std::vector<float> logits[2], state[2];
  for (const bool on : {false, true}) {
    cpu.fold = on;
    auto m = build_model("resnet18", mo, 5);
    fill_uniform(m->params().buffers(), 12, 0.5f, 1.5f);  // running means and variances
    m->set_training(false);
    m->plan({2, 3, 32, 32}, cpu);
    const Tensor& y = m->forward(x);
    logits[on].assign(y.data(), y.data() + y.numel());
    const Tensor& v = m->params().values();
    state[on].assign(v.data(), v.data() + v.numel());
  }
  CHECK(std::memcmp(logits[0].data(), logits[1].data(), logits[0].size() * sizeof(float)) == 0);
  CHECK(state[0] == state[1]);
}
