// ProgressThread: drives a BucketReducer from its own thread during backward, so gradient
// buckets travel while the main thread computes. Open MPI's TCP transport (ob1) moves data only
// inside MPI calls; tests between modules (GradSync's hooks mode) leave the link idle for a
// whole module's compute, so over TCP the allreduce overlaps only as far as the socket buffers
// reach (bench/RESULTS.md). This thread starts each bucket as soon as backward hands it over
// and tests the buckets in flight, sleeping in between: kMinPoll after a test that moved
// something, then twice as long after each one that did not, up to kMaxPoll, since while
// backward computes every wake-up takes time from it (on a host with one core per rank, 50 us
// polls slowed a 100 Mbit/s step by 12%). Once the main thread waits in wait_all() the cores
// are free and the thread polls every kMinPoll.
// MPI use: between hand_over() and the return of wait_all() only this thread calls MPI, and the
// main thread calls none (MPI_THREAD_SERIALIZED; the mutex orders the two threads' calls).
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <mutex>
#include <thread>

#include "dist/bucket_reduce.h"

namespace mpicnn::dist {

class ProgressThread {
 public:
  // Reduces `buckets` buckets of `reducer` (BucketReducer::start's order). Starts the thread.
  ProgressThread(BucketReducer& reducer, size_t buckets);
  ~ProgressThread();  // stops and joins the thread (a step in flight is abandoned)
  ProgressThread(const ProgressThread&) = delete;
  ProgressThread& operator=(const ProgressThread&) = delete;

  // Main thread, per step: begin_step(base) with the array the buckets index (the gradient
  // slab or its host mirror); hand_over(n) as buckets become ready (n grows); then wait_all(),
  // which hands over the rest and returns once every bucket is done. An error in the thread
  // (an MPI call failing) is rethrown by wait_all().
  void begin_step(float* base);
  void hand_over(size_t n);
  void wait_all();
  size_t handed() const;  // buckets handed over in this step

  static constexpr std::chrono::microseconds kMinPoll{50}, kMaxPoll{1000};

 private:
  void loop();
  bool drive(size_t handed);  // starts handed buckets, tests those in flight; true: progress

  BucketReducer& reducer_;
  const size_t buckets_;
  mutable std::mutex mu_;
  std::condition_variable work_, finished_;
  // Under mu_: what the main thread asked for and what the thread has done.
  size_t handed_ = 0, done_ = 0;
  float* base_ = nullptr;
  bool stop_ = false, draining_ = false;  // draining_: the main thread waits in wait_all()
  std::exception_ptr error_;
  // The thread's own (read by it alone, unlocked): buckets started in this step.
  size_t started_ = 0;
  std::thread thread_;
};

}  // namespace mpicnn::dist
