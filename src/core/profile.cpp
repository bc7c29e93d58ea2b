// The per-layer profile's table (see profile.h).
#include "core/profile.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

namespace mpicnn::profile {

namespace {

std::atomic<bool>& slot() {
  static std::atomic<bool> on{[] {
    const char* v = std::getenv("MPICNN_PROFILE");
    return v && *v && std::strcmp(v, "0") != 0;
  }()};
  return on;
}

struct Table {
  std::mutex mu;
  std::vector<Row> rows;
  std::unordered_map<std::string, size_t> index;
};

Table& table() {
  static Table t;
  return t;
}

}  // namespace

bool enabled() { return slot().load(std::memory_order_relaxed); }
void set_enabled(bool on) { slot().store(on); }

void add(const std::string& name, const char* kind, bool backward, double seconds) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  auto [it, inserted] = t.index.try_emplace(name, t.rows.size());
  if (inserted) t.rows.push_back(Row{name, kind});
  Row& r = t.rows[it->second];
  (backward ? r.backward_s : r.forward_s) += seconds;
  ++(backward ? r.backward_calls : r.forward_calls);
}

std::vector<Row> rows() {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  return t.rows;
}

void reset() {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  t.rows.clear();
  t.index.clear();
}

}  // namespace mpicnn::profile
