// The gradient progress thread: starts handed-over buckets and tests those in flight.
#include "dist/progress_thread.h"

#include "core/check.h"

namespace mpicnn::dist {

ProgressThread::ProgressThread(BucketReducer& reducer, size_t buckets) : reducer_(reducer), buckets_(buckets) {
  thread_ = std::thread([this] { loop(); });
}

ProgressThread::~ProgressThread() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  work_.notify_all();
  thread_.join();
}

void ProgressThread::begin_step(float* base) {
  std::lock_guard lk(mu_);
  base_ = base;
  CHECK(done_ == handed_, "gradient progress thread: a step began with buckets in flight");
  handed_ = done_ = started_ = 0;
  draining_ = false;
  reducer_.reset();  // the thread is idle: it touches the reducer only for handed buckets
}

void ProgressThread::hand_over(size_t n) {
  {
    std::lock_guard lk(mu_);
    if (n <= handed_) return;
    handed_ = std::min(n, buckets_);
  }
  work_.notify_one();
}

size_t ProgressThread::handed() const {
  std::lock_guard lk(mu_);
  return handed_;
}

void ProgressThread::wait_all() {
  {
    std::lock_guard lk(mu_);
    handed_ = buckets_;
    draining_ = true;
  }
  work_.notify_one();
  std::unique_lock lk(mu_);
  finished_.wait(lk, [&] { return error_ != nullptr || done_ == buckets_; });
  if (error_) std::rethrow_exception(error_);
}

// Starts the buckets handed over, then tests every bucket in flight (so later buckets move on
// to their next phase too); done_ counts the finished prefix. Called without the lock.
bool ProgressThread::drive(size_t handed) {
  bool progressed = false;
  for (; started_ < handed; ++started_, progressed = true) reducer_.start(started_, base_);
  size_t done;
  {
    std::lock_guard lk(mu_);
    done = done_;
  }
  const size_t first = done;
  for (size_t b = first; b < started_; ++b)
    if (reducer_.test(b) && b == done) ++done;
  if (done == first) return progressed;
  std::lock_guard lk(mu_);
  done_ = done;
  if (done_ == buckets_) finished_.notify_all();
  return true;
}

void ProgressThread::loop() {
  std::unique_lock lk(mu_);
  auto poll = kMinPoll;
  for (;;) {
    work_.wait(lk, [&] { return stop_ || (!error_ && done_ < handed_); });
    if (stop_) return;
    const size_t handed = handed_;
    const bool draining = draining_;
    lk.unlock();
    bool progressed = false;
    try {
      progressed = drive(handed);
    } catch (...) {
      lk.lock();
      error_ = std::current_exception();
      finished_.notify_all();
      continue;
    }
    lk.lock();
    // Nothing moved: sleep, or less if more buckets are handed over (or the main thread waits).
    poll = progressed || draining ? kMinPoll : std::min(2 * poll, kMaxPoll);
    if (!progressed)
      work_.wait_for(lk, poll, [&] { return stop_ || handed_ > handed || draining_ != draining; });
  }
}

}  // namespace mpicnn::dist
