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

}  // namespace

bool fusion_enabled() { return slot().load() && default_device() == Device::CPU; }

void set_fusion(bool on) { slot().store(on); }

}  // namespace mpicnn
