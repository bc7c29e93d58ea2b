// The GPU gradient slab's device-to-device path (--gpu-allreduce nccl): which path a run takes
// (resolve_gpu_allreduce, a pure rule), the collective it drives (DeviceCollective: NCCL in
// kernels/nccl_backend.cu, a stand-in in the CPU tests) and the bucket bookkeeping between them
// (DeviceBuckets). Per bucket, nothing waits on the host: its ready event is recorded on the
// compute stream, its allreduce queued on the communication stream behind that event; finish()
// makes the compute stream (the optimizer) wait for the last bucket, then polls for every
// bucket's end under the watchdog's deadline. Not the MPI path (grad_sync.h, bucket_reduce.h),
// and no MPI or CUDA headers here: kernels/ include this file.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dist/grad_compression.h"

namespace mpicnn::dist {

class Comm;

// --gpu-allreduce: how a GPU slab's buckets are summed over ranks.
enum class GpuAllreduce { Nccl, Mpi, Auto };
const char* to_string(GpuAllreduce a);  // "nccl", "mpi", "auto"
// "nccl" | "mpi" | "auto"; anything else throws one line naming `flag`.
GpuAllreduce parse_gpu_allreduce(const std::string& s, const std::string& flag);

// What the choice depends on, the same on every rank (the caller agrees on them).
struct GpuAllreduceFacts {
  bool nccl_built = false;  // this build links NCCL (nccl_backend.h's compiled_in())
  bool cuda = false;        // the model's gradients are on the GPU
  int ranks = 1;
  std::string shared_gpu;   // "" when every rank has a GPU of its own, else which one is shared
};
// Auto -> Nccl when the build has NCCL, the gradients are on the GPU and there are several
// ranks, each with its own GPU; Mpi otherwise (one rank: nothing to exchange; a shared GPU: NCCL
// refuses it). Nccl asked for where it cannot run (no NCCL in the build, a CPU run, a shared GPU)
// throws one line naming `flag`. Mpi stays Mpi.
GpuAllreduce resolve_gpu_allreduce(GpuAllreduce want, const GpuAllreduceFacts& facts,
                                   const std::string& flag);
// The first id that occurs twice ("" when all differ): of the ranks' GPU ids, a shared GPU.
std::string first_duplicate(const std::vector<std::string>& ids);

// The sum over ranks of gradient buckets in device memory, queued on the GPU. Buckets are
// numbered slots 0.. in the order every rank launches them.
class DeviceCollective {
 public:
  virtual ~DeviceCollective() = default;
  // Bucket `slot`'s gradients are complete once the compute stream reaches the point it has
  // reached now: records the slot's ready event there. Does not wait.
  virtual void mark_ready(int slot) = 0;
  // Queues, on the communication stream, after the slot's ready event: the sum over ranks of
  // slab[begin, end) in place (cast to 16 bits and back around it when compressing), then the
  // slot's done event. Does not wait.
  virtual void allreduce(int slot, float* slab, int64_t begin, int64_t end) = 0;
  // The compute stream waits for the slot's done event: what is queued there next (the
  // optimizer step) runs after the sum. Does not wait on the host.
  virtual void join(int slot) = 0;
  // Whether the slot's sum has finished; throws one line on a failed collective (an NCCL
  // asynchronous error).
  virtual bool done(int slot) = 0;
  // Ends the communicator's work in flight (ncclCommAbort), after a timeout; unusable after.
  virtual void abort() = 0;
};

// NCCL over the ranks of comm, one communicator made here from rank 0's id broadcast with MPI
// (collective; an NCCL failure on any rank throws the same SharedError on every rank). NCCL
// finds its own rings and trees over NVLink, PCIe and the network, so there is no hierarchical
// variant: --allreduce does not apply. slab_floats: the gradient slab's size (the 16-bit copies).
std::unique_ptr<DeviceCollective> open_nccl(const Comm& comm, GradCompression compression, int64_t slab_floats);

// Which bucket is launched, joined and waited for when: GradSync's device path, plain C++.
class DeviceBuckets {
 public:
  struct Range {
    int64_t begin = 0, end = 0;  // float offsets into the slab
  };
  // buckets in launch order (GradSync's reverse slab order); coll and slab outlive this.
  DeviceBuckets(DeviceCollective& coll, float* slab, std::vector<Range> buckets);

  void begin_step();  // a new step: no bucket launched
  // Buckets [launched(), ready): each marked ready and its allreduce queued, in bucket order.
  void launch(size_t ready);
  // Launches the buckets not launched yet, makes the compute stream wait for the last one (the
  // communication stream runs them in order), then polls every bucket until it has finished,
  // under the watchdog's deadline (watchdog.h's polled_wait; abort() on a timeout).
  void finish();
  size_t launched() const { return launched_; }

 private:
  DeviceCollective& coll_;
  float* slab_;
  std::vector<Range> buckets_;
  size_t launched_ = 0;
};

}  // namespace mpicnn::dist
