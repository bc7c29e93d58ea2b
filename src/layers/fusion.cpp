// The fusion switch (see fusion.h).
#include "layers/fusion.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "core/tensor.h"

namespace mpicnn {

namespace {

std::atomic<bool>& slot() {
  static std::atomic<bool> on{[] {
    const char* v = std::getenv("MPICNN_FUSION");
    return !(v && std::strcmp(v, "0") == 0);
  }()};
  return on;
}

std::atomic<bool>& gpu_slot() {
  static std::atomic<bool> on{[] {
    const char* v = std::getenv("MPICNN_GPU_FUSION");
    return v && std::strcmp(v, "1") == 0;
  }()};
  return on;
}

}  // namespace

bool fusion_enabled() {
  return slot().load() && (default_device() == Device::CPU || gpu_slot().load());
}

void set_fusion(bool on) { slot().store(on); }
void set_gpu_fusion(bool on) { gpu_slot().store(on); }

}  // namespace mpicnn
