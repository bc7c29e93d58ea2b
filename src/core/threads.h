// One thread count for the whole process, applied to both OpenMP loops and OpenBLAS.
// Not a task scheduler: layers use OpenMP parallel-for and OpenBLAS's own threads.
#pragma once

namespace mpicnn {

// Sets OpenMP's and OpenBLAS's thread counts together (n >= 1).
void set_num_threads(int n);
int num_threads();
// Threads this process may use by default: MPICNN_THREADS, else OMP_NUM_THREADS, else the
// cores in this process's CPU affinity mask.
int default_num_threads();

}  // namespace mpicnn
