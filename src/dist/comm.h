// Comm: the job's MPI world (MPI_COMM_WORLD with MPI_ERRORS_RETURN, every call checked by
// MPI_CHECK), node-local rank and size, the launcher check, thread sizing and the collectives
// the trainer needs (broadcasts from rank 0, sums, minima and maxima, agreement checks,
// gathers, parameter checksums), so no code above src/dist calls MPI itself. Not the gradient
// sync (grad_sync.h) and not data sharding (shard.h).
#pragma once
#include <climits>
#include <mpi.h>

#include <array>
#include <concepts>
#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "core/check.h"
#include "core/tensor.h"

namespace mpicnn::dist {

// The MPI error string of an MPI return code ("MPI_ERR_COUNT: invalid count argument").
std::string mpi_error_string(int code);

}  // namespace mpicnn::dist

// MPI_CHECK(call): throws mpicnn::Error naming the call, file, line and MPI's error string
// when the call does not return MPI_SUCCESS (needs MPI_ERRORS_RETURN, which Comm sets).
#define MPI_CHECK(call)                                                                       \
  do {                                                                                        \
    const int mpi_check_rc_ = (call);                                                         \
    if (mpi_check_rc_ != MPI_SUCCESS)                                                         \
      throw ::mpicnn::Error(::mpicnn::detail::concat(#call, " failed: ",                      \
                                                     ::mpicnn::dist::mpi_error_string(mpi_check_rc_)), \
                            #call, __FILE__, __LINE__);                                       \
  } while (0)

namespace mpicnn::dist {

// An error that every rank raised together (see Comm::on_root): no rank is left inside a
// collective, so an app may report it once, from rank 0, and exit normally with a non-zero code.
class SharedError : public Error {
 public:
  explicit SharedError(const std::string& message);
};

// What the launcher says the job size is; -1 where it says nothing.
struct LauncherSizes {
  int ompi = -1;   // OMPI_COMM_WORLD_SIZE (OpenMPI's mpiexec)
  int slurm = -1;  // SLURM_NTASKS, only in an srun step (SLURM_STEP_ID or SLURM_PROCID) without ompi/pmi
  int pmi = -1;    // PMI_SIZE (MPICH/Hydra, Intel MPI, srun --mpi=pmi2)
};
LauncherSizes launcher_sizes_from_environment();
// Empty when world_size agrees with every size the launcher gave; else one line saying what
// disagrees and the likely cause (a binary built against another MPI starts as K singletons).
std::string launcher_mismatch(int world_size, const LauncherSizes& sizes);

// The numbers the reductions take, each an MPI datatype.
template <class T>
concept MpiNumber = std::same_as<T, int> || std::same_as<T, int64_t> ||
                    std::same_as<T, uint64_t> || std::same_as<T, double>;

// What a value reduces as, element by element: a number is itself, a std::array its element;
// a struct of numbers of one type says which (`using reduce_as = double;`) and must hold only
// members of that type (its bytes are then an array of them, which is how MPI reads it).
template <class T>
struct ReduceElement {
  using type = T;
};
template <class E, size_t N>
struct ReduceElement<std::array<E, N>> {
  using type = E;
};
template <class T>
  requires requires { typename T::reduce_as; }
struct ReduceElement<T> {
  using type = typename T::reduce_as;
};
template <class T>
concept Reducible = MpiNumber<typename ReduceElement<T>::type> && std::is_trivially_copyable_v<T> &&
                    sizeof(T) % sizeof(typename ReduceElement<T>::type) == 0 &&
                    alignof(T) == alignof(typename ReduceElement<T>::type);

// requested if > 0, else node_cpus / ranks_on_node, at most own_cpus, at least 1.
int threads_per_rank(int requested, int node_cpus, int ranks_on_node, int own_cpus = INT_MAX);

// Whether MPI can read and write GPU memory (CUDA-aware): MPICNN_CUDA_AWARE=0/1 decides when
// set, else OpenMPI's MPIX_Query_cuda_support(); false for other MPIs. Asked once.
bool mpi_cuda_aware();

class Comm {
 public:
  // Initialises MPI (MPI_Init_thread, SERIALIZED: the thread that made the Comm calls MPI,
  // except during backward, when GradSync's progress thread alone does (progress_thread.h);
  // OpenMP and loader threads never do) unless it already is (then adopts it and leaves the
  // finalize to whoever initialised it). Sets MPI_ERRORS_RETURN, splits the node communicator
  // and runs the launcher check (fail_job on a mismatch).
  Comm(int* argc, char*** argv);
  ~Comm();  // frees the node communicator; MPI_Finalize if this Comm initialised MPI
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool root() const { return rank_ == 0; }
  int local_rank() const { return local_rank_; }  // rank among the ranks on this node
  int local_size() const { return local_size_; }  // ranks on this node
  int nodes() const { return nodes_; }
  const std::string& host() const { return host_; }
  int thread_level() const { return thread_level_; }  // what MPI provided
  MPI_Comm world() const { return MPI_COMM_WORLD; }
  MPI_Comm node() const { return node_; }

  // The CPUs this node's ranks may run on: the union of their affinity masks (a scheduler's
  // CPU set or cgroup, or the cores mpiexec bound them to), and this rank's own mask's count.
  int node_cpus() const { return node_cpus_; }
  int own_cpus() const { return own_cpus_; }
  // The ids of those node CPUs (node_cpus() of them, ascending): where a process that has the
  // node to itself (pipeline_eval's sequential baseline) may widen its affinity to.
  const std::vector<int>& node_cpu_ids() const { return node_cpu_ids_; }
  // requested if > 0, else node_cpus() / ranks on this node, at most own_cpus(), at least 1:
  // 4 ranks in a 16-CPU cgroup get 4 threads each, ranks bound to one core each get 1.
  int threads_per_rank(int requested) const;

  // One line on stderr from this rank ("rank R (host): message"), flushed, then MPI_Abort:
  // the job ends with exit code 1 and no rank waits forever on a collective.
  [[noreturn]] void fail_job(const std::string& message) const;

  // Collectives: every rank must call them, in the same order.
  void barrier() const;
  // Runs fn on rank 0 only (reading files, writing checkpoints), then agrees on the outcome: if
  // fn threw, every rank throws a SharedError with its message ("what()" for non-mpicnn
  // exceptions), so a failure on rank 0 never leaves the others waiting in a later collective.
  void on_root(const std::function<void()>& fn) const;
  // Runs fn on every rank, then agrees the same way: if it threw anywhere, every rank throws a
  // SharedError with the message of the lowest rank that failed.
  void on_all(const std::function<void()>& fn) const;
  // bytes: rank 0's content, resized on the others.
  void broadcast(std::vector<uint8_t>& bytes) const;
  void broadcast(std::string& s) const;
  // t must have the same numel on every rank (checked, on every rank, after the collective).
  void broadcast(Tensor& t) const;  // a GPU tensor goes through a host copy unless MPI is CUDA-aware
  // A plain value (a number, a flag, a struct of them) becomes rank 0's, byte for byte.
  template <class T>
    requires(std::is_trivially_copyable_v<T> && !std::is_pointer_v<T>)
  void broadcast(T& value) const {
    broadcast_raw(&value, sizeof(T));
  }

  // Element-wise sum, minimum or maximum over the ranks of a number, a std::array of numbers
  // or a struct of one number type (Reducible); every rank gets the result.
  template <Reducible T> T allreduce_sum(T x) const { return reduce(x, MPI_SUM); }
  template <Reducible T> T allreduce_min(T x) const { return reduce(x, MPI_MIN); }
  template <Reducible T> T allreduce_max(T x) const { return reduce(x, MPI_MAX); }
  // The same in place over a run of numbers.
  template <MpiNumber T> void allreduce_sum(std::span<T> xs) const { reduce_raw(xs, MPI_SUM); }
  template <MpiNumber T> void allreduce_min(std::span<T> xs) const { reduce_raw(xs, MPI_MIN); }
  template <MpiNumber T> void allreduce_max(std::span<T> xs) const { reduce_raw(xs, MPI_MAX); }

  // Whether every rank holds rank 0's value, the same answer on every rank. Compared byte for
  // byte, so T must have one representation per value (integers, flags, std::arrays and
  // unpadded structs of them; not floating point, where 0.0 == -0.0 and NaN != NaN).
  template <class T>
    requires std::has_unique_object_representations_v<T>
  bool agree(const T& value) const {
    T root_value = value;
    broadcast(root_value);
    return all(std::memcmp(&root_value, &value, sizeof(T)) == 0);
  }
  bool agree(const std::string& s) const;
  // Whether `mine` holds on every rank (a logical and), the same answer on every rank.
  bool all(bool mine) const;
  // The sum of `x` over the ranks of this node (a collective of the node's ranks).
  int node_sum(int x) const;

  // Every rank's value, in rank order, on every rank.
  std::vector<uint64_t> allgather(uint64_t x) const;
  std::vector<std::string> allgather(const std::string& s) const;

  // --check-sync: a 64-bit hash of the floats (the parameter slab) on every rank; returns
  // the ranks whose hash differs from rank 0's (empty when all agree), the same on all ranks.
  std::vector<int> ranks_out_of_sync(const Tensor& values) const;

 private:
  template <MpiNumber T>
  static MPI_Datatype mpi_type() {
    if constexpr (std::same_as<T, int>) return MPI_INT;
    else if constexpr (std::same_as<T, int64_t>) return MPI_INT64_T;
    else if constexpr (std::same_as<T, uint64_t>) return MPI_UINT64_T;
    else return MPI_DOUBLE;
  }
  template <Reducible T>
  T reduce(T x, MPI_Op op) const {
    using E = typename ReduceElement<T>::type;
    reduce_raw(std::span<E>(reinterpret_cast<E*>(&x), sizeof(T) / sizeof(E)), op);
    return x;
  }
  template <MpiNumber T>
  void reduce_raw(std::span<T> xs, MPI_Op op) const {
    allreduce_in_place(xs.data(), xs.size(), mpi_type<T>(), op);
  }
  void allreduce_in_place(void* data, size_t count, MPI_Datatype type, MPI_Op op) const;
  void broadcast_raw(void* data, size_t bytes) const;

  bool owns_mpi_ = false;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1, nodes_ = 1;
  int node_cpus_ = 1, own_cpus_ = 1;
  std::vector<int> node_cpu_ids_;
  int thread_level_ = MPI_THREAD_SINGLE;
  std::string host_;
  MPI_Comm node_ = MPI_COMM_NULL;
};

// 64-bit hash of the bytes of n floats (FNV-1a over 64-bit words): equal iff bit-identical,
// short of collisions.
uint64_t hash_floats(const float* data, int64_t n);

}  // namespace mpicnn::dist
