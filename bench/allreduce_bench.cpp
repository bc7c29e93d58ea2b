// Gradient sync cost: GradSync (buckets advanced by the progress thread or by hooks, and the
// blocking whole slab) on a real model's gradient slab vs a bare MPI_Allreduce of the same
// bytes, same run, median of N. The overlapped modes are driven by reporting every entry ready
// in reverse slab order with no compute between, so this measures the bucketing and hand-over
// overhead; a second part times whole training steps (forward, backward, sync) with each mode,
// which shows the overlap gain.
// Usage: mpiexec -n K allreduce_bench [model=resnet18] [reps=20] [bucket_mb=0 (auto)]
//        [batch=16] [size=64] [step_reps=5]   (batch 0 skips the step timing)
// GPU: mpiexec -n K allreduce_bench nccl [max_mb=256] [reps=20]: bus bandwidth of NCCL (the
// path of ./train --gpu-allreduce nccl) against the host-staged MPI path, 1 MiB .. max_mb MiB,
// one rank per GPU (nccl_bench below). Needs the CUDA build with NCCL.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/gpu.h"
#include "core/rng.h"
#include "core/threads.h"
#include "dist/grad_sync.h"
#include "layers/softmax_xent.h"
#include "models/registry.h"

using namespace mpicnn;

namespace {
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// nccl-tests' allreduce bus bandwidth: algbw = bytes / time, busbw = algbw * 2 (n - 1) / n, what
// each rank's busiest link carries in a ring (0 at one rank: nothing crosses a link).
double bus_factor(int ranks) { return 2.0 * (ranks - 1) / ranks; }

// One allreduce of 1 MiB .. max_mb MiB of floats in device memory (doubling), median of reps
// after two warm-ups: through NCCL, as ./train queues a bucket (dist::DeviceBuckets with one
// bucket: ready event, allreduce on NCCL's stream, the host polling until done), and through
// the host-staged MPI path (device -> pinned host, MPI_Allreduce, host -> device, as GradSync
// stages a GPU slab without NCCL or a CUDA-aware MPI, here without overlap).
void nccl_bench(const dist::Comm& comm, int max_mb, int reps) {
  const ExecConfig exec =
      make_exec_config({.device = "cuda", .precision = "fp32"}, comm.local_rank());
  gpu::Backend& g = gpu::backend();
  const int64_t max_floats = int64_t(max_mb) << 18;  // MiB / 4 bytes
  auto buf = g.alloc(size_t(max_floats) * sizeof(float));
  auto host = g.alloc_pinned(size_t(max_floats) * sizeof(float));
  float* d = static_cast<float*>(buf.get());
  float* h = static_cast<float*>(host.get());
  auto coll = dist::open_nccl(comm, dist::GradCompression::None, max_floats);
  const int K = comm.size();
  if (comm.root())
    std::printf(
        "allreduce_bench nccl: %d ranks on %d node(s), %s, median of %d; GB/s = 1e9 bytes/s, "
        "busbw = algbw * 2(n-1)/n\n%10s %10s %10s %10s %12s %10s %10s\n",
        K, comm.nodes(), describe_device(exec).c_str(), reps, "MiB", "nccl ms", "algbw", "busbw",
        "staged ms", "algbw", "busbw");
  for (int64_t n = int64_t(1) << 18; n <= max_floats; n *= 2) {
    const double bytes = double(n) * sizeof(float);
    dist::DeviceBuckets one(*coll, d, {{0, n}});
    std::vector<double> t_nccl, t_staged;
    for (int r = 0; r < reps + 2; ++r) {
      g.fill(Elem::F32, d, 1e-3f, n);  // sums stay small whatever the rank count and repetitions
      g.synchronize();
      comm.barrier();
      double t = MPI_Wtime();
      one.begin_step();
      one.finish();
      const double a = MPI_Wtime() - t;
      comm.barrier();
      t = MPI_Wtime();
      g.copy(h, false, d, true, size_t(bytes));
      MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, h, int(n), MPI_FLOAT, MPI_SUM, comm.world()));
      g.copy(d, true, h, false, size_t(bytes));
      const double b = MPI_Wtime() - t;
      if (r >= 2) t_nccl.push_back(a), t_staged.push_back(b);
    }
    if (comm.root()) {
      const double a = median(t_nccl), b = median(t_staged);
      std::printf("%10.0f %10.3f %10.2f %10.2f %12.3f %10.2f %10.2f\n", bytes / (1 << 20), a * 1e3, bytes / a / 1e9,
                  bytes / a / 1e9 * bus_factor(K), b * 1e3, bytes / b / 1e9, bytes / b / 1e9 * bus_factor(K));
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  dist::Comm comm(&argc, &argv);
  try {
    if (argc > 1 && std::string(argv[1]) == "nccl") {
      const int max_mb = argc > 2 ? std::atoi(argv[2]) : 256;
      const int reps = argc > 3 ? std::atoi(argv[3]) : 20;
      CHECK(max_mb >= 1 && max_mb <= 4096 && reps >= 1, "allreduce_bench nccl: max_mb in [1, 4096], reps >= 1");
      nccl_bench(comm, max_mb, reps);
      return 0;
    }
    const std::string name = argc > 1 ? argv[1] : "resnet18";
    const int reps = argc > 2 ? std::atoi(argv[2]) : 20;
    const double bucket_mb = argc > 3 ? std::atof(argv[3]) : 0.0;
    const int batch = argc > 4 ? std::atoi(argv[4]) : 16;
    const int size = argc > 5 ? std::atoi(argv[5]) : 64;
    const int step_reps = argc > 6 ? std::atoi(argv[6]) : 5;
    set_num_threads(comm.threads_per_rank(0));
    CHECK(reps >= 1, "reps must be >= 1");
    auto model = build_model(name, {}, 0);
    ParamStore& store = model->params();
    Tensor& g = store.grads();
    const int64_t n = g.numel();
    Tensor bare = Tensor::zeros({n});  // (n) a separate buffer of the same bytes
    auto fill = [&](Tensor& t) {
      for (int64_t i = 0; i < n; ++i) t.data()[i] = float((i + comm.rank()) % 97) * 1e-3f;
    };
    fill(g), fill(bare);
    // Entry starts in reverse slab order: what backward would report.
    std::vector<int64_t> ready;
    for (const StateEntry& e : store.entries())
      if (e.kind == StateKind::Param) ready.push_back(e.offset);
    std::reverse(ready.begin(), ready.end());

    const int64_t bucket_bytes = bucket_mb > 0 ? int64_t(bucket_mb * (1 << 20)) : dist::auto_bucket_bytes(store);
    // Sum only, as ./train runs it: the 1/K is folded into the loss gradient by the caller.
    dist::GradSync threaded(comm, store, {.bucket_bytes = bucket_bytes, .mode = dist::SyncMode::Thread, .average = false});
    dist::GradSync hooked(comm, store, {.bucket_bytes = bucket_bytes, .mode = dist::SyncMode::Hooks, .average = false});
    dist::GradSync blocking(comm, store, {.mode = dist::SyncMode::Blocking, .average = false});
    std::vector<double> t_bare, t_thread, t_blocking, t_hooks;
    for (int r = 0; r < reps + 2; ++r) {  // the first two are warm-up
      comm.barrier();
      double t = MPI_Wtime();
      MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, bare.data(), int(n), MPI_FLOAT, MPI_SUM, comm.world()));
      const double a = MPI_Wtime() - t;
      comm.barrier();
      t = MPI_Wtime();
      threaded.begin_step();
      for (int64_t off : ready) threaded.on_ready(off);
      threaded.finish();
      const double b = MPI_Wtime() - t;
      comm.barrier();
      t = MPI_Wtime();
      blocking.begin_step();
      blocking.finish();
      const double c = MPI_Wtime() - t;
      comm.barrier();
      t = MPI_Wtime();
      hooked.begin_step();
      for (int64_t off : ready) hooked.on_ready(off);
      hooked.finish();
      const double d = MPI_Wtime() - t;
      if (r >= 2) t_bare.push_back(a), t_thread.push_back(b), t_blocking.push_back(c), t_hooks.push_back(d);
      fill(g), fill(bare);  // keep values bounded
    }
    if (comm.root()) {
      const double mb = double(n) * 4 / (1 << 20);
      const double base = median(t_bare);
      std::printf("allreduce_bench: %s, %lld floats (%.1f MiB), %d ranks on %d node(s), %zu buckets of >= %.2f MiB, median of %d\n",
                  name.c_str(), (long long)n, mb, comm.size(), comm.nodes(), threaded.buckets().size(),
                  double(bucket_bytes) / (1 << 20), reps);
      std::printf("  bare MPI_Allreduce      %8.2f ms  (%.2f GB/s payload)\n", base * 1e3, mb / 1024 / base);
      std::printf("  GradSync thread         %8.2f ms  ratio %.3f\n", median(t_thread) * 1e3, median(t_thread) / base);
      std::printf("  GradSync hooks          %8.2f ms  ratio %.3f\n", median(t_hooks) * 1e3, median(t_hooks) / base);
      std::printf("  GradSync blocking slab  %8.2f ms  ratio %.3f\n", median(t_blocking) * 1e3, median(t_blocking) / base);
    }
    if (batch > 0) {
      // Whole steps: the 1/K is folded into the loss gradient in both modes, so the
      // difference is the overlap alone.
      const int K = comm.size();
      model->plan({batch, 3, size, size}, exec_overrides(ExecConfig{}));
      Tensor x = Tensor::empty({batch, 3, size, size});  // (N, C, H, W)
      Rng rng(7, uint64_t(comm.rank()));
      for (int64_t i = 0; i < x.numel(); ++i) x.data()[i] = rng.uniform(uint64_t(i), -1.f, 1.f);
      std::vector<int32_t> labels(static_cast<size_t>(batch));
      for (int i = 0; i < batch; ++i) labels[size_t(i)] = (i * 37 + comm.rank()) % 1000;
      SoftmaxCrossEntropy loss;
      loss.plan(batch, 1000);
      Tensor dlogits = Tensor::empty({batch, 1000});  // (N, classes)
      auto time_steps = [&](dist::GradSync& sync, bool hook) {
        if (hook) sync.attach(*model); else model->set_grad_ready({});
        std::vector<double> ts;
        sync.reset_stats();
        for (int r = 0; r < step_reps + 1; ++r) {
          comm.barrier();
          const double t = MPI_Wtime();
          store.zero_grad();
          sync.begin_step();
          loss.forward(model->forward(x), labels.data());
          loss.backward(dlogits, labels.data(), 1.0f / float(K));
          model->backward(dlogits);
          sync.finish();
          if (r > 0) ts.push_back(MPI_Wtime() - t);
          if (r == 0) sync.reset_stats();
        }
        return std::pair<double, double>(median(ts), sync.stats().wait_share());
      };
      const auto [tb, wb] = time_steps(blocking, false);
      const auto [th, wh] = time_steps(hooked, true);
      const auto [tt, wt] = time_steps(threaded, true);
      if (comm.root())
        std::printf("  training step, batch %d per rank at %dx%d, %d threads per rank, median of %d:\n"
                    "    blocking sync %8.1f ms (waiting %.1f%%)   hooks %8.1f ms (waiting %.1f%%)   thread %8.1f ms (waiting %.1f%%)\n",
                    batch, size, size, comm.threads_per_rank(0), step_reps, tb * 1e3, wb * 100, th * 1e3, wh * 100,
                    tt * 1e3, wt * 100);
    }
  } catch (const Error& e) {
    comm.fail_job(e.message());
  }
  return 0;
}
