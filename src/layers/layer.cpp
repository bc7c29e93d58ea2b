// Helpers every layer shares.
#include "layers/layer.h"

namespace mpicnn {

bool on_gpu(const char* who, std::initializer_list<const Tensor*> tensors) {
  int cuda = 0, cpu = 0;
  for (const Tensor* t : tensors) {
    if (!t || !t->defined()) continue;
    (t->device() == Device::CUDA ? cuda : cpu) += 1;
  }
  CHECK(cuda == 0 || cpu == 0, who, ": tensors on both the CPU and the GPU (", cpu, " on cpu, ",
        cuda, " on cuda); a model runs on one device");
  return cuda > 0;
}

}  // namespace mpicnn
