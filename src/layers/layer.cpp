// Helpers every layer shares.
#include "layers/layer.h"

namespace mpicnn {

namespace {
// Counts the defined tensors on each device; checks each one's format against `want`.
void count(const char* who, std::initializer_list<const Tensor*> tensors, Format want,
           int& cpu, int& cuda) {
  for (const Tensor* t : tensors) {
    if (!t || !t->defined()) continue;
    (t->device() == Device::CUDA ? cuda : cpu) += 1;
    CHECK(t->format() == want, who, ": a ", format_name(t->format()), " tensor ",
          t->shape().str(), " where it ", want.plain() ? "has no path but plain f32 NCHW"
                                                        : "planned for ",
          want.plain() ? "" : format_name(want),
          want.plain() ? " (the GPU's --gpu-layout nhwc does not cover it yet)" : "");
  }
}
bool one_device(const char* who, int cpu, int cuda) {
  CHECK(cuda == 0 || cpu == 0, who, ": tensors on both the CPU and the GPU (", cpu, " on cpu, ",
        cuda, " on cuda); a model runs on one device");
  return cuda > 0;
}
}  // namespace

bool on_gpu(const char* who, std::initializer_list<const Tensor*> tensors) {
  int cuda = 0, cpu = 0;
  count(who, tensors, Format{}, cpu, cuda);
  return one_device(who, cpu, cuda);
}

bool on_gpu_as(const char* who, Format format, std::initializer_list<const Tensor*> activations,
               std::initializer_list<const Tensor*> params) {
  int cuda = 0, cpu = 0;
  count(who, activations, format, cpu, cuda);
  count(who, params, Format{}, cpu, cuda);
  return one_device(who, cpu, cuda);
}

}  // namespace mpicnn
