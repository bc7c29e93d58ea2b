// Progress bar / plain progress lines. Rate limits and ETA only; all numbers come from the
// trainer. Not thread-safe: rank 0's training thread is its only caller.
#include "io/progress.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "core/check.h"

namespace mpicnn {

ProgressMode parse_progress_mode(const std::string& text) {
  if (text == "auto") return ProgressMode::Auto;
  if (text == "bar") return ProgressMode::Bar;
  if (text == "plain") return ProgressMode::Plain;
  if (text == "none") return ProgressMode::None;
  FAIL("--progress: unknown mode '", text, "' (expected auto, bar, plain or none)");
}

ProgressMode resolve_progress_mode(ProgressMode mode, bool stdout_is_tty,
                                   const std::function<const char*(const char*)>& getenv_fn) {
  if (mode != ProgressMode::Auto) return mode;
  auto env = [&](const char* name) {
    const char* v = getenv_fn ? getenv_fn(name) : std::getenv(name);
    return v != nullptr && *v != '\0';
  };
  if (!stdout_is_tty || env("PBS_JOBID") || env("SLURM_JOB_ID")) return ProgressMode::Plain;
  return ProgressMode::Bar;
}

bool output_reaches_terminal(bool own_tty, bool under_launcher, const std::string& parent_stdout) {
  if (!own_tty) return false;
  if (!under_launcher) return true;
  return parent_stdout.starts_with("/dev/pts/") || parent_stdout.starts_with("/dev/tty") ||
         parent_stdout == "/dev/console";
}

bool stdout_is_terminal() {
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return v != nullptr && *v != '\0';
  };
  const bool launcher = env("OMPI_COMM_WORLD_SIZE") || env("PMIX_RANK") || env("PMI_RANK");
  std::string parent;
  if (launcher) {
    char buf[256];
    const std::string link = "/proc/" + std::to_string(::getppid()) + "/fd/1";
    const ssize_t n = ::readlink(link.c_str(), buf, sizeof buf);
    if (n > 0) parent.assign(buf, size_t(n));
  }
  return output_reaches_terminal(::isatty(STDOUT_FILENO) == 1, launcher, parent);
}

Progress::Progress(std::ostream& out, ProgressMode mode, double plain_every_s, Clock clock)
    : out_(out), mode_(mode), every_(plain_every_s), clock_(std::move(clock)) {
  CHECK(mode != ProgressMode::Auto, "--progress: resolve 'auto' before constructing Progress");
  CHECK(plain_every_s >= 0, "progress interval must be >= 0, got ", plain_every_s);
  if (!clock_)
    clock_ = [] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    };
}

std::string Progress::format_eta(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const long long s = std::llround(seconds);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", s / 3600, (s / 60) % 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%lld:%02lld", s / 60, s % 60);
  return buf;
}

void Progress::begin_epoch(int64_t epoch, int64_t epochs, int64_t steps) {
  epoch_ = epoch;
  epochs_ = epochs;
  steps_ = steps;
  epoch_start_ = last_print_ = clock_();
  bar_len_ = 0;
  bar_open_ = false;
}

// ETA from the epoch's average step time so far: steady after the first few steps, and
// data-loading stalls are averaged in rather than extrapolated.
std::string Progress::status_text(int64_t done, double loss, double images_per_s, double now) const {
  const double per_step = done > 0 ? (now - epoch_start_) / double(done) : NAN;
  char buf[160];
  std::snprintf(buf, sizeof buf, "%lld/%lld loss %.4f %.1f img/s ETA %s", static_cast<long long>(done),
                static_cast<long long>(steps_), loss, images_per_s,
                format_eta(per_step * double(steps_ - done)).c_str());
  return buf;
}

void Progress::step(int64_t done, double loss, double images_per_s) {
  if (mode_ == ProgressMode::None) return;
  const double now = clock_();
  char head[64];
  std::snprintf(head, sizeof head, "epoch %lld/%lld ", static_cast<long long>(epoch_),
                static_cast<long long>(epochs_));
  if (mode_ == ProgressMode::Plain) {
    if (now - last_print_ < every_) return;
    last_print_ = now;
    out_ << head << "step " << status_text(done, loss, images_per_s, now) << '\n' << std::flush;
    return;
  }
  // Bar: at most 10 redraws a second (a terminal is slow), but always the last step.
  if (bar_open_ && done < steps_ && now - last_print_ < 0.1) return;
  last_print_ = now;
  constexpr int64_t kWidth = 20;
  const int64_t filled = steps_ > 0 ? std::min(kWidth, done * kWidth / steps_) : 0;
  std::string line = head;
  line += '[' + std::string(size_t(filled), '#') + std::string(size_t(kWidth - filled), '.') + "] ";
  line += status_text(done, loss, images_per_s, now);
  const size_t len = line.size();
  if (len < bar_len_) line += std::string(bar_len_ - len, ' ');
  bar_len_ = len;
  bar_open_ = true;
  out_ << '\r' << line << std::flush;
}

void Progress::end_epoch(const EpochSummary& s) {
  if (mode_ == ProgressMode::None) return;
  if (bar_open_) out_ << '\n';
  bar_open_ = false;
  char buf[512];
  int n = std::snprintf(buf, sizeof buf, "epoch %lld/%lld done in %.1fs: train loss %.4f",
                        static_cast<long long>(epoch_), static_cast<long long>(epochs_), s.seconds,
                        s.train_loss);
  if (!s.detail.empty()) n += std::snprintf(buf + n, sizeof buf - size_t(n), " (%s)", s.detail.c_str());
  if (std::isfinite(s.test_loss))
    n += std::snprintf(buf + n, sizeof buf - size_t(n), ", test loss %.4f", s.test_loss);
  if (std::isfinite(s.top1))
    n += std::snprintf(buf + n, sizeof buf - size_t(n), ", top-1 %.2f%%", 100 * s.top1);
  std::snprintf(buf + n, sizeof buf - size_t(n), ", %.1f img/s", s.images_per_s);
  out_ << buf << '\n' << std::flush;
  last_print_ = clock_();
}

}  // namespace mpicnn
