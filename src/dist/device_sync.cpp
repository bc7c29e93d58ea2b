// The GPU slab's device-to-device gradient path: the --gpu-allreduce rule, NCCL's communicator
// from an MPI broadcast, and the bucket bookkeeping.
#include "dist/device_sync.h"

#include <algorithm>
#include <set>

#include "core/check.h"
#include "dist/comm.h"
#include "dist/nccl_backend.h"
#include "dist/watchdog.h"

namespace mpicnn::dist {

const char* to_string(GpuAllreduce a) {
  switch (a) {
    case GpuAllreduce::Nccl: return "nccl";
    case GpuAllreduce::Mpi: return "mpi";
    default: return "auto";
  }
}

GpuAllreduce parse_gpu_allreduce(const std::string& s, const std::string& flag) {
  if (s == "nccl") return GpuAllreduce::Nccl;
  if (s == "mpi") return GpuAllreduce::Mpi;
  if (s == "auto") return GpuAllreduce::Auto;
  FAIL(flag, ": '", s, "' is not a GPU allreduce (nccl, mpi or auto)");
}

GpuAllreduce resolve_gpu_allreduce(GpuAllreduce want, const GpuAllreduceFacts& f, const std::string& flag) {
  if (want == GpuAllreduce::Mpi) return want;
  if (want == GpuAllreduce::Auto)
    return f.nccl_built && f.cuda && f.ranks > 1 && f.shared_gpu.empty() ? GpuAllreduce::Nccl : GpuAllreduce::Mpi;
  CHECK(f.nccl_built, flag, " nccl: ", nccl::kNoNccl);
  CHECK(f.cuda, flag, " nccl: needs GPU gradients (--device cuda); this run trains on the CPU, whose "
        "gradients go over MPI");
  CHECK(f.shared_gpu.empty(), flag, " nccl: several ranks share GPU ", f.shared_gpu,
        ", which NCCL refuses; run one rank per GPU, or use --gpu-allreduce mpi (or auto)");
  return want;
}

std::string first_duplicate(const std::vector<std::string>& ids) {
  std::set<std::string> seen;
  for (const std::string& id : ids)
    if (!seen.insert(id).second) return id;
  return "";
}

std::unique_ptr<DeviceCollective> open_nccl(const Comm& comm, GradCompression compression, int64_t slab_floats) {
  std::vector<uint8_t> id;
  comm.on_root([&] { id = nccl::unique_id(); });
  comm.broadcast(id);
  std::unique_ptr<DeviceCollective> coll;
  // ncclCommInitRank waits for every rank: a rank that never joins is the watchdog's to end.
  WaitGuard wait("ncclCommInitRank", "NCCL communicator");
  comm.on_all([&] { coll = nccl::open(id, comm.rank(), comm.size(), compression, slab_floats); });
  return coll;
}

DeviceBuckets::DeviceBuckets(DeviceCollective& coll, float* slab, std::vector<Range> buckets)
    : coll_(coll), slab_(slab), buckets_(std::move(buckets)) {
  CHECK(!buckets_.empty(), "gradient sync: no bucket to allreduce");
}

void DeviceBuckets::begin_step() { launched_ = 0; }

void DeviceBuckets::launch(size_t ready) {
  ready = std::min(ready, buckets_.size());
  for (; launched_ < ready; ++launched_) {
    const int slot = int(launched_);
    coll_.mark_ready(slot);
    coll_.allreduce(slot, slab_, buckets_[launched_].begin, buckets_[launched_].end);
  }
}

void DeviceBuckets::finish() {
  launch(buckets_.size());
  coll_.join(int(buckets_.size()) - 1);
  size_t finished = 0;
  polled_wait([&] {
    while (finished < buckets_.size() && coll_.done(int(finished))) ++finished;
    return finished == buckets_.size();
  }, [&] { coll_.abort(); }, "ncclAllReduce", "gradient buckets");
}

}  // namespace mpicnn::dist
