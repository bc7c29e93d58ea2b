// `recommend sweep GRID -o DIR`: runs every point of a grid file (sweep_grid.cpp) with ./train
// under mpiexec, one run directory each, sequentially. Resumable (finished points are skipped),
// a failing point is recorded and the sweep goes on, Ctrl-C stops the current point cleanly.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/program_options.hpp>
#include <chrono>
#include <csignal>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "core/check.h"
#include "io/atomic_file.h"
#include "recommend/commands.h"
#include "recommend/runs.h"
#include "recommend/sweep.h"

namespace fs = std::filesystem;
namespace po = boost::program_options;
using nlohmann::json;

namespace mpicnn::recommend::sweep {
namespace {

constexpr const char* kUsage = R"(Usage: ./recommend sweep GRID -o DIR [options]

Runs every configuration of the grid file GRID with ./train, one after the other, each in its
own run directory DIR/<name> (the name says the configuration, e.g.
lenet-syn-s32-b64-r2-t1-w2-dd1-e2; a hash suffix when other options differ from ./train's
defaults): `MPIEXEC -n RANKS TRAIN --key=value... -s DIR/<name> --progress plain`, its output in
DIR/<name>/train.log, the sweep's record in DIR/<name>/sweep_point.json. A point already
FINISHED is skipped, so rerunning the same command resumes the sweep; a failed or interrupted
point is run again from scratch. A failing point is recorded FAILED (exit code and last log
line) and the sweep goes on; Ctrl-C stops the running point, records it FAILED (interrupted)
and ends the sweep. Exit status: 0 when no point failed, 1 otherwise, 2 for a bad grid or flag.

Grid file: one 'key = v1 v2 ...' per line, '#' starts a comment. Keys are ./train's long option
names (model, data, dataset, image-size, batch-size, epochs, threads, workers,
distribute-data, device, learning-rate, ... passed on as --key=value) plus 'ranks' (MPI ranks,
positive integers); save-dir, resume and progress are the sweep's. The grid is the product of
every key's values. '[name]' starts a block: each block is its own product, of the keys above
the first block (shared settings) with the block's keys replacing or adding to them, and the
sweep is the union of the blocks. Values hold no spaces. For example:
    dataset = synthetic
    epochs = 2
    [lenet]
    model = lenet
    batch-size = 32 128
    ranks = 1 2 4
    [resnet]
    model = resnet20
    threads = 1 2

)";

constexpr const char* kExamples = R"(
Examples:
  ./recommend sweep bench/config_sweep.grid -o runs/sweep --dry-run     list the points
  ./recommend sweep bench/config_sweep.grid -o runs/sweep               run (again: resume)
  ./recommend sweep my.grid -o runs/s --only lenet --timeout-per-run 600
  ./recommend report runs/sweep -o sweep.html; ./recommend fit runs/sweep -o model.json
)";

volatile std::sig_atomic_t g_stop = 0;
extern "C" void on_stop_signal(int sig) { g_stop = sig; }

struct Settings {
  std::string grid, out, train, mpiexec = "mpiexec --oversubscribe";
  double timeout = 0;
  bool dry_run = false;
  std::vector<std::string> only;
};

// A line of the usage or flags error: printed by sweep_main with exit status 2.
struct UsageError {
  std::string message;
};

// ./train next to the recommend the user ran (its link, as ./recommend is ./train's neighbour
// in the repository), else next to the real binary, else $PWD/train.
std::string default_train() {
  std::ifstream cmd("/proc/self/cmdline");
  std::string argv0;
  std::getline(cmd, argv0, '\0');
  std::vector<fs::path> candidates;
  if (argv0.find('/') != std::string::npos) candidates.push_back(fs::path(argv0).parent_path() / "train");
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) candidates.push_back(exe.parent_path() / "train");
  for (const fs::path& c : candidates)
    if (fs::exists(c)) return fs::absolute(c).lexically_normal().string();
  return (fs::current_path() / "train").string();
}

Settings parse_settings(int argc, char** argv, bool& help) {
  Settings s;
  std::string timeout_s;
  po::options_description opts("Options", 110, 40);
  opts.add_options()("help,h", "show this help")
      ("output,o", po::value(&s.out)->value_name("DIR"), "the sweep's folder of run directories (required)")
      ("train", po::value(&s.train)->value_name("PATH"),
       "the ./train to run (default: train next to this recommend, else $PWD/train)")
      ("mpiexec", po::value(&s.mpiexec)->value_name("CMD"),
       "launcher, split on spaces, before -n RANKS [default \"mpiexec --oversubscribe\"]; \"\" runs "
       "./train directly (ranks 1 only)")
      ("timeout-per-run", po::value(&timeout_s)->value_name("S"),
       "stop a point after S seconds and record it FAILED (0 = no limit) [default 0]")
      ("dry-run", po::bool_switch(&s.dry_run), "print the points and their commands; run nothing")
      ("only", po::value(&s.only)->value_name("NAME"),
       "run only this point or [block] (repeatable)")
      ("grid", po::value(&s.grid)->value_name("GRID"), "the grid file");
  po::positional_options_description pos;
  pos.add("grid", 1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(opts).positional(pos).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError{e.what()};
  }
  help = vm.count("help") > 0;
  if (help) {
    std::cout << kUsage << opts << kExamples;
    return s;
  }
  if (s.grid.empty()) throw UsageError{"the grid file is required (./recommend sweep GRID -o DIR; -h for help)"};
  if (s.out.empty()) throw UsageError{"-o DIR is required (the folder of the sweep's run directories)"};
  if (!timeout_s.empty()) {
    char* end = nullptr;
    s.timeout = std::strtod(timeout_s.c_str(), &end);
    if (*end || !(s.timeout >= 0)) throw UsageError{"--timeout-per-run: '" + timeout_s + "' is not a number >= 0"};
  }
  if (s.train.empty()) s.train = default_train();
  return s;
}

std::vector<std::string> split_words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

std::string show_command(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& a : argv)
    out += (out.empty() ? "" : " ") + (a.find_first_of(" \t\"'") == std::string::npos ? a : "'" + a + "'");
  return out;
}

std::vector<std::string> point_command(const Settings& s, const PointRun& p, const std::string& dir) {
  std::vector<std::string> argv = split_words(s.mpiexec);
  if (!argv.empty()) argv.insert(argv.end(), {"-n", std::to_string(p.point.ranks)});
  argv.push_back(s.train);
  argv.insert(argv.end(), p.train_args.begin(), p.train_args.end());
  argv.insert(argv.end(), {"-s", dir, "--progress", "plain"});
  return argv;
}

json read_json_or_null(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return nullptr;
  return json::parse(in, nullptr, /*allow_exceptions=*/false);
}

bool summary_finished(const fs::path& dir) {
  const json s = read_json_or_null(dir / "summary.json");
  return s.is_object() && s.value("status", "") == "FINISHED";
}

// Done: the sweep recorded the point FINISHED and the trainer's summary agrees.
bool point_done(const fs::path& dir) {
  const json p = read_json_or_null(dir / "sweep_point.json");
  return p.is_object() && p.value("status", "") == "FINISHED" && summary_finished(dir);
}

// The point's reason for failing from its log: the last non-empty line outside OpenMPI's
// dash-framed notices (which follow the trainer's own one-line error and say less), else the
// last line inside one (mpiexec's own failure, when the trainer never started).
std::string last_log_line(const fs::path& log) {
  std::ifstream in(log, std::ios::binary);
  if (!in) return "";
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg(), from = std::max<std::streamoff>(0, size - 65536);
  in.seekg(from);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::istringstream lines(text);
  std::string outside, inside;
  bool in_notice = false;
  for (std::string line; std::getline(lines, line);) {
    const size_t cr = line.find_last_of('\r');  // a progress bar's last frame
    if (cr != std::string::npos) line = line.substr(cr + 1);
    const size_t b = line.find_first_not_of(" \t");
    if (b == std::string::npos) continue;
    if (line.size() >= 10 && line.find_first_not_of('-') == std::string::npos) {
      in_notice = !in_notice;
      continue;
    }
    (in_notice ? inside : outside) = line.substr(b);
  }
  const std::string& last = outside.empty() ? inside : outside;
  return last.size() > 400 ? last.substr(0, 400) + "..." : last;
}

struct Outcome {
  std::string status = "RUNNING", error;
  json exit_code = nullptr;
  double seconds = 0;
  int64_t started_ms = 0;
};

void write_record(const fs::path& dir, const PointRun& p, const std::vector<std::string>& cmd, const Outcome& o) {
  json options(p.options);
  options["save-dir"] = dir.string();
  const json rec = {{"name", p.name},       {"block", p.point.block}, {"options", options},
                    {"ranks", p.point.ranks}, {"command", cmd},       {"status", o.status},
                    {"exit_code", o.exit_code}, {"error", o.error},   {"seconds", o.seconds},
                    {"started_unix_ms", o.started_ms}};
  const std::string text = rec.dump(2) + "\n";
  write_file_atomic((dir / "sweep_point.json").string(),
                    {reinterpret_cast<const uint8_t*>(text.data()), text.size()});
}

// The child: its own process group (so the terminal's Ctrl-C reaches the sweep, which stops
// the point itself), output into the log, then exec.
[[noreturn]] void exec_point(const std::vector<std::string>& cmd, const fs::path& log) {
  setpgid(0, 0);
  const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int null = open("/dev/null", O_RDONLY);
  if (fd < 0 || null < 0) _exit(127);
  dup2(null, 0);
  dup2(fd, 1);
  dup2(fd, 2);
  if (geteuid() == 0) {  // OpenMPI refuses root without these (containers, CI)
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  }
  std::vector<char*> argv;
  for (const std::string& a : cmd) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  const std::string msg = "recommend sweep: cannot run " + cmd[0] + ": " + std::strerror(errno) + "\n";
  (void)!write(2, msg.data(), msg.size());
  _exit(127);
}

// SIGTERM to the point's process group (mpiexec passes it to the ranks), SIGKILL after 10 s.
int stop_group(pid_t pid) {
  kill(-pid, SIGTERM);
  int status = 0;
  for (int i = 0; i < 100; ++i) {
    if (waitpid(pid, &status, WNOHANG) == pid) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  kill(-pid, SIGKILL);
  waitpid(pid, &status, 0);
  return status;
}

using Clock = std::chrono::steady_clock;

// Runs the point's command to its end (or the timeout, or a stop signal) and says how it went.
Outcome run_command(const Settings& s, const std::vector<std::string>& cmd, const fs::path& dir, Outcome o) {
  const auto t0 = Clock::now();
  const pid_t pid = fork();
  CHECK(pid >= 0, "fork: ", std::strerror(errno));
  if (pid == 0) exec_point(cmd, dir / "train.log");
  setpgid(pid, pid);
  int status = 0;
  std::string why;
  for (;;) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
    if (g_stop) why = "interrupted";
    else if (s.timeout > 0 && elapsed > s.timeout) why = "timed out after " + std::to_string(int(s.timeout)) + " s";
    if (!why.empty()) {
      status = stop_group(pid);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  o.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  const std::string last = last_log_line(dir / "train.log");
  if (why == "interrupted") o.error = why;
  else if (!why.empty()) o.error = why + (last.empty() ? "" : ": " + last);
  else if (WIFSIGNALED(status)) o.error = "killed by signal " + std::to_string(WTERMSIG(status)) + ": " + last;
  else if (WEXITSTATUS(status) != 0) o.error = "exit code " + std::to_string(WEXITSTATUS(status)) + ": " + last;
  else if (!summary_finished(dir)) o.error = "exit code 0 but no FINISHED summary.json: " + last;
  o.status = o.error.empty() ? "FINISHED" : "FAILED";
  return o;
}

// A point's run directory is cleared before a (re)run, but only when it is the sweep's own: a
// folder of something else at that path is left alone and the point fails.
void prepare_dir(const fs::path& dir) {
  if (fs::exists(dir)) {
    CHECK(fs::is_directory(dir) && (fs::exists(dir / "sweep_point.json") || fs::is_empty(dir)), dir.string(),
          " exists and is not a sweep point's run directory; move it away");
    fs::remove_all(dir);
  }
  fs::create_directories(dir);
}

struct Row {
  std::string name, status;
  double seconds = 0;
};

// Runs one point (its record RUNNING, then FINISHED or FAILED) and returns its table row.
Row run_point(const Settings& s, const PointRun& p, const std::string& tag) {
  const fs::path dir = fs::path(s.out) / p.name;
  const std::vector<std::string> cmd = point_command(s, p, dir.string());
  std::cout << tag << p.name << ": " << show_command(cmd) << std::endl;
  try {
    prepare_dir(dir);
  } catch (const Error& e) {
    std::cout << tag << p.name << ": FAILED: " << e.message() << std::endl;
    return {p.name, "FAILED", 0};
  }
  Outcome o;
  o.started_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                     std::chrono::system_clock::now().time_since_epoch()).count();
  write_record(dir, p, cmd, o);
  if (p.point.ranks > 1 && split_words(s.mpiexec).empty()) {
    o.status = "FAILED";
    o.error = "ranks " + std::to_string(p.point.ranks) + " needs a launcher (--mpiexec is empty)";
  } else {
    o = run_command(s, cmd, dir, o);
  }
  write_record(dir, p, cmd, o);
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.1f", o.seconds);
  std::cout << tag << p.name << ": " << o.status << " in " << secs << " s"
            << (o.error.empty() ? "" : ": " + o.error) << std::endl;
  return {p.name, o.status, o.seconds};
}

// The table at the end: every point of this invocation with what its run directory holds.
void print_table(const Settings& s, const std::vector<Row>& rows) {
  size_t w = 4;
  for (const Row& r : rows) w = std::max(w, r.name.size());
  std::printf("\n%-*s  %-8s  %8s  %9s  %6s\n", int(w), "name", "status", "seconds", "images/s", "top-1");
  for (const Row& r : rows) {
    double ips = 0, top1 = -1;
    try {
      const RunRecord rec = load_run((fs::path(s.out) / r.name).string());
      ips = rec.images_per_s;
      top1 = rec.final_top1();
    } catch (const Error&) {
    }
    char ips_s[32] = "-", top_s[32] = "-";
    if (ips > 0) std::snprintf(ips_s, sizeof ips_s, "%.0f", ips);
    if (top1 >= 0) std::snprintf(top_s, sizeof top_s, "%.2f%%", 100 * top1);
    std::printf("%-*s  %-8s  %8.1f  %9s  %6s\n", int(w), r.name.c_str(), r.status.c_str(), r.seconds, ips_s, top_s);
  }
}

std::vector<PointRun> select_points(const Settings& s, std::vector<PointRun> plans) {
  if (s.only.empty()) return plans;
  std::vector<PointRun> out;
  for (PointRun& p : plans)
    if (std::find(s.only.begin(), s.only.end(), p.name) != s.only.end() ||
        std::find(s.only.begin(), s.only.end(), p.point.block) != s.only.end())
      out.push_back(std::move(p));
  if (out.empty()) throw UsageError{"--only: no point or [block] of the grid is named " + s.only.front()};
  return out;
}

void dry_run(const Settings& s, const std::vector<PointRun>& plans) {
  size_t done = 0;
  for (const PointRun& p : plans) {
    const fs::path dir = fs::path(s.out) / p.name;
    const bool d = point_done(dir);
    done += d;
    std::cout << p.name << (d ? "  [done: skipped]" : "") << "\n  " << show_command(point_command(s, p, dir.string()))
              << "\n";
  }
  std::cout << "sweep: " << plans.size() << " points, " << done << " already done (dry run: nothing run)"
            << std::endl;
}

int run_sweep(const Settings& s, const std::vector<PointRun>& plans) {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  fs::create_directories(s.out);
  std::vector<Row> rows;
  size_t finished = 0, skipped = 0, failed = 0;
  for (size_t i = 0; i < plans.size() && !g_stop; ++i) {
    const std::string tag = "[" + std::to_string(i + 1) + "/" + std::to_string(plans.size()) + "] ";
    const fs::path dir = fs::path(s.out) / plans[i].name;
    if (point_done(dir)) {
      const json rec = read_json_or_null(dir / "sweep_point.json");
      rows.push_back({plans[i].name, "skipped", rec.value("seconds", 0.0)});
      ++skipped;
      std::cout << tag << plans[i].name << ": already finished, skipped" << std::endl;
      continue;
    }
    rows.push_back(run_point(s, plans[i], tag));
    (rows.back().status == "FINISHED" ? finished : failed) += 1;
  }
  print_table(s, rows);
  if (g_stop) std::cout << "sweep: stopped by signal " << int(g_stop) << " after " << rows.size() << " of "
                        << plans.size() << " points\n";
  std::cout << "sweep: " << finished << " finished, " << skipped << " skipped (already done), " << failed
            << " failed" << std::endl;
  return failed > 0 || g_stop ? 1 : 0;
}

}  // namespace

}  // namespace mpicnn::recommend::sweep

namespace mpicnn::recommend {

int sweep_main(int argc, char** argv) {
  using namespace sweep;
  try {
    bool help = false;
    const Settings s = parse_settings(argc, argv, help);
    if (help) return 0;
    const std::vector<PointRun> plans = select_points(s, prepare_points(read_grid(s.grid)));
    if (s.dry_run) {
      dry_run(s, plans);
      return 0;
    }
    if (access(s.train.c_str(), X_OK) != 0) throw UsageError{"--train: " + s.train + " is not an executable"};
    return run_sweep(s, plans);
  } catch (const UsageError& e) {
    std::cerr << "recommend sweep: " << e.message << std::endl;
    return 2;
  } catch (const GridError& e) {
    std::cerr << "recommend sweep: " << e.message << std::endl;
    return 2;
  }
}

}  // namespace mpicnn::recommend
