// The watchdog (dist/watchdog.h) with an injected action instead of MPI_Abort, and the fault
// points' MPICNN_FAULT parsing (core/fault.h).
#include <signal.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "core/fault.h"
#include "dist/watchdog.h"
#include "testing.h"

using namespace mpicnn;
using namespace std::chrono_literals;

namespace {

struct Caught {
  std::mutex mu;
  std::string line;
  std::atomic<int> calls{0};
};

dist::Watchdog::Options quick(Caught& c, double timeout_s) {
  dist::Watchdog::Options o;
  o.timeout_s = timeout_s;
  o.poll_s = 0.02;
  o.rank = 1;
  o.host = "nodeA";
  o.on_timeout = [&c](const std::string& line) {
    std::lock_guard<std::mutex> lock(c.mu);
    c.line = line;
    ++c.calls;
  };
  return o;
}

// Waits until the action ran (or 10 s passed: a loaded machine may delay the watchdog thread).
void await_call(const Caught& c) {
  for (int i = 0; i < 1000 && c.calls == 0; ++i) std::this_thread::sleep_for(10ms);
}

}  // namespace

TEST_CASE("watchdog: a wait longer than the timeout runs the action once with one line") {
  Caught c;
  dist::watchdog_set_context("training", 2, 14);
  {
    dist::Watchdog w(quick(c, 0.1));
    dist::WaitGuard wait("MPI_Allreduce", "gradient bucket", 1, 3);
    await_call(c);
    std::this_thread::sleep_for(200ms);  // more rounds of the watchdog: still one call
  }
  dist::watchdog_set_context(nullptr, -1, -1);
  CHECK(c.calls == 1);
  INFO(c.line);
  CHECK(c.line.rfind("rank 1 (nodeA): waited ", 0) == 0);
  CHECK(c.line.find(" s in MPI_Allreduce (gradient bucket 2 of 3, training epoch 2 step 14) > --timeout 0.1; aborting the job") != std::string::npos);
  CHECK(c.line.find('\n') == std::string::npos);
}

TEST_CASE("watchdog: short waits, and time outside any wait, never trigger it") {
  Caught c;
  {
    dist::Watchdog w(quick(c, 1.0));
    for (int i = 0; i < 20; ++i) {  // 20 waits of 20 ms: 400 ms in all, each far below 1 s
      dist::WaitGuard wait("MPI_Bcast", nullptr);
      std::this_thread::sleep_for(20ms);
    }
    std::this_thread::sleep_for(1200ms);  // computing, not waiting
  }
  CHECK(c.calls == 0);
}

TEST_CASE("watchdog: nested guards report the inner wait, then the outer one again") {
  Caught c;
  {
    dist::Watchdog w(quick(c, 0.15));
    dist::WaitGuard outer("MPI_Ialltoall", "pipeline finish");
    { dist::WaitGuard inner("MPI_Bcast", "broadcast from rank 0"); }
    await_call(c);
  }
  CHECK(c.calls == 1);
  CHECK(c.line.find("in MPI_Ialltoall (pipeline finish) >") != std::string::npos);
}

TEST_CASE("watchdog: no wait counts while a WatchdogPause lives") {
  Caught c;
  {
    dist::Watchdog w(quick(c, 0.1));
    {
      const dist::WatchdogPause pause;
      dist::WaitGuard wait("MPI_Bcast", "broadcast from rank 0");
      std::this_thread::sleep_for(400ms);
    }
    std::this_thread::sleep_for(200ms);
  }
  CHECK(c.calls == 0);
}

TEST_CASE("watchdog: guards without a watchdog record nothing") {
  dist::WaitGuard before("MPI_Barrier", nullptr);  // no watchdog yet: inactive
  std::this_thread::sleep_for(300ms);
  Caught c;
  {
    dist::Watchdog w(quick(c, 0.1));
    std::this_thread::sleep_for(400ms);  // the earlier guard's wait is not seen
  }
  CHECK(c.calls == 0);
}

TEST_CASE("watchdog: describe without context, and a bad timeout") {
  CHECK(dist::Watchdog::describe(0, "h", 12.34, 10, "MPI_Barrier", nullptr, -1, 0, nullptr, -1, -1) ==
        "rank 0 (h): waited 12.3 s in MPI_Barrier > --timeout 10; aborting the job");
  dist::Watchdog::Options o;
  o.timeout_s = 0;
  CHECK_THROWS_WITH_AS(dist::Watchdog w(o), doctest::Contains("timeout must be > 0"), Error);
  CHECK(dist::Watchdog::start(0, 0, "h") == nullptr);
}

TEST_CASE("fault: MPICNN_FAULT specs") {
  const fault::Spec s = fault::parse_spec("forward:2:15");
  CHECK(s.valid);
  CHECK(s.name == "forward");
  CHECK(s.rank == 2);
  CHECK(s.occurrence == 15);
  CHECK(s.signal == SIGKILL);
  CHECK(fault::parse_spec("allreduce:0:1:stop").signal == SIGSTOP);
  CHECK(fault::parse_spec("allreduce:0:1:kill").signal == SIGKILL);
  CHECK(fault::parse_spec("eval:1:2:term").signal == SIGTERM);  // a scheduler's stop, there
  CHECK(fault::parse_spec("eval:1:2:usr1").signal == SIGUSR1);
  for (const char* bad : {"", "forward", "forward:1", ":1:1", "forward:x:1", "forward:-1:1",
                          "forward:1:0", "forward:1:1:hup", "forward:1:1:kill:x"})
    CHECK_MESSAGE(!fault::parse_spec(bad).valid, bad);
  CHECK(!fault::armed());  // the unit tests run without MPICNN_FAULT: points do nothing
  fault::point("forward");
}
