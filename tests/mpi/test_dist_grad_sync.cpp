// MPI tests of gradient averaging: bucket layout, the model's gradient-ready hook (every
// reported offset is truly final, in every model family), and GradSync's average against one
// computed directly from every rank's gradients, overlapped and blocking, for several bucket
// sizes, on models with BatchNorm; on a GPU, the MPI path and NCCL's.
#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/device.h"
#include "core/threads.h"
#include "dist/compress.h"
#include "dist/grad_sync.h"
#include "dist/nccl_backend.h"
#include "layers/softmax_xent.h"
#include "models/registry.h"
#include "testing.h"

using namespace mpicnn;

namespace {
dist::Comm& comm() {
  static dist::Comm c(nullptr, nullptr);
  // The rule the trainer uses: oversubscribed ranks (3 on 2 cores) get one thread each, so
  // OpenMP pools do not spin against each other.
  static const bool threads_set = (set_num_threads(c.threads_per_rank(0)), true);
  (void)threads_set;
  return c;
}

struct Net {
  std::unique_ptr<Model> model;
  Tensor x;                     // (N, C, H, W)
  std::vector<int32_t> labels;  // (N)
  std::unique_ptr<SoftmaxCrossEntropy> loss = std::make_unique<SoftmaxCrossEntropy>();
  Tensor dlogits;               // (N, classes)
};

// The cuda tests' config, made by cuda_unavailable() once the GPU is selected.
ExecConfig& gpu_exec() {
  static ExecConfig c;
  return c;
}

Net make_net(const std::string& name, int64_t batch, int size, int classes, uint64_t data_seed,
             Device device = Device::CPU) {
  Net n;
  n.model = build_model(name, {.num_classes = classes, .in_channels = 3, .dropout = 0.f}, 11);
  n.model->to(device);
  const Shape in{batch, 3, size, size};
  n.model->plan(in, device == Device::CUDA ? gpu_exec() : testing::exec());
  n.x = Tensor::empty(in, device);
  n.x.copy_from(testing::random_tensor(in, data_seed));
  for (int64_t i = 0; i < batch; ++i) n.labels.push_back(int32_t((data_seed * 7 + uint64_t(i)) % uint64_t(classes)));
  n.dlogits = Tensor::empty({batch, classes}, device);
  n.loss->plan(batch, classes, device);
  return n;
}

// zero_grad, forward, loss, backward: gradients '=' this rank's batch gradient.
void step(Net& n) {
  n.model->params().zero_grad();
  const Tensor& logits = n.model->forward(n.x);
  n.loss->forward(logits, n.labels.data());
  n.loss->backward(n.dlogits, n.labels.data());
  n.model->backward(n.dlogits);
}

// The direct average of every rank's `local` gradients, summed in double, with the mean of
// their magnitudes (the scale of a float sum's rounding); ranks_differ: some rank's gradients
// are not rank 0's.
struct DirectAverage {
  std::vector<double> want, mag;
  bool ranks_differ = false;
};
DirectAverage direct_average(const std::vector<float>& local, int K) {
  const size_t len = local.size();
  std::vector<float> all(len * size_t(K));
  MPI_Allgather(local.data(), int(len), MPI_FLOAT, all.data(), int(len), MPI_FLOAT, MPI_COMM_WORLD);
  DirectAverage d{std::vector<double>(len, 0.0), std::vector<double>(len, 0.0)};
  for (int q = 0; q < K; ++q)
    for (size_t i = 0; i < len; ++i) {
      d.want[i] += all[size_t(q) * len + i] / double(K);
      d.mag[i] += std::fabs(all[size_t(q) * len + i]) / double(K);
    }
  for (size_t i = 0; i < len && K > 1; ++i) d.ranks_differ |= all[i] != all[len + i];
  return d;
}

std::vector<float> copy_of(const Tensor& t) {
  const Tensor h = to_host(t);
  return std::vector<float>(h.data(), h.data() + h.numel());
}

// Why the cuda tests cannot run on this rank ("" when they can: the same answer on every rank of
// a node). The GPU is selected once per process, as the trainer does: node-local rank modulo the
// GPUs, deterministic cuDNN (the same batch gives the same gradients in every run).
const std::string& cuda_unavailable() {
  static const std::string why = [] {
    std::string w = gpu::unavailable_reason();
    if (w.empty())
      gpu_exec() = make_exec_config({.device = "cuda", .precision = "fp32", .deterministic = true},
                                    comm().local_rank());
    return w;
  }();
  return why;
}

bool skip_cuda(const char* test, const std::string& why) {
  if (why.empty()) return false;
  if (comm().rank() == 0) std::printf("SKIP: %s: %s\n", test, why.c_str());
  std::fflush(stdout);
  return true;
}
}  // namespace

TEST_CASE("dist grad sync: buckets cover the slab in reverse, whole entries") {
  auto m = build_model("resnet20", {.num_classes = 10, .in_channels = 3}, 1);
  ParamStore& store = m->params();
  int params = 0;
  for (const StateEntry& e : store.entries()) params += e.kind == StateKind::Param;
  for (int64_t bytes : {int64_t(1), int64_t(64) << 10, int64_t(25) << 20, int64_t(1) << 40}) {
    CAPTURE(bytes);
    const std::vector<dist::Bucket> b = dist::make_buckets(store, bytes);
    REQUIRE(!b.empty());
    CHECK(b.front().end == store.grads().numel());
    CHECK(b.back().begin == 0);
    for (size_t i = 0; i + 1 < b.size(); ++i) {
      CHECK(b[i + 1].end == b[i].begin);  // contiguous, descending
      // Boundaries at entry starts; every bucket but the last holds at least `bytes`.
      CHECK(store.entries()[size_t(b[i].first_entry)].offset == b[i].begin);
      CHECK((b[i].end - b[i].begin) * 4 >= std::min<int64_t>(bytes, 4));
      if (bytes > 4) CHECK((b[i].end - b[i].begin) * 4 >= bytes);
    }
    if (bytes == 1) CHECK(int(b.size()) == params);
    if (bytes == int64_t(1) << 40) CHECK(b.size() == 1);
  }
}

TEST_CASE("dist grad sync: the gradient-ready hook reports only final gradients") {
  // Model-local, no collectives: every model family (Sequential, residual blocks with
  // downsample, Fire, dense blocks), spread over the ranks to save time.
  const int K = comm().size(), me = comm().rank();
  int index = 0;
  const std::pair<const char*, int> models[] = {{"lenet", 28},        {"resnet20", 8},
                                               {"resnet18", 33},     {"resnet50", 33},
                                               {"squeezenet1_1", 17}, {"densenet121", 61}};
  // VGG and AlexNet are plain Sequentials (covered by lenet) with 60-140M parameters: skipped.
  for (auto [name, size] : models) {
    if (index++ % K != me) continue;
    CAPTURE(name);
    Net n = make_net(name, 2, size, 10, 3);
    step(n);
    const std::vector<float> plain = copy_of(n.model->params().grads());
    // Hook: hash the gradients at and above each reported offset; after backward, they must
    // be unchanged (final when reported).
    Tensor& g = n.model->params().grads();
    std::vector<std::pair<int64_t, uint64_t>> reports;
    n.model->set_grad_ready([&](int64_t off) {
      reports.push_back({off, dist::hash_floats(g.data() + off, g.numel() - off)});
    });
    step(n);
    n.model->set_grad_ready({});
    REQUIRE(!reports.empty());
    CHECK(reports.back().first == 0);
    int distinct = 0;
    for (size_t i = 0; i < reports.size(); ++i) {
      const auto [off, h] = reports[i];
      CHECK(off >= 0);
      CHECK(off < g.numel());
      if (i > 0) CHECK(off <= reports[i - 1].first);  // non-increasing
      if (i == 0 || off != reports[i - 1].first) ++distinct;
      CHECK(h == dist::hash_floats(g.data() + off, g.numel() - off));
    }
    CHECK(distinct >= 3);  // enough granularity to overlap
    // The hook does not change the gradients.
    CHECK(std::memcmp(plain.data(), g.data(), plain.size() * 4) == 0);
  }
}

TEST_CASE("dist grad sync: average over ranks, overlapped and blocking") {
  const dist::Comm& c = comm();
  const int K = c.size(), r = c.rank();
  for (const char* name : {"resnet20", "lenet"}) {
    CAPTURE(name);
    const int size = std::string(name) == "lenet" ? 28 : 16;
    Net n = make_net(name, 3, size, 10, 100 + uint64_t(r));  // rank-dependent data
    ParamStore& store = n.model->params();
    step(n);
    const std::vector<float> local = copy_of(store.grads());
    const int64_t len = int64_t(local.size());

    const DirectAverage direct = direct_average(local, K);
    const std::vector<double>&want = direct.want, &mag = direct.mag;
    CHECK(direct.ranks_differ == (K > 1));  // the data is rank-dependent, so the gradients must be

    auto check_average = [&](const Tensor& got, const char* what, double elem_tol = 1e-6,
                              double norm_tol = 1e-6) {
      CAPTURE(what);
      int64_t bad = 0;
      double err2 = 0, ref2 = 0;
      for (int64_t i = 0; i < len; ++i) {
        const double d = got.data()[i] - want[size_t(i)];
        err2 += d * d, ref2 += want[size_t(i)] * want[size_t(i)];
        // float sums of K values: error within a few ulps of the summands' magnitude
        if (std::fabs(d) > elem_tol * mag[size_t(i)] + 1e-30) ++bad;
      }
      CAPTURE(bad);
      CAPTURE(std::sqrt(err2) / std::sqrt(ref2));
      CHECK(bad == 0);
      CHECK(std::sqrt(err2) <= norm_tol * std::sqrt(ref2));
    };

    // Blocking whole-slab allreduce: the reference for the overlapped runs.
    dist::GradSync blocking(c, store, {.mode = dist::SyncMode::Blocking});
    blocking.begin_step();
    step(n);
    blocking.finish();
    const std::vector<float> blocked = copy_of(store.grads());
    check_average(store.grads(), "blocking");
    CHECK(blocking.stats().steps == 1);
    CHECK(blocking.stats().bytes == len * 4);

    for (const dist::SyncMode mode : {dist::SyncMode::Thread, dist::SyncMode::Hooks})
    for (int64_t bytes : {int64_t(1), int64_t(16) << 10, int64_t(25) << 20, int64_t(1) << 40}) {
      CAPTURE(bytes);
      CAPTURE(dist::to_string(mode));
      dist::GradSync sync(c, store, {.bucket_bytes = bytes, .mode = mode});
      // The progress thread runs where MPI allows it (mpi_main asks for SERIALIZED).
      CHECK(sync.options().mode == (K > 1 ? mode : dist::SyncMode::Hooks));
      sync.attach(*n.model);
      size_t started_before_end = 0;  // buckets in flight before backward's last report
      n.model->set_grad_ready([&](int64_t off) {
        if (off > 0) started_before_end = sync.buckets_started();
        sync.on_ready(off);
        if (off > 0) started_before_end = sync.buckets_started();
      });
      for (int rep = 0; rep < 2; ++rep) {
        sync.begin_step();
        step(n);
        CHECK(sync.buckets_started() == sync.buckets().size());  // the final report starts all
        sync.finish();
      }
      n.model->set_grad_ready({});
      check_average(store.grads(), "overlap");
      // Same sums as the whole-slab allreduce: exact for K <= 2 (a + b is commutative); for
      // K >= 3 MPI may associate the sums differently per message size, so only close.
      const bool identical = std::memcmp(blocked.data(), store.grads().data(), size_t(len) * 4) == 0;
      if (K <= 2) CHECK(identical);
      if (!identical) MESSAGE("overlapped != blocking bitwise at K=", K, ", bucket ", bytes);
      if (sync.buckets().size() > 1) CHECK(started_before_end >= 1);  // real overlap
      CHECK(sync.stats().steps == 2);
      CHECK(sync.stats().wait_share() >= 0.0);
      CHECK(sync.stats().wait_share() <= 1.0);
    }
    {
      // 1/K folded into the loss gradient: the synced sum is the average.
      dist::GradSync sync(c, store, {.average = false});
      sync.attach(*n.model);
      sync.begin_step();
      store.zero_grad();
      const Tensor& logits = n.model->forward(n.x);
      n.loss->forward(logits, n.labels.data());
      n.loss->backward(n.dlogits, n.labels.data(), 1.0f / float(K));
      n.model->backward(n.dlogits);
      sync.finish();
      n.model->set_grad_ready({});
      // The backward itself ran on values scaled by 1/K: for K not a power of two its rounding
      // differs from the unscaled backward's in every layer, and a few gradients that are sums
      // with heavy cancellation (measured: 13 of 270k at K=3) move by more than 1e-6 of their
      // magnitude; the whole slab stays within 1e-6 (measured 6.4e-7, bound 2e-6). A missing
      // or doubled 1/K is still a factor K off.
      const bool pow2 = (K & (K - 1)) == 0;
      check_average(store.grads(), "prescaled", pow2 ? 1e-6 : 1e-3, pow2 ? 1e-6 : 2e-6);
      if ((K & (K - 1)) == 0) CHECK(std::memcmp(blocked.data(), store.grads().data(), size_t(len) * 4) == 0);
    }
    // Padding between entries is still zero.
    const auto& es = store.entries();
    for (size_t e = 0; e + 1 < es.size(); ++e) {
      if (es[e].kind != StateKind::Param) continue;
      size_t nx = e + 1;
      while (nx < es.size() && es[nx].kind != StateKind::Param) ++nx;
      const int64_t end = nx < es.size() ? es[nx].offset : store.grads().numel();
      for (int64_t i = es[e].offset + es[e].shape.numel(); i < end; ++i)
        CHECK(store.grads().data()[i] == 0.f);
    }
  }
}

TEST_SUITE("cuda") {
TEST_CASE("cuda dist grad sync: a GPU model's gradients averaged over ranks, overlapped and blocking") {
  const dist::Comm& c = comm();
  if (skip_cuda("cuda dist grad sync", cuda_unavailable())) return;
  const int K = c.size(), r = c.rank();
  Net n = make_net("resnet20", 4, 16, 10, 300 + uint64_t(r), Device::CUDA);
  ParamStore& store = n.model->params();
  REQUIRE(store.grads().device() == Device::CUDA);
  step(n);
  const std::vector<float> local = copy_of(store.grads());
  const int64_t len = int64_t(local.size());
  const DirectAverage direct = direct_average(local, K);
  const std::vector<double>&want = direct.want, &mag = direct.mag;
  CHECK(direct.ranks_differ == (K > 1));
  auto bad_elements = [&](const std::vector<float>& got) {
    int64_t bad = 0;
    for (int64_t i = 0; i < len; ++i)
      bad += std::fabs(got[size_t(i)] - want[size_t(i)]) > 1e-6 * mag[size_t(i)] + 1e-30;
    return bad;
  };
  MESSAGE("gradient sync path: ", dist::mpi_cuda_aware() ? "CUDA-aware MPI, device memory" : "pinned host mirror");

  dist::GradSync blocking(c, store, {.mode = dist::SyncMode::Blocking});
  blocking.begin_step();
  step(n);
  blocking.finish();
  const std::vector<float> blocked = copy_of(store.grads());
  CHECK(bad_elements(blocked) == 0);

  for (int64_t bytes : {int64_t(16) << 10, int64_t(25) << 20}) {  // many buckets, and one
    CAPTURE(bytes);
    dist::GradSync sync(c, store, {.bucket_bytes = bytes});
    sync.attach(*n.model);
    for (int rep = 0; rep < 2; ++rep) {  // slots and events are reused in the second step
      sync.begin_step();
      step(n);
      sync.finish();
    }
    n.model->set_grad_ready({});
    const std::vector<float> got = copy_of(store.grads());
    CHECK(bad_elements(got) == 0);
    if (K <= 2) CHECK(got == blocked);  // a + b: the same sums whatever the bucketing
  }
}

// --gpu-allreduce nccl: GradSync through NCCL, device to device, against the direct average, in
// fp32 and bf16, many buckets and one, two steps each (slots and events reused). At one rank the
// sum is the gradients themselves: fp32 bit for bit, bf16 exactly the CPU's bf16 rounding of them
// (the cast kernels). Needs a GPU per rank: ranks sharing one skip (NCCL refuses them).
TEST_CASE("cuda dist grad sync: NCCL sums GPU gradients device to device, fp32 and bf16") {
  const dist::Comm& c = comm();
  std::string why = cuda_unavailable();
  if (why.empty() && !dist::nccl::compiled_in()) why = dist::nccl::kNoNccl;
  if (why.empty()) {
    const std::string shared = dist::first_duplicate(c.allgather(gpu::backend().device_uuid()));
    if (!shared.empty()) why = "ranks share GPU " + shared + ", which NCCL refuses (one rank per GPU runs it)";
  }
  if (skip_cuda("cuda dist grad sync nccl", why)) return;
  const int K = c.size();
  Net n = make_net("resnet20", 4, 16, 10, 300 + uint64_t(c.rank()), Device::CUDA);
  ParamStore& store = n.model->params();
  step(n);
  const std::vector<float> local = copy_of(store.grads());
  const DirectAverage d = direct_average(local, K);
  std::vector<float> local_bf16 = local;  // (slab) one rank's bf16 sum: the rounding, and back
  std::vector<uint16_t> wire(local.size());
  dist::compress(dist::GradCompression::Bf16, local.data(), wire.data(), int64_t(local.size()));
  dist::decompress(dist::GradCompression::Bf16, wire.data(), local_bf16.data(), int64_t(local.size()));
  for (const dist::GradCompression comp : {dist::GradCompression::None, dist::GradCompression::Bf16}) {
    // bf16: a rounding of each gradient and of each partial sum, 2^-8 relative each.
    const double tol = comp == dist::GradCompression::None ? 1e-6 : 4e-3 * K;
    for (int64_t bytes : {int64_t(16) << 10, int64_t(25) << 20}) {
      CAPTURE(bytes);
      CAPTURE(dist::to_string(comp));
      dist::GradSync sync(c, store, {.bucket_bytes = bytes, .compression = comp, .nccl = true});
      CHECK(sync.options().mode == dist::SyncMode::Hooks);
      sync.attach(*n.model);
      for (int rep = 0; rep < 2; ++rep) {
        sync.begin_step();
        step(n);
        sync.finish();
      }
      n.model->set_grad_ready({});
      CHECK(sync.buckets_started() == sync.buckets().size());
      const std::vector<float> got = copy_of(store.grads());
      int64_t bad = 0;
      for (size_t i = 0; i < got.size(); ++i) bad += std::fabs(got[i] - d.want[i]) > tol * d.mag[i] + 1e-30;
      CHECK(bad == 0);
      if (K == 1) CHECK(got == (comp == dist::GradCompression::None ? local : local_bf16));
      const std::vector<uint64_t> hashes = c.allgather(dist::hash_floats(got.data(), int64_t(got.size())));
      for (uint64_t h : hashes) CHECK(h == hashes[0]);  // every rank the same bits
    }
  }
}
}  // TEST_SUITE

TEST_CASE("dist grad sync: frozen parameters are left out of the buckets and never summed") {
  const int K = comm().size();
  Net n = make_net("resnet20", 4, 8, 10, 100 + uint64_t(comm().rank()));
  n.model->freeze({"conv1", "bn1", "layer1", "layer2.0"});
  ParamStore& store = n.model->params();
  int64_t trainable_floats = 0;  // with each entry's padding up to the next one
  const auto& entries = store.entries();
  for (size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].kind != StateKind::Param || entries[i].frozen) continue;
    int64_t next = store.grads().numel();
    for (size_t j = i + 1; j < entries.size(); ++j)
      if (entries[j].kind == StateKind::Param) {
        next = entries[j].offset;
        break;
      }
    trainable_floats += next - entries[i].offset;
  }
  step(n);
  const DirectAverage d = direct_average(copy_of(store.grads()), K);
  for (const dist::SyncMode mode : {dist::SyncMode::Thread, dist::SyncMode::Hooks, dist::SyncMode::Blocking}) {
    for (int64_t bytes : {int64_t(1), int64_t(64) << 10, int64_t(1) << 40}) {
      CAPTURE(bytes);
      dist::GradSync sync(comm(), store, {.bucket_bytes = bytes, .mode = mode});
      for (const dist::Bucket& b : sync.buckets())
        for (int e = b.first_entry; e <= b.last_entry; ++e)
          CHECK(!(entries[size_t(e)].kind == StateKind::Param && entries[size_t(e)].frozen));
      sync.attach(*n.model);
      sync.begin_step();
      step(n);  // zero_grad inside, then backward with the hook
      sync.finish();
      CHECK(sync.stats().bytes == trainable_floats * 4);
      CHECK(sync.stats().bytes < store.grads().numel() * 4);
      const std::vector<float> got = copy_of(store.grads());
      for (const StateEntry& e : entries) {
        if (e.kind != StateKind::Param) continue;
        bool ok = true;
        for (int64_t i = e.offset; i < e.offset + e.shape.numel(); ++i)
          ok = ok && (e.frozen ? got[size_t(i)] == 0.f
                               : std::fabs(got[size_t(i)] - d.want[size_t(i)]) <= 1e-5 * (d.mag[size_t(i)] + 1e-6));
        CHECK_MESSAGE(ok, e.name);
      }
      n.model->set_grad_ready({});
    }
  }
}

// Hierarchical allreduce (node reduce, leader allreduce, node broadcast) and 16-bit compressed
// gradients against the directly computed average; every rank must end with the same bits.
TEST_CASE("dist grad sync: hierarchical and compressed sums") {
  const dist::Comm& c = comm();
  const int K = c.size();
  Net n = make_net("resnet20", 3, 16, 10, 200 + uint64_t(c.rank()));
  ParamStore& store = n.model->params();
  step(n);
  const std::vector<float> local = copy_of(store.grads());
  const DirectAverage d = direct_average(local, K);
  dist::GradSync ring(c, store, {.mode = dist::SyncMode::Blocking, .algo = dist::AllreduceAlgo::Ring});
  ring.begin_step();
  step(n);
  ring.finish();
  const std::vector<float> flat = copy_of(store.grads());
  // Auto picks ring on one node (every rank of this test shares it).
  CHECK(dist::GradSync(c, store, {}).options().algo == (c.nodes() > 1 && c.local_size() > 1
                                                            ? dist::AllreduceAlgo::Hierarchical
                                                            : dist::AllreduceAlgo::Ring));
  struct Case {
    dist::AllreduceAlgo algo;
    dist::GradCompression compression;
    double rel;  // per element, of the mean magnitude: the format's rounding, per partial sum
    double abs;  // fp16's smallest subnormal: smaller gradients flush
  };
  const double u16 = std::ldexp(1.0, -11), ubf = std::ldexp(1.0, -8), sub16 = std::ldexp(1.0, -24);
  for (const Case& k : {Case{dist::AllreduceAlgo::Hierarchical, dist::GradCompression::None, 1e-6, 1e-30},
                        Case{dist::AllreduceAlgo::Ring, dist::GradCompression::Fp16, (K + 1) * u16, K * sub16},
                        Case{dist::AllreduceAlgo::Ring, dist::GradCompression::Bf16, (K + 1) * ubf, 1e-30},
                        Case{dist::AllreduceAlgo::Hierarchical, dist::GradCompression::Bf16, (K + 1) * ubf, 1e-30}})
    for (const dist::SyncMode mode : {dist::SyncMode::Thread, dist::SyncMode::Hooks, dist::SyncMode::Blocking}) {
      CAPTURE(dist::to_string(k.algo));
      CAPTURE(dist::to_string(k.compression));
      CAPTURE(dist::to_string(mode));
      dist::GradSync sync(c, store, {.bucket_bytes = 64 << 10, .mode = mode, .algo = k.algo, .compression = k.compression});
      sync.attach(*n.model);
      sync.begin_step();
      step(n);
      sync.finish();
      n.model->set_grad_ready({});
      const std::vector<float> got = copy_of(store.grads());
      int64_t bad = 0;
      for (size_t i = 0; i < got.size(); ++i)
        bad += std::fabs(got[i] - d.want[i]) > k.rel * d.mag[i] + k.abs;
      CHECK(bad == 0);
      CHECK(sync.stats().bytes == int64_t(got.size()) * (k.compression == dist::GradCompression::None ? 4 : 2));
      // Replicas stay identical: rank 0's bits everywhere.
      CHECK(c.agree(dist::hash_floats(got.data(), int64_t(got.size()))));
      // a + b is exact whatever the order: at K <= 2 the hierarchical sum is the ring's.
      if (K <= 2 && k.compression == dist::GradCompression::None) CHECK(got == flat);
      if (k.compression != dist::GradCompression::None && K > 1) CHECK(got != flat);  // it did round
    }
}
