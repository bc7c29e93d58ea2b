// Comm: MPI world setup, node split, launcher check and small collectives.
#include "dist/comm.h"

#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // OpenMPI: MPIX_Query_cuda_support
#endif

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/fault.h"
#include "core/gpu.h"
#include "dist/watchdog.h"

namespace mpicnn::dist {

std::string mpi_error_string(int code) {
  char buf[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(buf, size_t(len));
}

namespace {
int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return -1;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  return (end && *end == 0 && x > 0 && x < INT_MAX) ? int(x) : -1;
}
}  // namespace

LauncherSizes launcher_sizes_from_environment() {
  LauncherSizes s;
  s.ompi = env_int("OMPI_COMM_WORLD_SIZE");
  s.pmi = env_int("PMI_SIZE");
  // SLURM_NTASKS is the allocation's in a batch script, and ranks that mpiexec starts there
  // inherit it (mpiexec -n 1 in a 2-task job is fine): it counts only when srun itself started
  // the ranks, inside a step (SLURM_STEP_ID or SLURM_PROCID) and with no MPI launcher's size.
  if (s.ompi < 0 && s.pmi < 0 && (std::getenv("SLURM_STEP_ID") || std::getenv("SLURM_PROCID")))
    s.slurm = env_int("SLURM_NTASKS");
  return s;
}

std::string launcher_mismatch(int world_size, const LauncherSizes& sizes) {
  const struct {
    const char* var;
    int value;
  } said[] = {{"OMPI_COMM_WORLD_SIZE", sizes.ompi}, {"SLURM_NTASKS", sizes.slurm}, {"PMI_SIZE", sizes.pmi}};
  for (const auto& s : said)
    if (s.value > 0 && s.value != world_size)
      return detail::concat("MPI sees ", world_size, " rank", world_size == 1 ? "" : "s",
                            " but the launcher started ", s.value, " (", s.var, "=", s.value,
                            "): the binary is probably linked against a different MPI than the "
                            "launcher's (each process runs alone); rebuild with the mpiexec/srun "
                            "of this MPI, or launch with the matching one");
  return "";
}

int threads_per_rank(int requested, int node_cpus, int ranks_on_node, int own_cpus) {
  if (requested > 0) return requested;
  return std::max(1, std::min(own_cpus, node_cpus / std::max(1, ranks_on_node)));
}

Comm::Comm(int* argc, char*** argv) {
  int initialised = 0;
  MPI_CHECK(MPI_Initialized(&initialised));
  if (!initialised) {
    // OpenMPI's non-blocking allreduce (libnbc) picks a slow algorithm for multi-MB buckets
    // (resnet18, 2 ranks: 72 ms vs 50 ms with ring, bare MPI_Allreduce 41 ms; bench/
    // allreduce_bench). Ring is bandwidth-optimal for gradient buckets. Other MPIs ignore the
    // variable; a value the user set wins.
    setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", /*overwrite=*/0);
    // Until MPI_ERRORS_RETURN is set, a failing MPI_Init_thread aborts inside MPI anyway.
    const int rc = MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &thread_level_);
    CHECK(rc == MPI_SUCCESS, "MPI_Init_thread failed: ", mpi_error_string(rc));
    owns_mpi_ = true;
  } else {
    MPI_CHECK(MPI_Query_thread(&thread_level_));
  }
  MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
  fault::set_rank(rank_);
  char name[MPI_MAX_PROCESSOR_NAME] = {0};
  int len = 0;
  MPI_CHECK(MPI_Get_processor_name(name, &len));
  host_.assign(name, size_t(len));

  const std::string mismatch = launcher_mismatch(size_, launcher_sizes_from_environment());
  if (!mismatch.empty()) fail_job(mismatch);

  MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node_));
  MPI_CHECK(MPI_Comm_set_errhandler(node_, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_rank(node_, &local_rank_));
  MPI_CHECK(MPI_Comm_size(node_, &local_size_));
  // Nodes = number of node leaders (local rank 0).
  int leader = local_rank_ == 0 ? 1 : 0;
  MPI_CHECK(MPI_Allreduce(&leader, &nodes_, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));

  // Usable CPUs: this rank's affinity mask, and the union of the node's masks (bytewise OR).
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof mask, &mask) != 0) {
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    for (long c = 0; c < std::min<long>(cores > 0 ? cores : 1, CPU_SETSIZE); ++c) CPU_SET(c, &mask);
  }
  own_cpus_ = std::max(1, CPU_COUNT(&mask));
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &mask, int(sizeof mask), MPI_BYTE, MPI_BOR, node_));
  node_cpus_ = std::max(1, CPU_COUNT(&mask));
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &mask)) node_cpu_ids_.push_back(c);
}

Comm::~Comm() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (node_ != MPI_COMM_NULL) MPI_Comm_free(&node_);  // no throwing from a destructor
  if (owns_mpi_) MPI_Finalize();
}

int Comm::threads_per_rank(int requested) const {
  return dist::threads_per_rank(requested, node_cpus_, local_size_, own_cpus_);
}

void Comm::fail_job(const std::string& message) const {
  std::fflush(stdout);
  std::fprintf(stderr, "rank %d (%s): %s\n", rank_, host_.c_str(), message.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);  // MPI_Abort does not return; this is for the compiler and broken MPIs
}

void Comm::barrier() const {
  WaitGuard wait("MPI_Barrier", nullptr);
  MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
}

namespace {
// Large byte broadcasts in chunks: MPI counts are int.
void bcast_bytes(uint8_t* data, uint64_t n) {
  constexpr uint64_t kChunk = uint64_t(1) << 30;
  WaitGuard wait("MPI_Bcast", "broadcast from rank 0");
  for (uint64_t off = 0; off < n; off += kChunk)
    MPI_CHECK(MPI_Bcast(data + off, int(std::min(kChunk, n - off)), MPI_BYTE, 0, MPI_COMM_WORLD));
}
}  // namespace

void Comm::broadcast(std::vector<uint8_t>& bytes) const {
  WaitGuard wait("MPI_Bcast", "broadcast from rank 0");
  uint64_t n = bytes.size();
  MPI_CHECK(MPI_Bcast(&n, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD));
  if (rank_ != 0) bytes.resize(n);
  bcast_bytes(bytes.data(), n);
}

SharedError::SharedError(const std::string& message) : Error(message, nullptr, __FILE__, __LINE__) {}

namespace {
// fn's error message, or "" when it returned normally.
std::string run_caught(const std::function<void()>& fn, int rank) {
  try {
    fn();
    return {};
  } catch (const Error& e) {
    if (!e.message().empty()) return e.message();
  } catch (const std::exception& e) {
    if (*e.what()) return e.what();
  }
  return "rank " + std::to_string(rank) + " failed without a message";
}
}  // namespace

void Comm::on_root(const std::function<void()>& fn) const {
  std::string error;
  if (root()) error = run_caught(fn, rank_);
  broadcast(error);
  if (!error.empty()) throw SharedError(error);
}

void Comm::on_all(const std::function<void()>& fn) const {
  const std::string mine = run_caught(fn, rank_);
  WaitGuard wait("MPI_Allreduce", "agreeing on errors");
  int first = mine.empty() ? size_ : rank_;
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  if (first == size_) return;
  uint64_t n = mine.size();
  MPI_CHECK(MPI_Bcast(&n, 1, MPI_UINT64_T, first, MPI_COMM_WORLD));
  std::string error = mine;
  error.resize(n);
  MPI_CHECK(MPI_Bcast(error.data(), int(n), MPI_CHAR, first, MPI_COMM_WORLD));
  throw SharedError(error);
}

void Comm::broadcast(std::string& s) const {
  WaitGuard wait("MPI_Bcast", "broadcast from rank 0");
  uint64_t n = s.size();
  MPI_CHECK(MPI_Bcast(&n, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD));
  if (rank_ != 0) s.resize(n);
  bcast_bytes(reinterpret_cast<uint8_t*>(s.data()), n);
}

void Comm::broadcast(Tensor& t) const {
  // Sizes are agreed first, so a mismatch throws on every rank instead of corrupting memory.
  WaitGuard wait("MPI_Bcast", "tensor broadcast from rank 0");
  int64_t root_n = t.numel();
  MPI_CHECK(MPI_Bcast(&root_n, 1, MPI_INT64_T, 0, MPI_COMM_WORLD));
  const int64_t mine = t.numel();
  int ok = mine == root_n ? 1 : 0, ok_all = 0;
  MPI_CHECK(MPI_Allreduce(&ok, &ok_all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  CHECK(ok_all == 1, "broadcast: tensor sizes differ between ranks (rank 0 has ", root_n,
        ", rank ", rank_, " has ", mine, ok ? "; another rank differs)" : ")");
  if (t.device() == Device::CUDA && !mpi_cuda_aware()) {  // through a host copy
    Tensor host = to_host(t);
    bcast_bytes(reinterpret_cast<uint8_t*>(host.data()), uint64_t(mine) * sizeof(float));
    t.copy_from(host);
    return;
  }
  if (t.device() == Device::CUDA) gpu::backend().synchronize();  // MPI reads device memory
  bcast_bytes(reinterpret_cast<uint8_t*>(t.data()), uint64_t(mine) * sizeof(float));
}

bool mpi_cuda_aware() {
  static const bool aware = [] {
    if (const char* env = std::getenv("MPICNN_CUDA_AWARE"); env && *env) return std::strcmp(env, "0") != 0;
#if defined(OMPI_HAVE_MPI_EXT_CUDA) && OMPI_HAVE_MPI_EXT_CUDA
    return MPIX_Query_cuda_support() == 1;  // the library's runtime answer, not the build's
#else
    return false;
#endif
  }();
  return aware;
}

void Comm::allreduce_in_place(void* data, size_t count, MPI_Datatype type, MPI_Op op) const {
  CHECK(count < size_t(INT_MAX), "allreduce: too many values (", count, ")");
  WaitGuard wait("MPI_Allreduce", nullptr);
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data, int(count), type, op, MPI_COMM_WORLD));
}

void Comm::broadcast_raw(void* data, size_t bytes) const {
  bcast_bytes(static_cast<uint8_t*>(data), bytes);
}

bool Comm::all(bool mine) const { return allreduce_min(int(mine)) == 1; }

int Comm::node_sum(int x) const {
  WaitGuard wait("MPI_Allreduce", "a sum over the node's ranks");
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_INT, MPI_SUM, node_));
  return x;
}

bool Comm::agree(const std::string& s) const {
  std::string root_value = s;
  broadcast(root_value);
  return all(root_value == s);
}

std::vector<uint64_t> Comm::allgather(uint64_t x) const {
  std::vector<uint64_t> all(size_t(size_), 0);
  WaitGuard wait("MPI_Allgather", nullptr);
  MPI_CHECK(MPI_Allgather(&x, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD));
  return all;
}

std::vector<std::string> Comm::allgather(const std::string& s) const {
  CHECK(s.size() < size_t(INT_MAX), "allgather: string too long (", s.size(), " bytes)");
  std::vector<int> sizes(size_t(size_), 0), offsets(size_t(size_), 0);
  WaitGuard wait("MPI_Allgather", "strings");
  const int mine = int(s.size());
  MPI_CHECK(MPI_Allgather(&mine, 1, MPI_INT, sizes.data(), 1, MPI_INT, MPI_COMM_WORLD));
  int64_t total = 0;
  for (int r = 0; r < size_; ++r) {
    CHECK(total + sizes[size_t(r)] < INT_MAX, "allgather: strings too long together");
    offsets[size_t(r)] = int(total);
    total += sizes[size_t(r)];
  }
  std::string joined(size_t(total), '\0');
  MPI_CHECK(MPI_Allgatherv(s.data(), mine, MPI_CHAR, joined.data(), sizes.data(), offsets.data(),
                           MPI_CHAR, MPI_COMM_WORLD));
  std::vector<std::string> strings;
  for (int r = 0; r < size_; ++r)
    strings.push_back(joined.substr(size_t(offsets[size_t(r)]), size_t(sizes[size_t(r)])));
  return strings;
}

uint64_t hash_floats(const float* data, int64_t n) {
  // FNV-1a over 64-bit words (two floats at a time): one multiply per 8 bytes.
  uint64_t h = 0xcbf29ce484222325ull;
  const int64_t pairs = n / 2;
  for (int64_t i = 0; i < pairs; ++i) {
    uint64_t w;
    std::memcpy(&w, data + 2 * i, 8);
    h = (h ^ w) * 0x100000001b3ull;
  }
  if (n % 2) {
    uint32_t w;
    std::memcpy(&w, data + n - 1, 4);
    h = (h ^ w) * 0x100000001b3ull;
  }
  return (h ^ uint64_t(n)) * 0x100000001b3ull;
}

std::vector<int> Comm::ranks_out_of_sync(const Tensor& values) const {
  const Tensor host = to_host(values);
  const std::vector<uint64_t> all = allgather(hash_floats(host.data(), host.numel()));
  std::vector<int> differ;
  for (int r = 1; r < size_; ++r)
    if (all[size_t(r)] != all[0]) differ.push_back(r);
  return differ;
}

}  // namespace mpicnn::dist
