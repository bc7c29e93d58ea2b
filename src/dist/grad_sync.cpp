// Bucketed, overlapped gradient averaging over the ParamStore's gradient slab.
#include "dist/grad_sync.h"

#include <algorithm>
#include <climits>

#include "core/fault.h"
#include "core/gpu.h"
#include "dist/watchdog.h"

namespace mpicnn::dist {

const char* to_string(SyncMode m) {
  switch (m) {
    case SyncMode::Thread: return "thread";
    case SyncMode::Hooks: return "hooks";
    default: return "off";
  }
}

SyncMode parse_overlap(const std::string& s, const std::string& flag) {
  if (s == "thread") return SyncMode::Thread;
  if (s == "hooks") return SyncMode::Hooks;
  if (s == "off") return SyncMode::Blocking;
  FAIL(flag, ": '", s, "' is not an overlap mode (thread, hooks or off)");
}

std::vector<Bucket> make_buckets(ParamStore& store, int64_t bucket_bytes) {
  CHECK(store.allocated(), "gradient sync: the parameter store is not allocated");
  CHECK(bucket_bytes >= 1, "gradient sync: bucket size must be >= 1 byte, got ", bucket_bytes);
  const auto& entries = store.entries();
  std::vector<int> params;
  for (size_t i = 0; i < entries.size(); ++i)
    if (entries[i].kind == StateKind::Param) params.push_back(int(i));
  const int64_t slab = store.grads().numel();
  std::vector<Bucket> out;
  if (params.empty()) {
    out.push_back({0, slab, 0, -1});
    return out;
  }
  const int64_t want = (bucket_bytes + int64_t(sizeof(float)) - 1) / int64_t(sizeof(float));
  Bucket cur;
  bool open = false;
  for (size_t k = params.size(); k-- > 0;) {
    const StateEntry& e = entries[size_t(params[k])];
    if (e.frozen) {  // a frozen entry ends the bucket below it: its range is never summed
      if (open) out.push_back(cur);
      open = false;
      continue;
    }
    if (!open) cur = Bucket{0, k + 1 < params.size() ? entries[size_t(params[k + 1])].offset : slab, 0, params[k]};
    open = true;
    // The first entry starts the slab at 0: the last bucket covers down to 0 whatever it holds.
    cur.begin = k == 0 ? 0 : e.offset;
    cur.first_entry = params[k];
    if (cur.end - cur.begin >= want || k == 0) {
      CHECK(cur.end - cur.begin < INT_MAX, "gradient sync: entry '", e.name,
            "' makes a bucket over 2^31 floats");
      out.push_back(cur);
      open = false;
    }
  }
  return out;
}

int64_t auto_bucket_bytes(const ParamStore& store) {
  int64_t floats = 0;
  for (const StateEntry& e : store.entries())
    if (e.kind == StateKind::Param && !e.frozen) floats += e.shape.numel();
  return std::clamp(floats * int64_t(sizeof(float)) / 8, int64_t(64) << 10, int64_t(25) << 20);
}

GradSync::GradSync(const Comm& comm, ParamStore& store, GradSyncOptions options)
    : comm_(comm), store_(store), options_(options), buckets_(make_buckets(store, options.bucket_bytes)) {
  for (const Bucket& b : buckets_) synced_floats_ += b.end - b.begin;
  options_.algo = resolve_allreduce(options_.algo, comm);
  gpu_ = store.device() == Device::CUDA;
  if (options_.nccl) {
    CHECK(gpu_, "gradient sync: NCCL sums GPU gradients; these are on the CPU");
    options_.algo = AllreduceAlgo::Ring;
    if (options_.mode == SyncMode::Thread) options_.mode = SyncMode::Hooks;
    device_coll_ = open_nccl(comm, options_.compression, store.grads().numel());
    std::vector<DeviceBuckets::Range> ranges;
    for (const Bucket& b : buckets_) ranges.push_back({b.begin, b.end});
    device_ = std::make_unique<DeviceBuckets>(*device_coll_, store.grads().data(), std::move(ranges));
    return;
  }
  alone_ = gpu_ && comm.size() == 1 && options_.compression == GradCompression::None;
  const bool device_mpi = gpu_ && mpi_cuda_aware();
  if (device_mpi) {
    CHECK(options_.algo == AllreduceAlgo::Ring && options_.compression == GradCompression::None,
          "gradient sync: with a CUDA-aware MPI, GPU gradients are allreduced in device memory, as "
          "fp32 over all ranks (--allreduce ring, --grad-compression none); got --allreduce ",
          to_string(options_.algo), " --grad-compression ", to_string(options_.compression));
  } else {
    std::vector<BucketReducer::Range> ranges;
    for (const Bucket& b : buckets_) ranges.push_back({b.begin, b.end});
    reducer_ = std::make_unique<BucketReducer>(comm, options_.algo, options_.compression, std::move(ranges));
  }
  if (gpu_ && !device_mpi && !alone_) {
    staged_ = true;
    host_ = gpu::backend().alloc_pinned(size_t(store.grads().numel()) * sizeof(float));
  }
  if (options_.mode == SyncMode::Thread &&
      (gpu_ || comm.size() == 1 || comm.thread_level() < MPI_THREAD_SERIALIZED))
    options_.mode = SyncMode::Hooks;
  if (options_.mode == SyncMode::Thread) thread_ = std::make_unique<ProgressThread>(*reducer_, buckets_.size());
}

GradSync::~GradSync() = default;

float* GradSync::bucket_base() { return staged_ ? static_cast<float*>(host_.get()) : store_.grads().data(); }

void GradSync::attach(Model& model) {
  CHECK(&model.params() == &store_, "gradient sync: model ", model.name(),
        " does not own this parameter store");
  model.set_grad_ready([this](int64_t offset) { on_ready(offset); });
}

size_t GradSync::buckets_started() const {
  return thread_ ? thread_->handed() : device_ ? device_->launched() : next_;
}

void GradSync::set_local(bool local) {
  CHECK(!active_, "gradient sync: set_local() between begin_step() and finish()");
  local_ = local;
}

void GradSync::begin_step() {
  CHECK(!active_, "gradient sync: begin_step() twice without finish()");
  CHECK(!local_, "gradient sync: begin_step() during a local backward (set_local)");
  active_ = true;
  next_ = queued_ = 0;
  if (thread_)
    thread_->begin_step(bucket_base());
  else if (device_)
    device_->begin_step();
  else if (reducer_)
    reducer_->reset();
  step_start_ = MPI_Wtime();
}

void GradSync::start(size_t b) {
  if (gpu_) gpu::backend().slot_done(int(b), /*wait=*/true);  // its host copy, or its gradients
  if (reducer_) {
    reducer_->start(b, bucket_base());
    return;
  }
  // Device memory: blocking. Open MPI's CUDA support covers blocking collectives only; its
  // non-blocking reductions apply the sum on the CPU to the device pointer (ompi#9845).
  const Bucket& k = buckets_[b];
  WaitGuard wait("MPI_Allreduce", "gradient bucket", int(b), int(buckets_.size()));
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, store_.grads().data() + k.begin, int(k.end - k.begin), MPI_FLOAT,
                          MPI_SUM, comm_.world()));
}

void GradSync::progress() {
  // Staged GPU slab: start the allreduce of every bucket whose host copy has landed, in bucket
  // order (every rank must start collectives in the same order). Device buckets (CUDA-aware)
  // all wait for finish(), whose blocking allreduces overlap the backward still running on
  // the GPU (the host has queued all of it by then).
  while (staged_ && next_ < queued_ && gpu::backend().slot_done(int(next_), /*wait=*/false))
    start(next_++);
  // MPI's non-blocking collectives advance only inside MPI calls; one round of tests per module
  // lets them run during backward. Time here counts as waiting (it is not compute).
  if (next_ == 0 || !reducer_) return;
  const double t = MPI_Wtime();
  for (size_t b = 0; b < next_; ++b) reducer_->test(b);
  stats_.wait_seconds += MPI_Wtime() - t;
}

void GradSync::on_ready(int64_t first_ready_offset) {
  if (options_.mode == SyncMode::Blocking || local_) return;
  CHECK(active_, "gradient sync: gradients reported ready outside begin_step()/finish()");
  if (thread_) {
    thread_->hand_over(ready_count(first_ready_offset));
    return;
  }
  launch_ready(first_ready_offset);
  progress();
}

size_t GradSync::ready_count(int64_t first_ready_offset) const {
  size_t n = 0;
  while (n < buckets_.size() && buckets_[n].begin >= first_ready_offset) ++n;
  return n;
}

void GradSync::launch_ready(int64_t first_ready_offset) {
  if (alone_) return;
  const size_t ready = ready_count(first_ready_offset);
  if (device_) {
    device_->launch(ready);
    return;
  }
  if (!gpu_) {
    while (next_ < ready) start(next_++);
    return;
  }
  for (; queued_ < ready; ++queued_) {
    const Bucket& k = buckets_[queued_];
    if (staged_)
      gpu::backend().copy_to_host_async(bucket_base() + k.begin, store_.grads().data() + k.begin,
                                        size_t(k.end - k.begin) * sizeof(float), int(queued_));
    else
      gpu::backend().mark_ready(int(queued_));
  }
}

// The summed host mirror back to the device: in one transfer when the buckets cover the slab,
// else bucket by bucket (the mirror holds nothing for frozen ranges).
void GradSync::copy_back() {
  Tensor& g = store_.grads();
  if (synced_floats_ == g.numel()) {
    gpu::backend().copy(g.data(), true, host_.get(), false, size_t(g.numel()) * sizeof(float));
    return;
  }
  for (const Bucket& k : buckets_)
    gpu::backend().copy(g.data() + k.begin, true, bucket_base() + k.begin, false,
                        size_t(k.end - k.begin) * sizeof(float));
}

void GradSync::wait_buckets() {
  if (thread_) {
    fault::point("allreduce");  // the buckets are in flight: the other ranks wait on ours
    WaitGuard wait("MPI_Waitall", "gradient buckets", -1, 0);
    thread_->wait_all();
    return;
  }
  if (alone_) return;
  if (device_) {
    fault::point("allreduce");
    device_->finish();
    return;
  }
  launch_ready(0);  // whatever backward did not report (all of it without the hook)
  while (next_ < buckets_.size()) start(next_++);
  fault::point("allreduce");
  WaitGuard wait("MPI_Waitall", "gradient buckets", -1, 0);
  if (reducer_)
    for (size_t b = 0; b < buckets_.size(); ++b) reducer_->wait(b);
  if (staged_) copy_back();
}

void GradSync::blocking_slab() {
  Tensor& g = store_.grads();
  if (synced_floats_ < g.numel()) {  // frozen ranges: bucket by bucket, without them
    for (size_t b = 0; b < buckets_.size(); ++b) {
      WaitGuard wait("MPI_Allreduce", "gradient bucket", int(b), int(buckets_.size()));
      MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, g.data() + buckets_[b].begin,
                              int(buckets_[b].end - buckets_[b].begin), MPI_FLOAT, MPI_SUM, comm_.world()));
    }
    return;
  }
  // Whole slab, in chunks below MPI's int count (a single call for any real model).
  constexpr int64_t kChunk = int64_t(1) << 30;
  WaitGuard wait("MPI_Allreduce", "gradient slab");
  for (int64_t off = 0; off < g.numel(); off += kChunk)
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, g.data() + off, int(std::min(kChunk, g.numel() - off)), MPI_FLOAT,
                            MPI_SUM, comm_.world()));
}

void GradSync::finish() {
  CHECK(active_, "gradient sync: finish() without begin_step()");
  active_ = false;
  Tensor& g = store_.grads();
  const double t = MPI_Wtime();
  const bool plain = options_.algo == AllreduceAlgo::Ring && options_.compression == GradCompression::None;
  if (options_.mode == SyncMode::Blocking && !gpu_ && plain)
    blocking_slab();
  else
    wait_buckets();
  stats_.wait_seconds += MPI_Wtime() - t;
  if (options_.average && comm_.size() > 1 && g.device() == Device::CUDA) {
    gpu::backend().scale(g.data(), 1.0f / float(comm_.size()), g.numel());
  } else if (options_.average && comm_.size() > 1) {
    const float scale = 1.0f / float(comm_.size());
    float* p = g.data();
    const int64_t n = g.numel();
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) p[i] *= scale;
  }
  stats_.steps += 1;
  if (!alone_) stats_.bytes += synced_floats_ * wire_bytes(options_.compression);
  stats_.step_seconds += MPI_Wtime() - step_start_;
}

}  // namespace mpicnn::dist
