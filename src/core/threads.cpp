// Thread-count control shared by OpenMP and OpenBLAS.
#include "core/threads.h"

#include <omp.h>
#include <sched.h>

#include <cstdlib>
#include <string>

#include "core/check.h"

extern "C" void openblas_set_num_threads(int);

namespace mpicnn {

static int g_threads = 0;

void set_num_threads(int n) {
  CHECK(n >= 1, "thread count must be >= 1, got ", n);
  g_threads = n;
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

int num_threads() { return g_threads > 0 ? g_threads : omp_get_max_threads(); }

static int env_threads(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return 0;
  char* end = nullptr;
  long n = std::strtol(v, &end, 10);
  CHECK(end && *end == '\0' && n >= 1 && n <= 4096, name, "='", v,
        "' is not a thread count (an integer >= 1)");
  return int(n);
}

int default_num_threads() {
  if (int n = env_threads("MPICNN_THREADS")) return n;
  if (int n = env_threads("OMP_NUM_THREADS")) return n;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set) > 0 ? CPU_COUNT(&set) : 1;
  return 1;
}

}  // namespace mpicnn
