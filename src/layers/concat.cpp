// Channel concat: per sample, each input's channels are one contiguous block (memcpy on the
// CPU, one pitched device copy per input on the GPU); on the GPU's channels-last path
// (--gpu-layout nhwc) per pixel, each input's channels a contiguous run of the output's.
#include "layers/concat.h"

#include <cstring>

#include "core/gpu.h"

namespace mpicnn {

Shape Concat::output_shape(const std::vector<Shape>& ins) {
  CHECK(!ins.empty(), "Concat: no inputs");
  const Shape& s0 = ins[0];
  CHECK(s0.ndim == 4, "Concat: inputs must be (N, C, H, W), got ", s0.str());
  int64_t C = 0;
  for (const Shape& s : ins) {
    CHECK(s.ndim == 4 && s[0] == s0[0] && s[2] == s0[2] && s[3] == s0[3],
          "Concat: input ", s.str(), " does not match ", s0.str(), " outside the channels");
    C += s[1];
  }
  return {s0[0], C, s0[2], s0[3]};
}

namespace {
// The GPU's view of a channel concat: the whole is `rows` runs of `pitch` bytes, in which each
// part's channels are one contiguous run of channels * `run` bytes. NCHW: a run per image
// (channels * H * W elements); NHWC (the typed path): a run per pixel (channels elements).
struct Runs {
  size_t rows, run, pitch;
  explicit Runs(const Tensor& whole) {
    const size_t e = elem_bytes(whole.format().elem);
    const int64_t per_row = whole.format().order == Order::NHWC ? 1 : whole.size(2) * whole.size(3);
    rows = size_t(whole.numel() / (whole.size(1) * per_row));
    run = size_t(per_row) * e;
    pitch = size_t(whole.size(1)) * run;
  }
};
}  // namespace

void Concat::forward(Tensor& out, std::span<const Tensor* const> ins) {
  // Checked without building a shape list: the training step must not allocate.
  CHECK(!ins.empty() && out.dim() == 4, "Concat: needs inputs and a 4-D output, got ",
        out.shape().str());
  const int64_t N = out.size(0), HW = out.size(2) * out.size(3), Cout = out.size(1);
  int64_t total = 0;
  for (const Tensor* t : ins) {
    CHECK(t->dim() == 4 && t->size(0) == N && t->size(2) == out.size(2) &&
              t->size(3) == out.size(3),
          "Concat: input ", t->shape().str(), " does not match out ", out.shape().str(),
          " outside the channels");
    total += t->size(1);
  }
  CHECK(total == Cout, "Concat: inputs hold ", total, " channels, out ", Cout);
  if (on_gpu_as("Concat", out.format(), {&out, ins[0]})) {
    const Runs r(out);
    auto* base = static_cast<std::byte*>(out.raw());
    for (const Tensor* t : ins) {
      CHECK(on_gpu_as("Concat", out.format(), {&out, t}), "Concat: inputs on both the CPU and the GPU");
      const size_t width = size_t(t->size(1)) * r.run;
      gpu::backend().copy_rows(base, r.pitch, t->raw(), width, width, r.rows);
      base += width;
    }
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    int64_t c0 = 0;
    for (const Tensor* t : ins) {
      const int64_t c = t->size(1);
      std::memcpy(out.data() + (n * Cout + c0) * HW, t->data() + n * c * HW,
                  size_t(c * HW) * sizeof(real));
      c0 += c;
    }
  }
}

void Concat::backward(std::span<Tensor* const> dins, const Tensor& dout) {
  CHECK(dout.dim() == 4, "Concat backward: dout must be 4-D, got ", dout.shape().str());
  const int64_t N = dout.size(0), HW = dout.size(2) * dout.size(3), Cout = dout.size(1);
  int64_t total = 0;
  for (const Tensor* d : dins) {
    CHECK(d && d->dim() == 4 && d->size(0) == N && d->size(2) * d->size(3) == HW,
          "Concat backward: gradient ", d ? d->shape().str() : "null",
          " does not match dout ", dout.shape().str());
    total += d->size(1);
  }
  CHECK(total == Cout, "Concat backward: gradients hold ", total, " channels, dout ", Cout);
  if (on_gpu_as("Concat backward", dout.format(), {&dout, dins[0]})) {
    const Runs r(dout);
    const auto* base = static_cast<const std::byte*>(dout.raw());
    for (Tensor* d : dins) {
      CHECK(on_gpu_as("Concat backward", dout.format(), {&dout, d}),
            "Concat backward: gradients on both the CPU and the GPU");
      const size_t width = size_t(d->size(1)) * r.run;
      gpu::backend().copy_rows(d->raw(), width, base, r.pitch, width, r.rows);
      base += width;
    }
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    int64_t c0 = 0;
    for (Tensor* d : dins) {
      const int64_t c = d->size(1);
      std::memcpy(d->data() + n * c * HW, dout.data() + (n * Cout + c0) * HW,
                  size_t(c * HW) * sizeof(real));
      c0 += c;
    }
  }
}

}  // namespace mpicnn
