// Fault points: MPICNN_FAULT parsing and the kill (see fault.h).
#include "core/fault.h"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace mpicnn::fault {

namespace {

const char* fault_env() {
  const char* v = std::getenv("MPICNN_FAULT");
  return v && *v ? v : nullptr;
}

int launcher_rank() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char* v = std::getenv(var); v && *v) return std::atoi(v);
  return 0;
}

std::atomic<int> my_rank{-1};
std::atomic<long> hits{0};

bool parse_long(std::string_view s, long& out) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size();
}

}  // namespace

namespace detail {
const bool armed = fault_env() != nullptr;

void hit(std::string_view name) {
  // Parsed on each hit (a test's process only): the spec's string must outlive the view.
  static const std::string text = fault_env() ? fault_env() : "";
  static const Spec spec = parse_spec(text);
  if (!spec.valid) {
    static bool said = false;
    if (!said) std::fprintf(stderr, "MPICNN_FAULT=%s: %s (ignored)\n", text.c_str(), spec.error);
    said = true;
    return;
  }
  int rank = my_rank.load(std::memory_order_relaxed);
  if (rank < 0) rank = launcher_rank();
  if (name != spec.name || rank != spec.rank) return;
  if (hits.fetch_add(1) + 1 != spec.occurrence) return;
  // One line first, so a test can tell where and when (epoch seconds) the fault struck.
  timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  std::fprintf(stderr, "fault: rank %d raises signal %d at point %.*s (hit %ld) at %ld.%06ld\n", rank,
               spec.signal, int(name.size()), name.data(), spec.occurrence, long(now.tv_sec),
               long(now.tv_nsec / 1000));
  std::fflush(stderr);
  ::kill(::getpid(), spec.signal);  // the whole process, not only this thread
}
}  // namespace detail

void set_rank(int rank) { my_rank.store(rank, std::memory_order_relaxed); }

Spec parse_spec(std::string_view text) {
  Spec s;
  std::string_view parts[4];
  int n = 0;
  for (size_t at = 0; n < 4;) {
    const size_t colon = text.find(':', at);
    parts[n++] = text.substr(at, colon == std::string_view::npos ? std::string_view::npos : colon - at);
    if (colon == std::string_view::npos) break;
    at = colon + 1;
    if (n == 4) return s.error = "expected name:rank:n[:kill|stop|term|usr1]", s;
  }
  long rank = 0, occ = 0;
  if (n < 3 || parts[0].empty()) return s.error = "expected name:rank:n[:kill|stop|term|usr1]", s;
  if (!parse_long(parts[1], rank) || rank < 0) return s.error = "rank must be an integer >= 0", s;
  if (!parse_long(parts[2], occ) || occ < 1) return s.error = "n must be an integer >= 1", s;
  s.signal = SIGKILL;
  if (n == 4) {
    if (parts[3] == "stop") s.signal = SIGSTOP;
    else if (parts[3] == "term") s.signal = SIGTERM;
    else if (parts[3] == "usr1") s.signal = SIGUSR1;
    else if (parts[3] != "kill") return s.error = "signal must be kill, stop, term or usr1", s;
  }
  s.name = parts[0];
  s.rank = int(rank);
  s.occurrence = occ;
  s.valid = true;
  return s;
}

}  // namespace mpicnn::fault
