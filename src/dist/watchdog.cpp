// Watchdog: the wait slot the guards write, the thread that reads it, the one line and the abort.
#include "dist/watchdog.h"

#include <mpi.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "core/check.h"

namespace mpicnn::dist {

namespace {

// The main thread's current wait (one slot: only it marks waits; GradSync's progress thread
// never blocks in MPI, and the main thread's wait for it is marked). A seqlock of
// sorts: start is written last on entry (release) and re-read by the watchdog after the other
// fields, so a wait that changed meanwhile is skipped for one round, never misreported.
std::atomic<bool> g_enabled{false};
std::atomic<int> g_paused{0};
std::atomic<int64_t> g_start{0};  // 0: not waiting
std::atomic<const char*> g_op{nullptr}, g_what{nullptr};
std::atomic<int64_t> g_index{-1}, g_count{0};
std::atomic<const char*> g_phase{nullptr};
std::atomic<int64_t> g_epoch{-1}, g_step{-1};
std::atomic<Watchdog*> g_watchdog{nullptr};  // the running one: polled_wait's deadline

void publish(const char* op, const char* what, int64_t index, int64_t count, int64_t start) {
  g_start.store(0, std::memory_order_relaxed);
  g_op.store(op, std::memory_order_relaxed);
  g_what.store(what, std::memory_order_relaxed);
  g_index.store(index, std::memory_order_relaxed);
  g_count.store(count, std::memory_order_relaxed);
  g_start.store(start, std::memory_order_release);
}

}  // namespace

int64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);  // vDSO: no system call
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

WaitGuard::WaitGuard(const char* op, const char* what, int index, int count) {
  if (!g_enabled.load(std::memory_order_relaxed)) return;
  active_ = true;
  // The enclosing wait, restored on exit (guards nest, e.g. a broadcast inside on_root).
  start_ = g_start.load(std::memory_order_relaxed);
  op_ = g_op.load(std::memory_order_relaxed);
  what_ = g_what.load(std::memory_order_relaxed);
  index_ = g_index.load(std::memory_order_relaxed);
  count_ = g_count.load(std::memory_order_relaxed);
  publish(op, what, index, count, monotonic_ns());
}

WaitGuard::~WaitGuard() {
  if (!active_) return;
  if (start_ == 0) {
    g_start.store(0, std::memory_order_release);
    return;
  }
  publish(op_, what_, index_, count_, start_);
}

WatchdogPause::WatchdogPause() { g_paused.fetch_add(1); }
WatchdogPause::~WatchdogPause() { g_paused.fetch_sub(1); }

void watchdog_set_context(const char* phase, int64_t epoch, int64_t step) {
  g_phase.store(phase, std::memory_order_relaxed);
  g_epoch.store(epoch, std::memory_order_relaxed);
  g_step.store(step, std::memory_order_relaxed);
}

std::string Watchdog::describe(int rank, const std::string& host, double waited_s, double timeout_s,
                               const char* op, const char* what, int64_t index, int64_t count,
                               const char* phase, int64_t epoch, int64_t step) {
  std::string ctx = what ? what : "";
  if (count > 0) ctx += detail::concat(ctx.empty() ? "" : " ", index + 1, " of ", count);
  if (phase) {
    ctx += detail::concat(ctx.empty() ? "" : ", ", phase);
    if (epoch >= 1) ctx += detail::concat(" epoch ", epoch);
    if (step >= 1) ctx += detail::concat(" step ", step);
  }
  char waited[32], limit[32];
  std::snprintf(waited, sizeof waited, "%.1f", waited_s);
  std::snprintf(limit, sizeof limit, "%g", timeout_s);
  return detail::concat("rank ", rank, " (", host, "): waited ", waited, " s in ", op ? op : "MPI",
                        ctx.empty() ? "" : " (", ctx, ctx.empty() ? "" : ")", " > --timeout ", limit,
                        "; aborting the job");
}

std::unique_ptr<Watchdog> Watchdog::start(double timeout_s, int rank, const std::string& host) {
  if (timeout_s <= 0) return nullptr;
  Options o;
  o.timeout_s = timeout_s;
  o.rank = rank;
  o.host = host;
  return std::make_unique<Watchdog>(std::move(o));
}

Watchdog::Watchdog(Options options) : o_(std::move(options)) {
  CHECK(o_.timeout_s > 0, "watchdog: timeout must be > 0 s, got ", o_.timeout_s);
  CHECK(!g_enabled.exchange(true), "watchdog: one at a time per process");
  if (o_.poll_s <= 0) o_.poll_s = std::min(1.0, o_.timeout_s / 4);
  g_watchdog.store(this);
  thread_ = std::thread([this] { loop(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  g_watchdog.store(nullptr);
  g_enabled.store(false);
  g_start.store(0);
}

void Watchdog::loop() {
  const auto poll = std::chrono::duration<double>(o_.poll_s);
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, poll, [this] { return stop_; });
    if (!stop_ && check()) return;
  }
}

bool Watchdog::check() {
  const int64_t start = g_start.load(std::memory_order_acquire);
  if (start == 0 || g_paused.load() > 0) return false;
  // Acquire loads (not relaxed loads and a fence, which TSan does not model): the re-read of
  // g_start below cannot move above them.
  const char* op = g_op.load(std::memory_order_acquire);
  const char* what = g_what.load(std::memory_order_acquire);
  const int64_t index = g_index.load(std::memory_order_acquire), count = g_count.load(std::memory_order_acquire);
  if (g_start.load(std::memory_order_relaxed) != start) return false;  // changed while read
  const std::string line = overdue(start, op, what, index, count);
  if (line.empty()) return false;
  strike(line);
  return true;
}

std::string Watchdog::overdue(int64_t start_ns, const char* op, const char* what, int64_t index,
                              int64_t count) const {
  const double waited = double(monotonic_ns() - start_ns) * 1e-9;
  if (waited <= o_.timeout_s) return "";
  return describe(o_.rank, o_.host, waited, o_.timeout_s, op, what, index, count,
                  g_phase.load(std::memory_order_relaxed), g_epoch.load(std::memory_order_relaxed),
                  g_step.load(std::memory_order_relaxed));
}

void Watchdog::strike(const std::string& line) {
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
  if (o_.on_timeout) {
    o_.on_timeout(line);
    return;
  }
  // MPI_Abort from this thread while the MPI thread is blocked inside MPI: Open MPI's abort
  // goes through its runtime (mpiexec kills every rank). Should it not end the process, the
  // fallback does: a rank that exits without MPI_Finalize makes mpiexec end the job too.
  std::thread([] {
    std::this_thread::sleep_for(std::chrono::seconds(5));
    _exit(1);
  }).detach();
  MPI_Abort(MPI_COMM_WORLD, 1);
  _exit(1);
}

void polled_wait(const std::function<bool()>& done, const std::function<void()>& cancel,
                 const char* op, const char* what, int index, int count) {
  const int64_t start = monotonic_ns();
  while (!done()) {
    Watchdog* w = g_watchdog.load();
    if (w && g_paused.load() == 0) {
      const std::string line = w->overdue(start, op, what, index, count);
      if (!line.empty()) {
        cancel();
        w->strike(line);
        FAIL(line);
      }
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

}  // namespace mpicnn::dist
