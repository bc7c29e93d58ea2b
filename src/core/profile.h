// Per-layer time profile (MPICNN_PROFILE=1, or set_enabled): every Leaf's forward and backward
// (and the layers blocks call directly, through Scope) is timed with a steady clock and summed
// per layer name. Off by default; when off the cost is one relaxed atomic load per layer call.
// On the GPU a layer call only queues work, so its wall time says nothing: there
// (set_enabled(true, /*gpu=*/true)) Scope records a pair of CUDA timing events on the compute
// stream around the layer's work instead, and collect(), after the step has synchronised, adds
// the GPU time between each pair (bench/train_bench --device cuda --profile 1). That time also
// holds any wait of the GPU for the host to queue the layer's kernels.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace mpicnn::profile {

bool enabled();
// gpu: time with CUDA events on the GPU backend's compute stream (the model runs there).
void set_enabled(bool on, bool gpu = false);
bool gpu_events();

namespace detail {
int gpu_begin();  // records a start event; returns its number for gpu_end
void gpu_end(int start, const std::string& name, const char* kind, bool backward);
}  // namespace detail

// Adds `seconds` to layer `name` (its full prefix, "layer1.0.conv1.") of kind `kind`
// ("Conv2d"), forward (backward = false) or backward. Thread-safe.
void add(const std::string& name, const char* kind, bool backward, double seconds);

// Times its own lifetime into add(name, kind, backward) when profiling is on at construction.
// `name` must outlive it.
class Scope {
 public:
  Scope(const std::string& name, const char* kind, bool backward = false)
      : name_(enabled() ? &name : nullptr), kind_(kind), backward_(backward) {
    if (!name_) return;
    if (gpu_events()) gpu_start_ = detail::gpu_begin();
    else start_ = std::chrono::steady_clock::now();
  }
  ~Scope() {
    if (!name_) return;
    if (gpu_start_ >= 0)
      detail::gpu_end(gpu_start_, *name_, kind_, backward_);
    else
      add(*name_, kind_, backward_,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  const std::string* name_;
  const char* kind_;
  bool backward_;
  int gpu_start_ = -1;
  std::chrono::steady_clock::time_point start_;
};

struct Row {
  std::string name, kind;
  double forward_s = 0, backward_s = 0;
  int64_t forward_calls = 0, backward_calls = 0;
};
// GPU timing: waits for the last recorded event and adds every pending pair's time to its
// layer (the events are reused from then on). Call it after each step; rows() calls it too.
void collect();
// Every layer seen since the last reset, in first-call order (the network's forward order).
std::vector<Row> rows();
void reset();

}  // namespace mpicnn::profile
