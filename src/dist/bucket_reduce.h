// BucketReducer: the sum over ranks of the gradient buckets (grad_sync.h), one bucket at a time,
// with non-blocking MPI collectives that whoever drives it advances by tests: GradSync's hooks
// between modules, or its progress thread (progress_thread.h). Two algorithms:
// - Ring: one MPI_Iallreduce over all ranks (Open MPI's ring for multi-MB buckets, see comm.cpp).
// - Hierarchical (Horovod's): a reduce to the node's first rank over shared memory, an
//   allreduce among the node leaders (one rank per node on the network), a broadcast back
//   inside the node. Each node link then carries one rank's share of the ring instead of
//   every rank's, in 2(nodes - 1) instead of 2(ranks - 1) latency steps.
// With compression (compress.h) a bucket is cast to 16 bits before its first phase, the phases
// sum 16-bit values, and it is cast back to float after its last.
// Collectives on one communicator must start in the same order on every rank: each phase has
// its own communicator and a bucket starts a phase only after every earlier bucket has.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dist/compress.h"

namespace mpicnn::dist {

class Comm;

enum class AllreduceAlgo { Ring, Hierarchical, Auto };
const char* to_string(AllreduceAlgo a);  // "ring", "hierarchical", "auto"
// "ring" | "hierarchical" | "auto"; anything else throws one line naming `flag`.
AllreduceAlgo parse_allreduce(const std::string& s, const std::string& flag);
// Auto -> Hierarchical when the job spans several nodes and every node runs more than one rank
// (then the node-local phases replace network traffic), else Ring. Collective.
AllreduceAlgo resolve_allreduce(AllreduceAlgo a, const Comm& comm);

class BucketReducer {
 public:
  struct Range {
    int64_t begin = 0, end = 0;  // float offsets into the array start() is given
  };
  // algo must be resolved (not Auto). Collective over comm (duplicates or splits communicators).
  BucketReducer(const Comm& comm, AllreduceAlgo algo, GradCompression compression, std::vector<Range> buckets);
  ~BucketReducer();
  BucketReducer(const BucketReducer&) = delete;
  BucketReducer& operator=(const BucketReducer&) = delete;

  // A new step: every bucket idle. All buckets of the previous step must be done.
  void reset();
  // Starts bucket b over base[begin, end) (compressing it first). Buckets start in order 0, 1, ...
  void start(size_t b, float* base);
  // Advances bucket b as far as its requests allow; true once its sum is in base[begin, end).
  bool test(size_t b);
  // Blocks until bucket b is done (earlier buckets must be done or progressing elsewhere).
  void wait(size_t b);
  bool done(size_t b) const;

  AllreduceAlgo algo() const { return algo_; }
  GradCompression compression() const { return compression_; }
  int64_t element_bytes() const { return wire_bytes(compression_); }

 private:
  enum Phase : int { kIdle = -1, kReduce = 0, kAllreduce = 1, kBroadcast = 2, kDone = 3 };
  struct State {
    int phase = kIdle;  // the phase whose request is in flight (or kDone)
    MPI_Request request = MPI_REQUEST_NULL;
    float* base = nullptr;
  };
  bool launch(size_t b, int phase);  // false: an earlier bucket has not started this phase yet
  void* wire(size_t b);              // what the collectives work on: the floats or the 16-bit copy

  AllreduceAlgo algo_;
  GradCompression compression_;
  std::vector<Range> ranges_;
  std::vector<State> state_;
  size_t launched_[3] = {0, 0, 0};  // per phase: buckets that have started it (or skipped it)
  MPI_Datatype type_ = MPI_FLOAT;
  MPI_Op op_ = MPI_SUM;
  std::unique_ptr<HalfSum> half_sum_;
  std::vector<uint16_t> wire_;  // the 16-bit copies, at the buckets' float offsets
  // Ring: all_ (a duplicate of the world). Hierarchical: reduce_ and bcast_ (duplicates of the
  // node communicator), leaders_ (the node leaders; MPI_COMM_NULL on the other ranks).
  MPI_Comm all_ = MPI_COMM_NULL, reduce_ = MPI_COMM_NULL, bcast_ = MPI_COMM_NULL,
           leaders_ = MPI_COMM_NULL;
  int local_size_ = 1, local_rank_ = 0, leaders_size_ = 0;
};

}  // namespace mpicnn::dist
