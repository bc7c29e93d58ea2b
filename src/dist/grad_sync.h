// GradSync: averages the gradient slab over ranks after each backward. The slab is cut into
// buckets (contiguous ranges of whole entries, ~25 MB by default) in reverse slab order; each
// bucket's sum (bucket_reduce.h: ring or hierarchical, fp32 or compressed to 16 bits) starts as
// soon as the model's gradient-ready hook says all its gradients are final, so communication
// overlaps the rest of backward. Who advances the non-blocking collectives (SyncMode):
// - Thread (default): a progress thread (progress_thread.h) that starts buckets as they are
//   handed over and tests them every 50 us; the link stays busy while the main thread computes,
//   which matters over TCP, where Open MPI moves data only inside MPI calls.
// - Hooks: the main thread, with MPI tests between modules (the link idles during a module).
// - Blocking: nothing during backward; all buckets after it (comparison, fallback).
// finish() waits and scales by 1/K. Not an optimizer and not a loss-scaler; BatchNorm
// statistics stay per rank.
// A GPU slab goes through a pinned host mirror: each ready bucket is copied to the host on a
// copy stream while backward goes on, and its allreduce starts (in bucket order) once the copy
// is done, advanced by hooks; finish() copies the summed slab back in one transfer. With a
// CUDA-aware MPI (mpi_cuda_aware()) buckets are allreduced in device memory instead (ring, fp32
// only), by blocking MPI_Allreduce calls in finish() (CUDA-aware Open MPI supports no
// non-blocking reductions on device memory), each once the compute stream has reached the
// event recorded when the bucket became ready: the host queued the whole backward before
// finish(), so they overlap its later layers.
// With NCCL (GradSyncOptions::nccl, --gpu-allreduce) a GPU slab stays on the device: each ready
// bucket's allreduce is queued on NCCL's stream behind the bucket's ready event, the optimizer
// waits on the last (device_sync.h); no host copy and no host wait per bucket.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dist/bucket_reduce.h"
#include "dist/comm.h"
#include "dist/device_sync.h"
#include "dist/progress_thread.h"
#include "layers/params.h"
#include "models/model.h"

namespace mpicnn::dist {

enum class SyncMode {
  Thread,    // buckets started and advanced by the progress thread during backward
  Hooks,     // buckets started and tested from the gradient-ready hook, between modules
  Blocking,  // all buckets after backward (comparison, fallback)
};
const char* to_string(SyncMode m);  // "thread", "hooks", "off" (the --overlap values)
// "thread" | "hooks" | "off"; anything else throws one line naming `flag`.
SyncMode parse_overlap(const std::string& s, const std::string& flag);

struct GradSyncOptions {
  int64_t bucket_bytes = int64_t(25) << 20;  // a bucket closes once it holds at least this
  SyncMode mode = SyncMode::Thread;
  AllreduceAlgo algo = AllreduceAlgo::Auto;  // resolved by the constructor (collective)
  GradCompression compression = GradCompression::None;
  // true: finish() scales the summed slab by 1/K (one pass over the slab after the wait).
  // false: the caller already scaled the loss gradient by 1/K (SoftmaxCrossEntropy::backward's
  // `scale`), so the sum is the average and that pass is skipped; same result up to rounding
  // (bit-identical when K is a power of two).
  bool average = true;
  // A GPU slab: summed device to device by NCCL (resolve_gpu_allreduce decides); algo is then
  // Ring (NCCL picks its own rings and trees) and mode at most Hooks. Needs GPU gradients.
  bool nccl = false;
};

struct Bucket {
  int64_t begin = 0, end = 0;  // grad-slab float range [begin, end), entry boundaries
  int first_entry = 0, last_entry = 0;  // ParamStore entry indices it covers (inclusive)
};

struct GradSyncStats {
  int64_t steps = 0;
  double step_seconds = 0;  // begin_step() .. end of finish(), summed
  double wait_seconds = 0;  // blocked on communication: final wait, blocking allreduce, Testall
  int64_t bytes = 0;        // payload allreduced by this rank (bucket bytes per step, 2 a float
                            // compressed); on the wire a ring allreduce sends about 2 (K-1)/K
                            // times this
  double wait_share() const { return step_seconds > 0 ? wait_seconds / step_seconds : 0.0; }
};

// The default bucket size: an eighth of the trainable gradient, between 64 KiB and 25 MiB.
// With one bucket (25 MiB for resnet20's 1 MiB gradient) nothing can start before backward
// ends; eight let the first start after about an eighth of backward, and the last (the one
// that cannot overlap) is an eighth of the bytes. The 64 KiB floor bounds the latency cost
// (each bucket's allreduce pays 2 (K-1) network round trips), the 25 MiB cap is DDP's.
int64_t auto_bucket_bytes(const ParamStore& store);

// Buckets of whole Param entries in reverse slab order: buckets[0] ends at the slab's end,
// the last begins at 0; together they cover the slab once. Padding between entries rides
// along (it is zero on every rank). Frozen entries (fine-tuning) are left out: a bucket never
// spans one, so only trainable gradient ranges are summed.
std::vector<Bucket> make_buckets(ParamStore& store, int64_t bucket_bytes);

class GradSync {
 public:
  // store must be allocated and outlive this object; the gradient slab must start zeroed
  // padding (ParamStore guarantees it). Collective (communicators for the buckets). Thread
  // mode needs MPI_THREAD_SERIALIZED and more than one rank, and a GPU slab is advanced by
  // hooks: otherwise Thread runs as Hooks (options().mode says which). A CUDA-aware GPU slab
  // takes ring and no compression only (an Error otherwise).
  GradSync(const Comm& comm, ParamStore& store, GradSyncOptions options = {});
  ~GradSync();

  // Installs the gradient-ready hook on the model (whose params() must be `store`). Without
  // it, every bucket starts in finish().
  void attach(Model& model);

  // Step protocol, the same on every rank: begin_step() before backward (or forward);
  // backward runs, the hook calls on_ready(); finish() after backward. Collective. If a step
  // throws between begin_step() and finish(), requests may still be writing into the slab:
  // the caller must end the job (Comm::fail_job), not carry on or free the model.
  void begin_step();
  void on_ready(int64_t first_ready_offset);
  void finish();
  // Gradient accumulation (--accumulate): a backward outside begin_step()/finish() with
  // `local` set only adds to this rank's slab; the hook's calls are ignored. The step's last
  // micro-batch runs between begin_step() and finish(), which sum the whole slab as usual.
  void set_local(bool local);

  const std::vector<Bucket>& buckets() const { return buckets_; }
  size_t buckets_started() const;  // in this step so far (handed to the thread, in Thread mode)
  const GradSyncOptions& options() const { return options_; }  // mode and algo as they run
  const GradSyncStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

 private:
  void start(size_t b);
  void progress();
  // Buckets at offsets >= first_ready_offset: started (CPU: by this thread, or handed to the
  // progress thread), or (GPU) host copy or ready mark queued.
  void launch_ready(int64_t first_ready_offset);
  size_t ready_count(int64_t first_ready_offset) const;  // buckets at offsets >= it
  float* bucket_base();          // what buckets index: the slab or its host mirror
  void wait_buckets();           // finish(): every bucket started and summed
  void blocking_slab();          // Blocking, ring, fp32, CPU: the slab in few MPI_Allreduce calls
  void copy_back();              // staged GPU slab: the summed buckets back to the device

  const Comm& comm_;
  ParamStore& store_;
  GradSyncOptions options_;
  std::vector<Bucket> buckets_;
  int64_t synced_floats_ = 0;  // the buckets' floats: the slab's less frozen ranges
  std::unique_ptr<BucketReducer> reducer_;   // all but the CUDA-aware and NCCL device slabs
  std::unique_ptr<DeviceCollective> device_coll_;  // NCCL
  std::unique_ptr<DeviceBuckets> device_;          // NCCL: which bucket is queued when
  std::unique_ptr<ProgressThread> thread_;   // Thread mode
  size_t next_ = 0;                          // first bucket not yet started (hooks / blocking)
  // GPU slab: buckets below queued_ have their device -> host copy (staged_: without a
  // CUDA-aware MPI, into the pinned host mirror host_) or their ready mark queued; the
  // backend's slot for bucket b is b.
  bool gpu_ = false, staged_ = false;
  // One rank, GPU gradients, no compression: the sum is the gradients themselves, so nothing is
  // copied to the host and back (the copies were a step's "communication wait" on one GPU).
  bool alone_ = false;
  std::shared_ptr<void> host_;
  size_t queued_ = 0;
  bool active_ = false;
  bool local_ = false;  // set_local
  double step_start_ = 0;
  GradSyncStats stats_;
};

}  // namespace mpicnn::dist
