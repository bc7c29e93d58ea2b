// MPI tests of dist::Comm: world and node-local ranks, the thread rule, the launcher check,
// MPI_CHECK, broadcasts, reductions, agreement checks, gathers and the --check-sync checksum.
// Every rank runs every case and reaches the same collectives; checks come after the collectives.
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <optional>
#include <string>

#include "dist/comm.h"
#include "testing.h"

using namespace mpicnn;

namespace {
dist::Comm& comm() {
  static dist::Comm c(nullptr, nullptr);  // adopts the MPI that mpi_main.cpp initialised
  return c;
}

// Sets an environment variable for one scope, restoring the previous value (or absence).
struct EnvGuard {
  std::string name;
  std::optional<std::string> old;
  EnvGuard(const char* n, const char* value) : name(n) {
    if (const char* v = std::getenv(n)) old = v;
    if (value) setenv(n, value, 1); else unsetenv(n);
  }
  ~EnvGuard() {
    if (old) setenv(name.c_str(), old->c_str(), 1); else unsetenv(name.c_str());
  }
};
}  // namespace

TEST_CASE("dist comm: rank, size, node-local ranks") {
  int rank = -1, size = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const dist::Comm& c = comm();
  CHECK(c.rank() == rank);
  CHECK(c.size() == size);
  CHECK(c.root() == (rank == 0));
  CHECK(c.local_rank() >= 0);
  CHECK(c.local_rank() < c.local_size());
  CHECK(!c.host().empty());
  // Node leaders' local sizes add up to the world; leaders count the nodes.
  const int64_t total = c.allreduce_sum(int64_t(c.local_rank() == 0 ? c.local_size() : 0));
  const int64_t leaders = c.allreduce_sum(int64_t(c.local_rank() == 0 ? 1 : 0));
  CHECK(total == size);
  CHECK(leaders == c.nodes());
  CHECK(c.thread_level() >= MPI_THREAD_SINGLE);
}

TEST_CASE("dist comm: threads per rank") {
  CHECK(dist::threads_per_rank(0, 16, 4) == 4);
  CHECK(dist::threads_per_rank(0, 7, 2) == 3);
  CHECK(dist::threads_per_rank(0, 2, 3) == 1);  // oversubscribed: never 0
  CHECK(dist::threads_per_rank(5, 2, 3) == 5);  // an explicit request wins
  CHECK(dist::threads_per_rank(0, 16, 4, 1) == 1);    // each rank bound to one core
  CHECK(dist::threads_per_rank(0, 16, 4, 16) == 4);   // all share a 16-CPU set
  CHECK(dist::threads_per_rank(0, 64, 4, 8) == 8);    // bound to 8 CPUs each (map-by PE=8)
  CHECK(comm().threads_per_rank(3) == 3);
  CHECK(comm().threads_per_rank(0) >= 1);
  // The node's CPUs are the union of the ranks' affinity masks: never fewer than one rank's.
  CHECK(comm().own_cpus() >= 1);
  CHECK(comm().node_cpus() >= comm().own_cpus());
  CHECK(comm().node_cpus() <= sysconf(_SC_NPROCESSORS_CONF));
  // Their ids: as many, ascending, and this rank's own CPUs among them.
  const std::vector<int>& ids = comm().node_cpu_ids();
  CHECK(int(ids.size()) == comm().node_cpus());
  CHECK(std::is_sorted(ids.begin(), ids.end()));
  cpu_set_t own;
  REQUIRE(sched_getaffinity(0, sizeof own, &own) == 0);
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &own)) CHECK(std::binary_search(ids.begin(), ids.end(), c));
}

TEST_CASE("dist comm: launcher size check") {
  CHECK(dist::launcher_mismatch(4, {}).empty());
  CHECK(dist::launcher_mismatch(4, {.ompi = 4, .slurm = 4, .pmi = 4}).empty());
  const std::string m = dist::launcher_mismatch(1, {.ompi = 4});
  CHECK(m.find("OMPI_COMM_WORLD_SIZE=4") != std::string::npos);
  CHECK(m.find("MPI sees 1 rank ") != std::string::npos);
  CHECK(dist::launcher_mismatch(2, {.slurm = 3}).find("SLURM_NTASKS=3") != std::string::npos);
  CHECK(dist::launcher_mismatch(2, {.pmi = 8}).find("PMI_SIZE=8") != std::string::npos);

  // From the environment: SLURM_NTASKS only counts inside an srun step with no MPI launcher's size.
  const std::string wrong = std::to_string(comm().size() + 1);
  {
    EnvGuard a("OMPI_COMM_WORLD_SIZE", wrong.c_str()), b("SLURM_NTASKS", "99"),
        s1("SLURM_STEP_ID", nullptr), s2("SLURM_PROCID", nullptr), p("PMI_SIZE", nullptr);
    const dist::LauncherSizes got = dist::launcher_sizes_from_environment();
    CHECK(got.ompi == comm().size() + 1);
    CHECK(got.slurm == -1);
    CHECK(got.pmi == -1);
    CHECK(!dist::launcher_mismatch(comm().size(), got).empty());
  }
  {
    EnvGuard a("OMPI_COMM_WORLD_SIZE", nullptr), b("SLURM_NTASKS", "99"), s("SLURM_PROCID", "0"),
        p("PMI_SIZE", nullptr);
    const dist::LauncherSizes got = dist::launcher_sizes_from_environment();
    CHECK(got.slurm == 99);
    CHECK(dist::launcher_mismatch(comm().size(), got).find("SLURM_NTASKS=99") != std::string::npos);
  }
  {  // mpiexec -n 1 inside a 2-task Slurm job: the ranks inherit the batch step's variables.
    EnvGuard a("OMPI_COMM_WORLD_SIZE", std::to_string(comm().size()).c_str()), b("SLURM_NTASKS", "99"),
        s("SLURM_PROCID", "0"), p("PMI_SIZE", nullptr);
    const dist::LauncherSizes got = dist::launcher_sizes_from_environment();
    CHECK(got.slurm == -1);
    CHECK(dist::launcher_mismatch(comm().size(), got).empty());
  }
  // The real environment of this test run agrees with the world size.
  CHECK(dist::launcher_mismatch(comm().size(), dist::launcher_sizes_from_environment()).empty());
}

TEST_CASE("dist comm: MPI_CHECK reports the failing call") {
  comm();  // MPI_ERRORS_RETURN is set
  int x = 0;
  std::string what;
  try {
    MPI_CHECK(MPI_Bcast(&x, -1, MPI_INT, 0, MPI_COMM_WORLD));  // invalid count: local error
  } catch (const Error& e) {
    what = e.message();
  }
  CHECK(what.find("MPI_Bcast") != std::string::npos);
  CHECK(what.find("count") != std::string::npos);
  comm().barrier();
}

TEST_CASE("dist comm: broadcasts, sums, sync checksum") {
  const dist::Comm& c = comm();
  const int K = c.size(), r = c.rank();
  std::vector<uint8_t> bytes;
  std::string s;
  if (c.root()) {
    bytes = {1, 2, 3, 250};
    s = "hello from rank 0";
  } else {
    bytes = {9};
    s = "junk";
  }
  c.broadcast(bytes);
  c.broadcast(s);
  Tensor t = Tensor::zeros({5});
  if (c.root())
    for (int i = 0; i < 5; ++i) t.data()[i] = float(i) + 0.5f;
  c.broadcast(t);
  const double sum = c.allreduce_sum(double(r + 1));
  std::vector<double> v = {1.0, double(r)};
  c.allreduce_sum(std::span<double>(v));
  const std::vector<uint64_t> all = c.allgather(uint64_t(10 * r));

  CHECK(bytes == std::vector<uint8_t>{1, 2, 3, 250});
  CHECK(s == "hello from rank 0");
  for (int i = 0; i < 5; ++i) CHECK(t.data()[i] == float(i) + 0.5f);
  CHECK(sum == double(K) * (K + 1) / 2);
  CHECK(v[0] == double(K));
  CHECK(v[1] == double(K) * (K - 1) / 2);
  REQUIRE(all.size() == size_t(K));
  for (int q = 0; q < K; ++q) CHECK(all[size_t(q)] == uint64_t(10 * q));

  // Mismatched tensor sizes: every rank throws (agreed after a collective), none hangs.
  Tensor odd = Tensor::zeros({r == K - 1 && K > 1 ? 4 : 5});
  bool threw = false;
  try {
    c.broadcast(odd);
  } catch (const Error&) {
    threw = true;
  }
  CHECK(threw == (K > 1));

  // --check-sync: identical slabs agree; one flipped bit on the last rank is found.
  Tensor p = testing::random_tensor({1001}, 5);
  CHECK(c.ranks_out_of_sync(p).empty());
  if (K > 1 && r == K - 1) p.data()[1000] = std::nextafter(p.data()[1000], 10.f);
  const std::vector<int> differ = c.ranks_out_of_sync(p);
  if (K > 1)
    CHECK(differ == std::vector<int>{K - 1});
  else
    CHECK(differ.empty());
  CHECK(dist::hash_floats(p.data(), 1000) != dist::hash_floats(p.data(), 999));
}

TEST_CASE("dist comm: sums, minima and maxima of numbers, arrays and structs") {
  const dist::Comm& c = comm();
  const int K = c.size(), r = c.rank();
  // Every rank contributes rank-dependent values, so taking one rank's value, the wrong
  // operation or mixing up elements changes the result.
  const int imin = c.allreduce_min(10 - r), imax = c.allreduce_max(10 - r);
  const int64_t bits = c.allreduce_sum(int64_t(1) << (40 + r));  // beyond 32 bits
  const uint64_t umax = c.allreduce_max(uint64_t(r + 1) << 61);
  const double dmin = c.allreduce_min(0.5 - r);
  const std::array<double, 3> a = c.allreduce_sum(std::array<double, 3>{1.0, double(r), 0.5 * r});
  const std::array<int, 2> lo = c.allreduce_min(std::array<int, 2>{r, -r});
  struct Totals {
    using reduce_as = double;
    double loss = 0, samples = 0, votes = 0;
  };
  const Totals tmax = c.allreduce_max(Totals{double(r), double(K - r), r == 1 ? 1.0 : 0.0});
  const Totals tsum = c.allreduce_sum(Totals{double(r), 1.0, 0.25});
  std::vector<int64_t> v = {int64_t(r), -int64_t(r), 7};
  c.allreduce_max(std::span<int64_t>(v));
  std::vector<double> w = {double(r), 2.5};
  c.allreduce_min(std::span<double>(w));
  std::vector<int> u = {r, 1};
  c.allreduce_sum(std::span<int>(u));

  CHECK(imin == 10 - (K - 1));
  CHECK(imax == 10);
  int64_t want_bits = 0;
  for (int q = 0; q < K; ++q) want_bits += int64_t(1) << (40 + q);
  CHECK(bits == want_bits);
  CHECK(umax == uint64_t(K) << 61);
  CHECK(dmin == 0.5 - (K - 1));
  CHECK(a == std::array<double, 3>{double(K), K * (K - 1) / 2.0, K * (K - 1) / 4.0});
  CHECK(lo == std::array<int, 2>{0, -(K - 1)});
  CHECK(tmax.loss == K - 1);
  CHECK(tmax.samples == K);
  CHECK(tmax.votes == (K > 1 ? 1.0 : 0.0));
  CHECK(tsum.loss == K * (K - 1) / 2.0);
  CHECK(tsum.samples == K);
  CHECK(tsum.votes == 0.25 * K);
  CHECK(v == std::vector<int64_t>{K - 1, 0, 7});
  CHECK(w == std::vector<double>{0, 2.5});
  CHECK(u == std::vector<int>{K * (K - 1) / 2, K});
}

TEST_CASE("dist comm: broadcast of a struct, agreement checks, gathered strings") {
  const dist::Comm& c = comm();
  const int K = c.size(), r = c.rank();
  struct Position {  // mixed types with padding: broadcast copies bytes as they are
    int64_t epoch;
    int32_t step;
    double scale;
  };
  Position p = c.root() ? Position{3, 17, 0.25} : Position{-1, -r, -1};
  c.broadcast(p);
  bool flag = !c.root();
  c.broadcast(flag);
  int64_t steps = 1000 + r;
  c.broadcast(steps);

  const bool same_int = c.agree(42);
  const bool last_differs = c.agree(r == K - 1 ? 43 : 42);
  const bool second_differs = c.agree(std::array<int, 2>{1, r == 1 ? 5 : 2});
  const bool same_string = c.agree(std::string("lenet"));
  const bool longer_string = c.agree(std::string(r == K - 1 ? "lenet " : "lenet"));
  const bool shorter_string = c.agree(std::string(r == 1 ? "len" : "lenet"));
  const bool all_true = c.all(true);
  const bool all_but_last = c.all(r != K - 1);
  const bool all_but_root = c.all(!c.root());
  // Rank-dependent lengths, rank 0's empty: each string must land at its own rank.
  const std::vector<std::string> strings = c.allgather(std::string(size_t(r), char('a' + r)));

  CHECK(p.epoch == 3);
  CHECK(p.step == 17);
  CHECK(p.scale == 0.25);
  CHECK(flag == false);
  CHECK(steps == 1000);
  CHECK(same_int);
  CHECK(last_differs == (K == 1));
  CHECK(second_differs == (K == 1));
  CHECK(same_string);
  CHECK(longer_string == (K == 1));
  CHECK(shorter_string == (K == 1));
  CHECK(all_true);
  CHECK(!all_but_last);
  CHECK(!all_but_root);
  REQUIRE(strings.size() == size_t(K));
  for (int q = 0; q < K; ++q) CHECK(strings[size_t(q)] == std::string(size_t(q), char('a' + q)));
}

TEST_CASE("dist comm: on_root and on_all agree on a failure") {
  const dist::Comm& c = comm();
  const int K = c.size(), r = c.rank();
  auto message_of = [&](auto&& call) -> std::string {
    try {
      call();
    } catch (const dist::SharedError& e) {
      return e.message();
    }
    return "";
  };
  // Nothing fails: nobody throws.
  CHECK(message_of([&] { c.on_all([] {}); }).empty());
  CHECK(message_of([&] { c.on_root([] {}); }).empty());
  // Rank 0 fails: everybody gets its message.
  CHECK(message_of([&] { c.on_root([] { MPICNN_FAIL("root says no"); }); }) == "root says no");
  // The last rank and (with K >= 3) rank 1 fail: everybody gets the lowest failing rank's message.
  const std::string got = message_of([&] {
    c.on_all([&] {
      if (r == K - 1 || (r == 1 && K >= 3)) MPICNN_FAIL("rank ", r, " failed");
    });
  });
  CHECK(got == "rank " + std::to_string(K >= 3 ? 1 : K - 1) + " failed");
  // A non-mpicnn exception counts too.
  CHECK(message_of([&] { c.on_all([&] { if (r == 0) throw std::runtime_error("plain"); }); }) == "plain");
}
