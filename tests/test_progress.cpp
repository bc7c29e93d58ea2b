// Progress output tests: --progress parsing, auto detection from the terminal and scheduler
// variables, and the exact text of plain lines and bar redraws under a fake clock.
#include <map>
#include <sstream>

#include "core/check.h"
#include "io/progress.h"
#include "testing.h"

using namespace mpicnn;

namespace {

std::string parse_error(const std::string& text) {
  try {
    parse_progress_mode(text);
  } catch (const Error& e) {
    return e.message();
  }
  return "";
}

}  // namespace

TEST_CASE("progress mode parsing and auto detection") {
  CHECK(parse_progress_mode("auto") == ProgressMode::Auto);
  CHECK(parse_progress_mode("bar") == ProgressMode::Bar);
  CHECK(parse_progress_mode("plain") == ProgressMode::Plain);
  CHECK(parse_progress_mode("none") == ProgressMode::None);
  CHECK(parse_error("fancy") == "--progress: unknown mode 'fancy' (expected auto, bar, plain or none)");
  CHECK(parse_error("Bar").find("--progress") == 0);

  std::map<std::string, std::string> env;
  const auto getenv_fn = [&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  CHECK(resolve_progress_mode(ProgressMode::Auto, true, getenv_fn) == ProgressMode::Bar);
  CHECK(resolve_progress_mode(ProgressMode::Auto, false, getenv_fn) == ProgressMode::Plain);
  env["PBS_JOBID"] = "123.pbs";
  CHECK(resolve_progress_mode(ProgressMode::Auto, true, getenv_fn) == ProgressMode::Plain);
  env.clear();
  env["SLURM_JOB_ID"] = "456";
  CHECK(resolve_progress_mode(ProgressMode::Auto, true, getenv_fn) == ProgressMode::Plain);
  // Under mpiexec a rank's stdout is Open MPI's pseudo-terminal whatever mpiexec's own output
  // is: the launcher's stdout decides.
  CHECK(output_reaches_terminal(true, false, ""));
  CHECK_FALSE(output_reaches_terminal(false, false, "/dev/pts/3"));
  CHECK(output_reaches_terminal(true, true, "/dev/pts/3"));
  CHECK(output_reaches_terminal(true, true, "/dev/tty1"));
  CHECK_FALSE(output_reaches_terminal(true, true, "pipe:[1087654]"));
  CHECK_FALSE(output_reaches_terminal(true, true, "/tmp/make-demo.log"));
  CHECK_FALSE(output_reaches_terminal(true, true, ""));  // another node's daemon: unknown
  // Explicit choices are kept, even under a scheduler.
  CHECK(resolve_progress_mode(ProgressMode::Bar, false, getenv_fn) == ProgressMode::Bar);
  CHECK(resolve_progress_mode(ProgressMode::None, true, getenv_fn) == ProgressMode::None);
  env["SLURM_JOB_ID"] = "";  // set but empty: not a job
  CHECK(resolve_progress_mode(ProgressMode::Auto, true, getenv_fn) == ProgressMode::Bar);

  CHECK(Progress::format_eta(3725) == "1:02:05");
  CHECK(Progress::format_eta(59.6) == "1:00");
  CHECK(Progress::format_eta(0) == "0:00");
  CHECK(Progress::format_eta(NAN) == "?");
}

TEST_CASE("progress plain lines: timed, one per epoch end, no control characters") {
  std::ostringstream out;
  double t = 0;
  Progress p(out, ProgressMode::Plain, 10, [&] { return t; });
  p.begin_epoch(2, 10, 100);
  t = 1;
  p.step(1, 0.9, 640);  // too soon
  t = 10;
  p.step(10, 0.5, 640);
  t = 15;
  p.step(15, 0.4, 640);  // 5 s after the last line
  t = 20.5;
  p.step(20, 0.25, 512.25);
  t = 100;
  p.end_epoch({.train_loss = 0.3, .seconds = 100, .images_per_s = 640, .detail = ""});
  p.begin_epoch(3, 10, 100);
  t = 130;
  p.step(100, 0.2, 700);
  p.end_epoch({.train_loss = 0.2, .test_loss = 0.4, .top1 = 0.9125, .seconds = 30, .images_per_s = 700, .detail = ""});
  const std::string want =
      "epoch 2/10 step 10/100 loss 0.5000 640.0 img/s ETA 1:30\n"
      "epoch 2/10 step 20/100 loss 0.2500 512.2 img/s ETA 1:22\n"
      "epoch 2/10 done in 100.0s: train loss 0.3000, 640.0 img/s\n"
      "epoch 3/10 step 100/100 loss 0.2000 700.0 img/s ETA 0:00\n"
      "epoch 3/10 done in 30.0s: train loss 0.2000, test loss 0.4000, top-1 91.25%, 700.0 img/s\n";
  CHECK(out.str() == want);
  for (char c : out.str()) CHECK((c == '\n' || (c >= 32 && c < 127)));
}

TEST_CASE("progress bar redraws one line with carriage returns and blanks leftovers") {
  std::ostringstream out;
  double t = 0;
  Progress p(out, ProgressMode::Bar, 10, [&] { return t; });
  p.begin_epoch(1, 3, 4);
  t = 1;
  p.step(1, 10.0, 100);
  t = 1.05;
  p.step(2, 5.0, 100);  // within 0.1 s of the last redraw: skipped
  t = 3;
  p.step(3, 0.5, 100);
  t = 3.01;
  p.step(4, 0.25, 100);  // the last step is always drawn
  p.end_epoch({.train_loss = 0.25, .seconds = 3.01, .images_per_s = 100, .detail = ""});
  const std::string want =
      "\repoch 1/3 [#####...............] 1/4 loss 10.0000 100.0 img/s ETA 0:03"
      "\repoch 1/3 [###############.....] 3/4 loss 0.5000 100.0 img/s ETA 0:01 "
      "\repoch 1/3 [####################] 4/4 loss 0.2500 100.0 img/s ETA 0:00"
      "\nepoch 1/3 done in 3.0s: train loss 0.2500, 100.0 img/s\n";
  CHECK(out.str() == want);

  std::ostringstream quiet;
  Progress none(quiet, ProgressMode::None, 0, [&] { return t; });
  none.begin_epoch(1, 1, 1);
  none.step(1, 1, 1);
  none.end_epoch({});
  CHECK(quiet.str().empty());
  std::string msg;
  try {
    Progress bad(quiet, ProgressMode::Auto);
  } catch (const Error& e) {
    msg = e.message();
  }
  CHECK(msg.find("--progress") == 0);
}
