// Per-layer time profile (MPICNN_PROFILE=1, or set_profiling): every Leaf's forward and backward
// is timed with a steady clock and summed per layer name. Off by default; when off the cost is
// one relaxed atomic load per layer call. CPU only: on the GPU a layer call only queues work,
// so its wall time says nothing (bench/train_bench refuses --profile with --device cuda).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace mpicnn::profile {

bool enabled();
void set_enabled(bool on);

// Adds `seconds` to layer `name` (its full prefix, "layer1.0.conv1.") of kind `kind`
// ("Conv2d"), forward (backward = false) or backward. Thread-safe.
void add(const std::string& name, const char* kind, bool backward, double seconds);

struct Row {
  std::string name, kind;
  double forward_s = 0, backward_s = 0;
  int64_t forward_calls = 0, backward_calls = 0;
};
// Every layer seen since the last reset, in first-call order (the network's forward order).
std::vector<Row> rows();
void reset();

}  // namespace mpicnn::profile
