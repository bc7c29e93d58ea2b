// The fusion and folding switches (see fusion.h).
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

// An opt-in switch: on when the environment variable is "1".
bool opted_in(const char* variable) {
  const char* v = std::getenv(variable);
  return v && std::strcmp(v, "1") == 0;
}

std::atomic<bool>& gpu_slot() {
  static std::atomic<bool> on{opted_in("MPICNN_GPU_FUSION")};
  return on;
}

std::atomic<bool>& fold_slot() {
  static std::atomic<bool> on{opted_in("MPICNN_GPU_FOLD")};
  return on;
}

}  // namespace

bool fusion_enabled() {
  return slot().load() && (default_device() == Device::CPU || gpu_slot().load());
}

void set_fusion(bool on) { slot().store(on); }
void set_gpu_fusion(bool on) { gpu_slot().store(on); }

bool fold_enabled() { return default_device() == Device::CUDA && fold_slot().load(); }
void set_gpu_fold(bool on) { fold_slot().store(on); }

}  // namespace mpicnn
