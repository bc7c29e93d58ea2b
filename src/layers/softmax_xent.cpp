// Softmax cross-entropy on CPU: max-shifted log-sum-exp per row, double accumulation; CUDA
// logits go to kernels/softmax_xent.cu, which does the same per row.
#include "layers/softmax_xent.h"

#include <cmath>
#include <cstring>

#include "core/gpu.h"

namespace mpicnn {

SoftmaxCrossEntropy::SoftmaxCrossEntropy(real label_smoothing) : eps_(label_smoothing) {
  CHECK(label_smoothing >= 0.f && label_smoothing <= 1.f,
        "label smoothing must be in [0, 1], got ", label_smoothing);
}

void SoftmaxCrossEntropy::plan(int64_t max_batch, int64_t classes, Device device) {
  CHECK(max_batch >= 1 && classes >= 1, "SoftmaxCrossEntropy: bad plan ", max_batch, " x ",
        classes);
  probs_ = Tensor::empty({max_batch, classes}, device);
  targets_dev_ = targets_host_ = rows_dev_ = rows_host_ = nullptr;
  copied_ = nullptr;
  if (device == Device::CUDA) {
    gpu::Backend& g = gpu::backend();
    const size_t n = size_t(max_batch);
    targets_dev_ = g.alloc(n * sizeof(int32_t));
    targets_host_ = g.alloc_pinned(n * sizeof(int32_t));
    rows_dev_ = g.alloc(n * sizeof(double));
    rows_host_ = g.alloc_pinned(n * sizeof(double));
    copied_ = g.event();
  }
}

void SoftmaxCrossEntropy::forward(const Tensor& logits, const int32_t* targets) {
  CHECK(logits.dim() == 2, "cross-entropy: logits must be (N, C), got ", logits.shape().str());
  const int64_t N = logits.size(0), C = logits.size(1);
  CHECK(probs_.defined() && probs_.size(1) == C && N <= probs_.size(0),
        "cross-entropy: planned for ", probs_.shape().str(), ", got logits ",
        logits.shape().str());
  for (int64_t n = 0; n < N; ++n)
    CHECK(targets[n] >= 0 && targets[n] < C, "label ", targets[n], " of sample ", n,
          " is out of range for ", C, " classes");
  probs_view_ = probs_.slice0(0, N);
  rows_ = N;
  loss_known_ = false;
  if (on_gpu("cross-entropy", {&logits, &probs_})) {
    gpu::Backend& g = gpu::backend();
    g.wait(*copied_);  // the last forward's copies are done with the staging buffers
    const size_t tb = size_t(N) * sizeof(int32_t);
    std::memcpy(targets_host_.get(), targets, tb);
    g.copy_async(targets_dev_.get(), true, targets_host_.get(), false, tb);
    auto* rows = static_cast<double*>(rows_dev_.get());
    g.softmax_xent_forward(probs_view_.data(), rows, logits.data(),
                           static_cast<const int32_t*>(targets_dev_.get()), N, C, eps_);
    g.copy_async(rows_host_.get(), false, rows, true, size_t(N) * sizeof(double));
    g.record(*copied_);
    return;
  }
  const real* z = logits.data();
  real* p = probs_view_.data();
  double total = 0;
#pragma omp parallel for schedule(static) reduction(+ : total) if (N * C > 16384)
  for (int64_t n = 0; n < N; ++n) {
    const real* zr = z + n * C;
    real* pr = p + n * C;
    real mx = zr[0];
    for (int64_t c = 1; c < C; ++c) mx = std::max(mx, zr[c]);
    double sum = 0, sum_z = 0;
    for (int64_t c = 0; c < C; ++c) {
      double e = std::exp(double(zr[c]) - mx);
      pr[c] = real(e);
      sum += e;
      sum_z += double(zr[c]) - mx;
    }
    const double lse = std::log(sum);  // log-sum-exp of the shifted logits
    for (int64_t c = 0; c < C; ++c) pr[c] = real(double(pr[c]) / sum);
    const double nll = lse - (double(zr[targets[n]]) - mx);
    const double smooth = lse - sum_z / double(C);  // mean over classes of -log p
    total += (1.0 - eps_) * nll + eps_ * smooth;
  }
  loss_ = total / double(N);
  loss_known_ = true;
}

double SoftmaxCrossEntropy::loss() {
  CHECK(rows_ > 0, "cross-entropy: loss() before forward()");
  if (!loss_known_) {  // the GPU's row losses: add them in row order, as the CPU does
    gpu::backend().wait(*copied_);
    const double* r = static_cast<const double*>(rows_host_.get());
    double total = 0;
    for (int64_t n = 0; n < rows_; ++n) total += r[n];
    loss_ = total / double(rows_);
    loss_known_ = true;
  }
  return loss_;
}

void SoftmaxCrossEntropy::backward(Tensor& dlogits, const int32_t* targets, real scale) const {
  CHECK(dlogits.shape() == probs_view_.shape(), "cross-entropy backward: dlogits ",
        dlogits.shape().str(), " vs logits ", probs_view_.shape().str());
  const int64_t N = dlogits.size(0), C = dlogits.size(1);
  if (on_gpu("cross-entropy backward", {&dlogits, &probs_view_})) {
    // The targets forward copied to the device (backward gets the same batch's labels).
    return gpu::backend().softmax_xent_backward(dlogits.data(), probs_view_.data(),
                                                static_cast<const int32_t*>(targets_dev_.get()),
                                                N, C, eps_, scale);
  }
  const real k = scale / real(N), off = eps_ / real(C);
  const real* p = probs_view_.data();
  real* d = dlogits.data();
#pragma omp parallel for schedule(static) if (N * C > 16384)
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t c = 0; c < C; ++c) d[n * C + c] = k * (p[n * C + c] - off);
    d[n * C + targets[n]] -= k * (1.f - eps_);
  }
}

}  // namespace mpicnn
