// Fault injection for the reliability tests (tests/shell/test_rank_failure.sh,
// bench/reliability.sh): fault::point("name") marks a place where a test may kill or stop
// this process. MPICNN_FAULT="name:rank:n[:signal]" arms one point: the n-th time (from 1) rank
// `rank` passes point `name`, it raises `signal` on itself (kill = SIGKILL, the default; stop =
// SIGSTOP, a stalled rank; term and usr1 = SIGTERM and SIGUSR1, a scheduler's stop arriving at
// exactly that point). Unset, a point costs one load of a flag read once at start-up.
// Not an error path: nothing is thrown; killed, the process cannot clean up (that is the point).
#pragma once
#include <string_view>

namespace mpicnn::fault {

namespace detail {
extern const bool armed;  // MPICNN_FAULT was set (read once, at static initialisation)
void hit(std::string_view name);
}  // namespace detail

// This process's rank for matching MPICNN_FAULT; Comm sets it once MPI knows it (until then,
// OMPI_COMM_WORLD_RANK / PMI_RANK / SLURM_PROCID from the launcher, else 0).
void set_rank(int rank);

inline bool armed() { return detail::armed; }

inline void point(std::string_view name) {
  if (detail::armed) detail::hit(name);
}

// What MPICNN_FAULT asks for, parsed; `valid` false (with `error` saying why) for a bad value.
struct Spec {
  bool valid = false;
  std::string_view name;
  int rank = 0;
  long occurrence = 1;
  int signal = 0;
  const char* error = "";
};
Spec parse_spec(std::string_view text);

}  // namespace mpicnn::fault
