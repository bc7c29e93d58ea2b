// Residual add and gradient accumulation on CPU; CUDA tensors go to kernels/add.cu.
#include "layers/add.h"

#include "core/gpu.h"

namespace mpicnn {

void Add::forward(Tensor& out, const Tensor& a, const Tensor& b) {
  CHECK(a.shape() == b.shape() && out.shape() == a.shape(), "Add: shapes ", a.shape().str(),
        " + ", b.shape().str(), " -> ", out.shape().str());
  if (on_gpu_as("Add", a.format(), {&out, &a, &b}))
    return gpu::backend().add(a.format().elem, out.raw(), a.raw(), b.raw(), a.numel());
  const real* x = a.data();
  const real* y = b.data();
  real* z = out.data();
  const int64_t n = a.numel();
#pragma omp parallel for simd schedule(static) if (n > 32768)
  for (int64_t i = 0; i < n; ++i) z[i] = x[i] + y[i];
}

void Add::backward(Tensor& da, Tensor& db, const Tensor& dout) {
  for (Tensor* d : {&da, &db}) {
    if (!d->defined() || d->raw() == dout.raw()) continue;
    CHECK(d->shape() == dout.shape(), "Add backward: ", d->shape().str(), " vs dout ",
          dout.shape().str());
    d->copy_from(dout);
  }
}

void accumulate(Tensor& dst, const Tensor& src) {
  CHECK(dst.shape() == src.shape(), "accumulate: ", src.shape().str(), " into ",
        dst.shape().str());
  if (on_gpu_as("accumulate", dst.format(), {&dst, &src}))
    return gpu::backend().accumulate(dst.format().elem, dst.raw(), src.raw(), dst.numel());
  real* d = dst.data();
  const real* s = src.data();
  const int64_t n = dst.numel();
#pragma omp parallel for simd schedule(static) if (n > 32768)
  for (int64_t i = 0; i < n; ++i) d[i] += s[i];
}

}  // namespace mpicnn
