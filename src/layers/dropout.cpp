// Dropout: counter-based draws (Philox), recomputed in backward; the GPU kernel draws the
// same mask.
#include "layers/dropout.h"

#include "core/gpu.h"
#include "core/rng.h"

namespace mpicnn {

Dropout::Dropout(real p) : p_(p) {
  CHECK(p >= 0.f && p < 1.f, "Dropout: p must be in [0, 1), got ", p);
  name_stream_ = stream_id("dropout");
}

void Dropout::register_state(ParamStore& /*store*/, const std::string& prefix) {
  name_stream_ = stream_id(prefix + "dropout");
}

void Dropout::set_draw(uint64_t seed, uint64_t step, uint64_t first_sample) {
  seed_ = seed;
  step_ = step;
  first_sample_ = first_sample;
  pending_advance_ = false;
}

bool Dropout::keep(uint64_t sample, uint64_t i, uint64_t per_sample) const {
  // One stream per (layer, step); index = global element position within the step.
  Rng rng(seed_, name_stream_ ^ (step_ * 0x9E3779B97F4A7C15ull));
  return rng.uniform((first_sample_ + sample) * per_sample + i) >= p_;
}

void Dropout::apply(Tensor& out, const Tensor& in, bool gpu) const {
  const Shape& shape = in.shape();
  const int64_t N = shape[0], per = shape.numel() / (N ? N : 1);
  const real scale = 1.f / (1.f - p_);
  const uint64_t stream = name_stream_ ^ (step_ * 0x9E3779B97F4A7C15ull);
  if (gpu) {  // the same Philox draws as keep() (by NCHW index in any format), on the GPU
    const int64_t H = shape.ndim == 4 ? shape[2] : 1, W = shape.ndim == 4 ? shape[3] : 1;
    return gpu::backend().dropout(in.format(), out.raw(), in.raw(), N, per / (H * W), H, W,
                                  seed_, stream, first_sample_, p_, scale);
  }
  const real* x = in.data();
  real* y = out.data();
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < per; ++i)
      y[n * per + i] = keep(uint64_t(n), uint64_t(i), uint64_t(per)) ? x[n * per + i] * scale : 0.f;
}

void Dropout::forward(Tensor& out, const Tensor& in) {
  CHECK(out.shape() == in.shape() && in.dim() >= 1, "Dropout: out ", out.shape().str(),
        " vs in ", in.shape().str());
  if (pending_advance_) ++step_;  // no set_draw since the last forward: a new step
  if (!training_ || p_ == 0.f) {
    if (out.raw() != in.raw()) out.copy_from(in);
    pending_advance_ = false;
    return;
  }
  apply(out, in, on_gpu_as("Dropout", in.format(), {&out, &in}));
  pending_advance_ = true;
}

void Dropout::backward(Tensor& din, const Tensor& dout, const Tensor& /*in*/,
                       const Tensor& /*out*/) {
  if (!din.defined()) return;
  CHECK(din.shape() == dout.shape(), "Dropout backward: din ", din.shape().str(), " vs dout ",
        dout.shape().str());
  if (!training_ || p_ == 0.f) {
    if (din.raw() != dout.raw()) din.copy_from(dout);
    return;
  }
  // The same key as the forward: the same mask.
  apply(din, dout, on_gpu_as("Dropout backward", dout.format(), {&din, &dout}));
}

}  // namespace mpicnn
