// The per-layer profile's table (see profile.h), and its GPU events.
#include "core/profile.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "core/gpu.h"

namespace mpicnn::profile {

namespace {

std::atomic<bool>& slot() {
  static std::atomic<bool> on{[] {
    const char* v = std::getenv("MPICNN_PROFILE");
    return v && *v && std::strcmp(v, "0") != 0;
  }()};
  return on;
}
std::atomic<bool> gpu_mode{false};

// A layer call timed on the GPU: its row and the numbers of its start and end events.
struct Pending {
  size_t row;
  bool backward;
  int start, end;
};

struct Table {
  std::mutex mu;
  std::vector<Row> rows;
  std::unordered_map<std::string, size_t> index;
  // GPU timing events, reused after each collect(); the first `used` are recorded.
  std::vector<std::shared_ptr<gpu::Event>> events;
  size_t used = 0;
  std::vector<Pending> pending;

  // Row of layer `name` (added in first-call order). Holding mu.
  size_t row(const std::string& name, const char* kind) {
    auto [it, inserted] = index.try_emplace(name, rows.size());
    if (inserted) rows.push_back(Row{name, kind});
    return it->second;
  }
  void add(size_t r, bool backward, double seconds) {
    Row& row = rows[r];
    (backward ? row.backward_s : row.forward_s) += seconds;
    ++(backward ? row.backward_calls : row.forward_calls);
  }
  // Records the next event on the compute stream and returns its number. Holding mu.
  int record() {
    if (used == events.size()) events.push_back(gpu::backend().timing_event());
    gpu::backend().record(*events[used]);
    return int(used++);
  }
};

Table& table() {
  static Table t;
  return t;
}

}  // namespace

bool enabled() { return slot().load(std::memory_order_relaxed); }
bool gpu_events() { return gpu_mode.load(std::memory_order_relaxed); }
void set_enabled(bool on, bool gpu) {
  gpu_mode.store(on && gpu);
  slot().store(on);
}

void add(const std::string& name, const char* kind, bool backward, double seconds) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  t.add(t.row(name, kind), backward, seconds);
}

namespace detail {

int gpu_begin() {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  return t.record();
}

void gpu_end(int start, const std::string& name, const char* kind, bool backward) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  t.pending.push_back({t.row(name, kind), backward, start, t.record()});
}

}  // namespace detail

void collect() {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  for (const Pending& p : t.pending)
    t.add(p.row, p.backward,
          1e-3 * gpu::backend().elapsed_ms(*t.events[size_t(p.start)], *t.events[size_t(p.end)]));
  t.pending.clear();
  t.used = 0;
}

std::vector<Row> rows() {
  collect();
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  return t.rows;
}

void reset() {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  t.rows.clear();
  t.index.clear();
  t.pending.clear();
  t.used = 0;
}

}  // namespace mpicnn::profile
