// Progress output for rank 0: `--progress auto|bar|plain|none`. A bar redrawn in place with
// '\r' for terminals; plain timed lines (no control characters) for batch logs. Not logging
// of metrics (io/tracking.h); other ranks simply construct it with ProgressMode::None.
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>

namespace mpicnn {

enum class ProgressMode { Auto, Bar, Plain, None };

// "auto", "bar", "plain", "none"; anything else is an error naming --progress.
ProgressMode parse_progress_mode(const std::string& text);
// Auto becomes Bar when stdout is a terminal the user sees and no batch scheduler job is
// visible (PBS_JOBID, SLURM_JOB_ID), else Plain: a scheduler's log file must not fill with
// '\r' redraws even when it is attached to a pseudo-terminal. Other modes pass through.
// `getenv_fn` is injectable for tests (default std::getenv).
ProgressMode resolve_progress_mode(ProgressMode mode, bool stdout_is_tty,
                                   const std::function<const char*(const char*)>& getenv_fn = {});
// Whether this process's output reaches a terminal the user sees. isatty alone does not say it
// under mpiexec: Open MPI gives every rank a pseudo-terminal whatever mpiexec's own output is
// (a file, a pipe). So under an MPI launcher (OMPI_COMM_WORLD_SIZE, PMIX_RANK or PMI_RANK set)
// the answer is whether the launcher's stdout is one: the parent process's, from /proc (mpiexec
// itself for the ranks it starts on its own node, where rank 0 runs); no when /proc cannot
// say (a rank started by a daemon on another node).
bool stdout_is_terminal();
// The rule of stdout_is_terminal, given what it reads: this process's isatty, whether an MPI
// launcher started it, and the parent's stdout as /proc/PPID/fd/1 names it ("" if unknown).
bool output_reaches_terminal(bool own_tty, bool under_launcher, const std::string& parent_stdout);

struct EpochSummary {
  double train_loss = NAN;
  double test_loss = NAN, top1 = NAN;  // NaN: not measured, left out of the line
  double seconds = 0;
  double images_per_s = 0;
  std::string detail;  // after the train loss, in parentheses (detection: its four losses)
};

class Progress {
 public:
  using Clock = std::function<double()>;  // monotonic seconds
  // `mode` must be resolved (not Auto). Plain prints at most one line per `plain_every_s`.
  Progress(std::ostream& out, ProgressMode mode, double plain_every_s = 15, Clock clock = {});

  void begin_epoch(int64_t epoch, int64_t epochs, int64_t steps);  // epoch is 1-based
  void step(int64_t done, double loss, double images_per_s);       // done: steps finished
  void end_epoch(const EpochSummary& s);

  // The ETA text used by both forms: "m:ss", or "h:mm:ss" from an hour up.
  static std::string format_eta(double seconds);

 private:
  std::string status_text(int64_t done, double loss, double images_per_s, double now) const;

  std::ostream& out_;
  ProgressMode mode_;
  double every_;
  Clock clock_;
  int64_t epoch_ = 0, epochs_ = 0, steps_ = 0;
  double epoch_start_ = 0, last_print_ = 0;
  size_t bar_len_ = 0;  // length of the bar line on screen, to blank a shorter redraw
  bool bar_open_ = false;
};

}  // namespace mpicnn
