// Watchdog: ends the job when a rank has waited on MPI for longer than --timeout (a stalled or
// hung rank: the others would otherwise wait forever). The thread that calls MPI marks each
// blocking wait with a WaitGuard (two relaxed atomic stores and a clock read; nothing when no
// watchdog runs); a Watchdog thread wakes every min(1 s, timeout / 4) and, when the current
// wait is older than the timeout, prints ONE line ("rank 1 (host): waited 10.2 s in
// MPI_Allreduce (gradient bucket 2 of 3, epoch 1 step 14) > --timeout 10; aborting the job")
// and runs its action: by default MPI_Abort(MPI_COMM_WORLD, 1), and _exit(1) if that has not
// ended the process within 5 s (mpiexec then tears the job down). Not a failure detector for
// dead ranks: mpiexec already ends the job when a rank process dies.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace mpicnn::dist {

// Marks one blocking wait of the MPI thread: op is the MPI call ("MPI_Allreduce"), what says
// what it carries ("gradient bucket"), index/count number it ("2 of 3"; count 0: no number).
// All strings must be literals (or otherwise outlive the wait): only their pointers are stored.
// Guards nest: the inner one's wait is reported, and the outer one's is restored after it.
class WaitGuard {
 public:
  WaitGuard(const char* op, const char* what, int index = -1, int count = 0);
  ~WaitGuard();
  WaitGuard(const WaitGuard&) = delete;
  WaitGuard& operator=(const WaitGuard&) = delete;

 private:
  bool active_ = false;
  const char *op_ = nullptr, *what_ = nullptr;
  int64_t start_ = 0, index_ = -1, count_ = 0;  // the enclosing wait's
};

// While one lives, no wait counts: for waits that are long by design (the other ranks idle while
// rank 0 runs ./pipeline_eval --compare's sequential baseline alone). Nests.
class WatchdogPause {
 public:
  WatchdogPause();
  ~WatchdogPause();
  WatchdogPause(const WatchdogPause&) = delete;
  WatchdogPause& operator=(const WatchdogPause&) = delete;
};

// A wait that polls instead of blocking in MPI (an NCCL collective runs on the GPU, where a
// stalled peer stalls it): calls done() until it returns true, pausing about 20 us between calls.
// While a Watchdog runs (and no WatchdogPause lives), once the wait is older than its timeout:
// runs cancel() (ncclCommAbort), then ends as the watchdog does (its one line, then its action:
// abort the job), and throws Error(line) should the action return (a test's on_timeout). Marks
// no WaitGuard: the deadline is kept here, so the watchdog thread never races it to the abort.
// Strings as WaitGuard's (literals).
void polled_wait(const std::function<bool()>& done, const std::function<void()>& cancel,
                 const char* op, const char* what, int index = -1, int count = 0);

// Where the trainer is, shown in the line as "PHASE epoch E step S" (phase a literal, e.g.
// "training"; epoch and step from 1, step < 1 not shown; phase null: nothing shown).
void watchdog_set_context(const char* phase, int64_t epoch, int64_t step);

class Watchdog {
 public:
  struct Options {
    double timeout_s = 1800;  // > 0
    double poll_s = 0;        // 0: min(1 s, timeout / 4)
    int rank = 0;
    std::string host;
    // Called once, from the watchdog thread, with the line (without newline) after it is
    // printed; empty = abort the job. Tests pass their own.
    std::function<void(const std::string& line)> on_timeout;
  };
  // The apps' watchdog for --timeout SECONDS (null for 0), aborting the job on a timeout.
  static std::unique_ptr<Watchdog> start(double timeout_s, int rank, const std::string& host);
  // Starts the thread and turns the guards on. One Watchdog at a time per process.
  explicit Watchdog(Options options);
  ~Watchdog();  // stops the thread and turns the guards off
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // The line for a wait of `waited_s` seconds (exposed for tests).
  static std::string describe(int rank, const std::string& host, double waited_s, double timeout_s,
                              const char* op, const char* what, int64_t index, int64_t count,
                              const char* phase, int64_t epoch, int64_t step);

 private:
  friend void polled_wait(const std::function<bool()>&, const std::function<void()>&, const char*,
                          const char*, int, int);
  void loop();
  bool check();  // true: the timeout struck (the action ran)
  // The line for a wait that began at start_ns (monotonic_ns), or "" while within the timeout.
  std::string overdue(int64_t start_ns, const char* op, const char* what, int64_t index,
                      int64_t count) const;
  // Prints the line, then runs the action; returns only when the action is a test's on_timeout.
  void strike(const std::string& line);

  Options o_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

// Monotonic nanoseconds (the guards' clock).
int64_t monotonic_ns();

}  // namespace mpicnn::dist
