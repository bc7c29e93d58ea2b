// The GPU slab's device-to-device path without a GPU (dist/device_sync.h): the --gpu-allreduce
// rule, and the bucket bookkeeping driven through a stand-in collective that records what NCCL
// would be asked to do (launch order, ready events, the join, the polls), including a stalled
// collective under the watchdog (dist/watchdog.h's polled_wait). NCCL itself runs on a GPU only
// (bench/gpu_checks.sh, group nccl).
#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <vector>

#include "dist/device_sync.h"
#include "dist/nccl_backend.h"
#include "dist/watchdog.h"
#include "testing.h"

using namespace mpicnn;
using dist::GpuAllreduce;
using mpicnn::testing::expect_error;

namespace {

dist::GpuAllreduceFacts facts(bool built, bool cuda, int ranks, std::string shared = "") {
  dist::GpuAllreduceFacts f;
  f.nccl_built = built;
  f.cuda = cuda;
  f.ranks = ranks;
  f.shared_gpu = std::move(shared);
  return f;
}

GpuAllreduce resolve(GpuAllreduce want, const dist::GpuAllreduceFacts& f) {
  return dist::resolve_gpu_allreduce(want, f, "--gpu-allreduce");
}

// What a real collective would be asked, in order: "ready 0", "allreduce 0 [10,20)", "join 2",
// "abort". done(slot) answers true once it has been asked polls_until_done[slot] times (-1:
// never: a stalled peer).
struct FakeCollective final : dist::DeviceCollective {
  std::vector<std::string> log;
  std::vector<int> polls_until_done;
  std::vector<int> polls;
  float* seen_slab = nullptr;
  bool fail = false;  // done() throws, as on an NCCL asynchronous error

  explicit FakeCollective(std::vector<int> until) : polls_until_done(std::move(until)), polls(polls_until_done.size()) {}
  void mark_ready(int slot) override { log.push_back("ready " + std::to_string(slot)); }
  void allreduce(int slot, float* slab, int64_t begin, int64_t end) override {
    seen_slab = slab;
    log.push_back("allreduce " + std::to_string(slot) + " [" + std::to_string(begin) + "," + std::to_string(end) + ")");
  }
  void join(int slot) override { log.push_back("join " + std::to_string(slot)); }
  bool done(int slot) override {
    if (fail) MPICNN_FAIL("NCCL: unhandled system error (remote peer closed the connection)");
    const int n = ++polls[size_t(slot)];
    const int until = polls_until_done[size_t(slot)];
    return until >= 0 && n >= until;
  }
  void abort() override { log.push_back("abort"); }
};

// Three buckets in GradSync's order (reverse slab order).
const std::vector<dist::DeviceBuckets::Range> kBuckets = {{20, 30}, {10, 20}, {0, 10}};

}  // namespace

TEST_CASE("device sync: --gpu-allreduce auto takes NCCL only with NCCL, GPU gradients and several ranks on GPUs of their own") {
  CHECK(resolve(GpuAllreduce::Auto, facts(true, true, 8)) == GpuAllreduce::Nccl);
  CHECK(resolve(GpuAllreduce::Auto, facts(false, true, 8)) == GpuAllreduce::Mpi);  // no NCCL in the build
  CHECK(resolve(GpuAllreduce::Auto, facts(true, false, 8)) == GpuAllreduce::Mpi);  // a CPU run
  CHECK(resolve(GpuAllreduce::Auto, facts(true, true, 1)) == GpuAllreduce::Mpi);   // nothing to exchange
  CHECK(resolve(GpuAllreduce::Auto, facts(true, true, 2, "GPU-0a1b")) == GpuAllreduce::Mpi);  // shared GPU
  for (bool built : {false, true})
    for (bool cuda : {false, true}) CHECK(resolve(GpuAllreduce::Mpi, facts(built, cuda, 4, "GPU-x")) == GpuAllreduce::Mpi);
  // Asked for: runs at one rank too (the GPU check's bit-identity), refused where it cannot run.
  CHECK(resolve(GpuAllreduce::Nccl, facts(true, true, 1)) == GpuAllreduce::Nccl);
  CHECK(resolve(GpuAllreduce::Nccl, facts(true, true, 8)) == GpuAllreduce::Nccl);
  expect_error([] { resolve(GpuAllreduce::Nccl, facts(false, true, 2)); },
               std::string("--gpu-allreduce nccl: ") + dist::nccl::kNoNccl);
  expect_error([] { resolve(GpuAllreduce::Nccl, facts(true, false, 2)); },
               "--gpu-allreduce nccl: needs GPU gradients (--device cuda); this run trains on the CPU");
  expect_error([] { resolve(GpuAllreduce::Nccl, facts(true, true, 2, "GPU-0a1b")); },
               "--gpu-allreduce nccl: several ranks share GPU GPU-0a1b, which NCCL refuses; run one rank per GPU");
}

TEST_CASE("device sync: --gpu-allreduce names, and the shared GPU among the ranks' ids") {
  for (GpuAllreduce a : {GpuAllreduce::Nccl, GpuAllreduce::Mpi, GpuAllreduce::Auto})
    CHECK(dist::parse_gpu_allreduce(dist::to_string(a), "--gpu-allreduce") == a);
  expect_error([] { dist::parse_gpu_allreduce("ring", "--gpu-allreduce"); },
               "--gpu-allreduce: 'ring' is not a GPU allreduce (nccl, mpi or auto)");
  CHECK(dist::first_duplicate({}) == "");
  CHECK(dist::first_duplicate({"GPU-a", "GPU-b", "GPU-c"}) == "");
  CHECK(dist::first_duplicate({"GPU-a", "GPU-b", "GPU-a", "GPU-b"}) == "GPU-a");
  // NCCL's presence is the link's: the absent stand-in says why in one line, NCCL says nothing.
  CHECK(dist::nccl::unavailable_reason() == (dist::nccl::compiled_in() ? "" : dist::nccl::kNoNccl));
}

TEST_CASE("device sync: buckets are queued in order as they become ready, each after its ready event") {
  float slab[30] = {};
  FakeCollective c({1, 1, 1});
  dist::DeviceBuckets d(c, slab, kBuckets);
  d.begin_step();
  d.launch(1);
  d.launch(1);  // reported again (a module without parameters): nothing new
  CHECK(d.launched() == 1);
  CHECK(c.log == std::vector<std::string>{"ready 0", "allreduce 0 [20,30)"});
  CHECK(c.seen_slab == slab);
  d.launch(5);  // past the last bucket: the rest, not more
  CHECK(d.launched() == 3);
  d.finish();
  CHECK(c.log == std::vector<std::string>{"ready 0", "allreduce 0 [20,30)", "ready 1", "allreduce 1 [10,20)",
                                          "ready 2", "allreduce 2 [0,10)", "join 2"});
  // No host wait while queueing: done() is asked only in finish(), after the join.
  CHECK(c.polls == std::vector<int>{1, 1, 1});

  // The next step reuses the slots from 0; without the hook, finish() queues them all.
  c.log.clear();
  d.begin_step();
  CHECK(d.launched() == 0);
  d.finish();
  CHECK(c.log == std::vector<std::string>{"ready 0", "allreduce 0 [20,30)", "ready 1", "allreduce 1 [10,20)",
                                          "ready 2", "allreduce 2 [0,10)", "join 2"});
}

TEST_CASE("device sync: finish waits until every bucket has finished, not only the first or the last") {
  float slab[30] = {};
  FakeCollective c({2, 40, 3});  // the middle bucket is slow
  dist::DeviceBuckets d(c, slab, kBuckets);
  d.begin_step();
  d.finish();
  CHECK(c.polls[1] == 40);  // polled until it said done
  CHECK(c.polls[2] == 3);   // asked only after the slower one before it
  CHECK(c.polls[0] == 2);
}

TEST_CASE("device sync: a failed collective ends the wait with its one line") {
  float slab[30] = {};
  FakeCollective c({1, 1, 1});
  c.fail = true;
  dist::DeviceBuckets d(c, slab, kBuckets);
  d.begin_step();
  expect_error([&] { d.finish(); }, "NCCL: unhandled system error (remote peer closed the connection)");
}

TEST_CASE("device sync: a stalled collective under the watchdog is aborted within the timeout, with one line") {
  float slab[30] = {};
  FakeCollective c({1, -1, 1});  // bucket 1 never finishes: a peer stalled
  std::mutex mu;
  std::vector<std::string> lines;
  std::atomic<int> calls{0};
  dist::Watchdog::Options o;
  o.timeout_s = 0.3;
  o.poll_s = 0.02;
  o.rank = 3;
  o.host = "gpu07";
  o.on_timeout = [&](const std::string& line) {
    std::lock_guard<std::mutex> lock(mu);
    lines.push_back(line);
    // The communicator was aborted before the job ends.
    CHECK(!c.log.empty());
    CHECK(c.log.back() == "abort");
    ++calls;
  };
  dist::Watchdog w(o);
  dist::watchdog_set_context("training", 2, 17);
  dist::DeviceBuckets d(c, slab, kBuckets);
  d.begin_step();
  d.launch(3);
  const auto t0 = std::chrono::steady_clock::now();
  expect_error([&] { d.finish(); }, "rank 3 (gpu07): waited 0.");
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  dist::watchdog_set_context(nullptr, -1, -1);
  CHECK(took >= 0.3);
  CHECK(took < 3.0);  // the timeout and some polling, on a loaded machine
  CHECK(calls.load() == 1);
  std::lock_guard<std::mutex> lock(mu);
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].find("s in ncclAllReduce (gradient buckets, training epoch 2 step 17) > --timeout 0.3; aborting the job") !=
        std::string::npos);
  CHECK(lines[0].find('\n') == std::string::npos);
  CHECK(c.log.back() == "abort");
}

TEST_CASE("device sync: without a watchdog, or within its timeout, a slow collective is simply waited for") {
  float slab[30] = {};
  FakeCollective c({5, 5, 5});
  std::atomic<int> calls{0};
  dist::Watchdog::Options o;
  o.timeout_s = 30;
  o.on_timeout = [&](const std::string&) { ++calls; };
  dist::Watchdog w(o);
  dist::DeviceBuckets d(c, slab, kBuckets);
  d.begin_step();
  d.finish();
  CHECK(calls.load() == 0);
  CHECK(c.log.back() == "join 2");  // never aborted
}
