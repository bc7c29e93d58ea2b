// doctest entry point for the MPI test binary (tests/mpi/*.cpp), run by tests/run_all.sh under
// `mpiexec -n K`. Every rank runs the same test cases in the same order (collectives inside
// tests must match); rank 0 prints the report, the other ranks run quietly, and the exit code
// is non-zero on every rank when any rank failed, with rank 0 saying which.
#define DOCTEST_CONFIG_IMPLEMENT
#include <mpi.h>

#include <cstdio>
#include <string>
#include <vector>

#include "testing.h"
#include "case_times.h"

// The environment's kernel overrides (MPICNN_BF16, MPICNN_GEMM, ...) apply before any test runs.
static const bool kExecApplied = (mpicnn::testing::exec(), true);
#include "dist/asan_options.h"

int main(int argc, char** argv) {
  int provided = 0;  // as dist::Comm asks: the gradient progress thread needs SERIALIZED
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  doctest::Context ctx(argc, argv);
  if (rank != 0) ctx.setOption("out", "/dev/null");
  const int rc = ctx.run();
  const int failed = rc != 0 ? 1 : 0;
  std::vector<int> all(size_t(size), 0);
  MPI_Gather(&failed, 1, MPI_INT, all.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  int any = 0;
  if (rank == 0) {
    for (int r = 0; r < size; ++r)
      if (all[size_t(r)]) {
        std::printf("mpi tests: rank %d of %d failed\n", r, size);
        any = 1;
      }
    std::fflush(stdout);
  }
  MPI_Bcast(&any, 1, MPI_INT, 0, MPI_COMM_WORLD);
  MPI_Finalize();
  return any;
}
