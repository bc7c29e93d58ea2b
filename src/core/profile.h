// Per-layer time profile (MPICNN_PROFILE=1, or set_enabled): every Leaf's forward and backward
// (and the layers blocks call directly, through Scope) is timed with a steady clock and summed
// per layer name. Off by default; when off the cost is one relaxed atomic load per layer call.
// CPU only: on the GPU a layer call only queues work, so its wall time says nothing
// (bench/train_bench refuses --profile with --device cuda).
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace mpicnn::profile {

bool enabled();
void set_enabled(bool on);

// Adds `seconds` to layer `name` (its full prefix, "layer1.0.conv1.") of kind `kind`
// ("Conv2d"), forward (backward = false) or backward. Thread-safe.
void add(const std::string& name, const char* kind, bool backward, double seconds);

// Times its own lifetime into add(name, kind, backward) when profiling is on at construction.
// `name` must outlive it.
class Scope {
 public:
  Scope(const std::string& name, const char* kind, bool backward = false)
      : name_(enabled() ? &name : nullptr), kind_(kind), backward_(backward) {
    if (name_) start_ = std::chrono::steady_clock::now();
  }
  ~Scope() {
    if (name_)
      add(*name_, kind_, backward_,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  const std::string* name_;
  const char* kind_;
  bool backward_;
  std::chrono::steady_clock::time_point start_;
};

struct Row {
  std::string name, kind;
  double forward_s = 0, backward_s = 0;
  int64_t forward_calls = 0, backward_calls = 0;
};
// Every layer seen since the last reset, in first-call order (the network's forward order).
std::vector<Row> rows();
void reset();

}  // namespace mpicnn::profile
