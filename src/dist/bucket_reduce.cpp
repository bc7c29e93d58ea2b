// The per-bucket phases of the gradient allreduce: ring, or hierarchical (node reduce, leader
// allreduce, node broadcast), on floats or on their 16-bit copies.
#include "dist/bucket_reduce.h"

#include <algorithm>

#include "core/check.h"
#include "dist/comm.h"

namespace mpicnn::dist {

const char* to_string(AllreduceAlgo a) {
  switch (a) {
    case AllreduceAlgo::Ring: return "ring";
    case AllreduceAlgo::Hierarchical: return "hierarchical";
    default: return "auto";
  }
}

AllreduceAlgo parse_allreduce(const std::string& s, const std::string& flag) {
  if (s == "ring") return AllreduceAlgo::Ring;
  if (s == "hierarchical") return AllreduceAlgo::Hierarchical;
  if (s == "auto") return AllreduceAlgo::Auto;
  FAIL(flag, ": '", s, "' is not an allreduce algorithm (ring, hierarchical or auto)");
}

AllreduceAlgo resolve_allreduce(AllreduceAlgo a, const Comm& comm) {
  if (a != AllreduceAlgo::Auto) return a;
  const int fewest_on_a_node = comm.allreduce_min(comm.local_size());
  return comm.nodes() > 1 && fewest_on_a_node > 1 ? AllreduceAlgo::Hierarchical : AllreduceAlgo::Ring;
}

namespace {
MPI_Comm dup(MPI_Comm c) {
  MPI_Comm out = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_dup(c, &out));
  MPI_CHECK(MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN));
  return out;
}
void free_comm(MPI_Comm& c) {
  if (c != MPI_COMM_NULL) MPI_Comm_free(&c);
}
}  // namespace

BucketReducer::BucketReducer(const Comm& comm, AllreduceAlgo algo, GradCompression compression,
                             std::vector<Range> buckets)
    : algo_(algo), compression_(compression), ranges_(std::move(buckets)), state_(ranges_.size()) {
  CHECK(algo != AllreduceAlgo::Auto, "BucketReducer: resolve the allreduce algorithm first");
  if (compression_ != GradCompression::None) {
    half_sum_ = std::make_unique<HalfSum>(compression_);
    type_ = MPI_UINT16_T;
    op_ = half_sum_->op();
    int64_t end = 0;
    for (const Range& r : ranges_) end = std::max(end, r.end);
    wire_.resize(size_t(end));
  }
  if (algo_ == AllreduceAlgo::Ring) {
    all_ = dup(comm.world());
    return;
  }
  local_size_ = comm.local_size();
  local_rank_ = comm.local_rank();
  reduce_ = dup(comm.node());
  bcast_ = dup(comm.node());
  MPI_CHECK(MPI_Comm_split(comm.world(), local_rank_ == 0 ? 0 : MPI_UNDEFINED, comm.rank(), &leaders_));
  if (leaders_ != MPI_COMM_NULL) {
    MPI_CHECK(MPI_Comm_set_errhandler(leaders_, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_size(leaders_, &leaders_size_));
  }
}

BucketReducer::~BucketReducer() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (State& s : state_)  // a step that threw: its requests are abandoned (the job is ending)
    if (s.request != MPI_REQUEST_NULL) MPI_Request_free(&s.request);
  free_comm(all_), free_comm(reduce_), free_comm(bcast_), free_comm(leaders_);
}

void BucketReducer::reset() {
  for (const State& s : state_) CHECK(s.phase == kIdle || s.phase == kDone, "BucketReducer: a bucket is still in flight");
  for (State& s : state_) s = State{};
  std::fill(std::begin(launched_), std::end(launched_), size_t(0));
}

void* BucketReducer::wire(size_t b) {
  if (compression_ == GradCompression::None) return state_[b].base + ranges_[b].begin;
  return wire_.data() + ranges_[b].begin;
}

bool BucketReducer::done(size_t b) const { return state_[b].phase == kDone; }

void BucketReducer::start(size_t b, float* base) {
  CHECK(b < state_.size() && state_[b].phase == kIdle, "BucketReducer: bucket ", b, " started twice");
  CHECK(b == 0 || state_[b - 1].phase != kIdle, "BucketReducer: bucket ", b, " started before ", b - 1);
  State& s = state_[b];
  s.base = base;
  const Range& r = ranges_[b];
  if (compression_ != GradCompression::None)
    compress(compression_, base + r.begin, wire_.data() + r.begin, r.end - r.begin);
  // Buckets start in order, so the first phase's turn has come.
  CHECK(launch(b, algo_ == AllreduceAlgo::Ring ? kAllreduce : kReduce), "BucketReducer: bucket ", b,
        " out of order");
}

// Starts `phase` of bucket b, or skips it when this rank has no part in it; false when an
// earlier bucket has not started that phase yet (communicator order).
bool BucketReducer::launch(size_t b, int phase) {
  State& s = state_[b];
  if (phase == kDone) {
    if (compression_ != GradCompression::None) {
      const Range& r = ranges_[b];
      decompress(compression_, wire_.data() + r.begin, s.base + r.begin, r.end - r.begin);
    }
    s.phase = kDone;
    return true;
  }
  if (launched_[phase] != b) return false;
  const int n = int(ranges_[b].end - ranges_[b].begin);
  void* p = wire(b);
  s.request = MPI_REQUEST_NULL;
  if (phase == kAllreduce && algo_ == AllreduceAlgo::Ring) {
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, p, n, type_, op_, all_, &s.request));
  } else if (phase == kReduce && local_size_ > 1) {
    MPI_CHECK(MPI_Ireduce(local_rank_ == 0 ? MPI_IN_PLACE : p, p, n, type_, op_, 0, reduce_, &s.request));
  } else if (phase == kAllreduce && leaders_size_ > 1) {
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, p, n, type_, op_, leaders_, &s.request));
  } else if (phase == kBroadcast && local_size_ > 1) {
    MPI_CHECK(MPI_Ibcast(p, n, type_, 0, bcast_, &s.request));
  }
  ++launched_[phase];
  s.phase = phase;
  return true;
}

bool BucketReducer::test(size_t b) {
  State& s = state_[b];
  CHECK(s.phase != kIdle, "BucketReducer: bucket ", b, " tested before it started");
  while (s.phase != kDone) {
    if (s.request != MPI_REQUEST_NULL) {
      int flag = 0;
      MPI_CHECK(MPI_Test(&s.request, &flag, MPI_STATUS_IGNORE));
      if (!flag) return false;
    }
    // Ring: its one phase is the last. Hierarchical: reduce -> allreduce -> broadcast -> done.
    const int next = algo_ == AllreduceAlgo::Ring ? kDone : s.phase + 1;
    if (!launch(b, next)) return false;
  }
  return true;
}

void BucketReducer::wait(size_t b) {
  while (!test(b)) {
    State& s = state_[b];
    CHECK(s.request != MPI_REQUEST_NULL, "BucketReducer: bucket ", b, " waits on an earlier bucket");
    MPI_CHECK(MPI_Wait(&s.request, MPI_STATUS_IGNORE));
  }
}

}  // namespace mpicnn::dist
