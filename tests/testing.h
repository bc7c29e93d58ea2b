// Test helpers: conversions between float tensors and double reference vectors, seeded
// random tensors, closeness checks, and the finite-difference gradient checker.
//
// The gradient check runs central differences in double precision on the *naive reference*
// forward (a plain loop written in the test, in double), and compares the result with the
// fast float backward. Together with the forward check (fast forward == reference forward),
// this proves the fast backward is the derivative of what the layer computes.
//
// Include this header after engine headers: it replaces the engine's CHECK and FAIL with
// doctest's (the engine's stay available as MPICNN_CHECK and MPICNN_FAIL).
#pragma once
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "core/common_flags.h"
#include "core/device.h"
#include "core/exec.h"
#include "core/rng.h"
#include "core/tensor.h"

#undef CHECK
#undef FAIL
#include <doctest/doctest.h>

namespace mpicnn::testing {

// The execution config tests plan with (core/exec.h): the CPU, fp32, a training plan, with the
// environment's overrides applied once (core/device.h's exec_overrides: `MPICNN_CONV_ISA=avx2
// make test` runs every test on the AVX2 kernels, `MPICNN_BF16=emulated` every bf16 one on the
// emulated kernels). A test that needs another precision or plan copies it and changes that.
inline const ExecConfig& exec() {
  static const ExecConfig c = exec_overrides(ExecConfig{});
  return c;
}
inline ExecConfig exec_in(Precision p) {
  ExecConfig c = exec();
  c.precision = p;
  return c;
}

// For a case that cannot run here and returns early: prints "SKIP: what: why", which
// tests/run_all.sh counts as skipped rather than passed (tests/README.md lists, per CPU kind,
// which cases skip and why).
inline void skip_case(const std::string& what, const std::string& why) {
  std::printf("SKIP: %s: %s\n", what.c_str(), why.c_str());
  std::fflush(stdout);
}

// A fresh directory under the system temp dir ($TMPDIR), removed with everything in it.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "mpicnn_test_XXXXXX").string();
    REQUIRE_MESSAGE(::mkdtemp(tmpl.data()) != nullptr, "cannot create a directory like ", tmpl);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

// ---- running the programs (data tools, apps) ------------------------------------------------

// Programs sit next to the test binary's folder: build/<variant>/tests/unit_tests and
// build/<variant>/bin/<name>.
inline std::string program_path(const std::string& name) {
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe");
  const std::filesystem::path bin = exe.parent_path().parent_path() / "bin" / name;
  REQUIRE_MESSAGE(std::filesystem::is_regular_file(bin), "program not found: looked for ",
                  bin.string(), " (make tools apps builds it)");
  return bin.string();
}

inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

struct RunResult {
  int rc = -1;
  std::string output;  // stdout and stderr together
};

// Runs build/<variant>/bin/<name> with args after `env` (assignments such as "OMPI_X=1 ", or a
// launcher such as "mpiexec -n 2 "), waits for it.
inline RunResult run_program(const std::string& name, const std::vector<std::string>& args,
                             const std::string& env = "") {
  std::string cmd = env + shell_quote(program_path(name));
  for (const std::string& a : args) cmd.append(" ").append(shell_quote(a));
  cmd += " 2>&1";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  REQUIRE_MESSAGE(pipe != nullptr, "cannot run ", cmd);
  RunResult r;
  char buf[4096];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof buf, pipe)) > 0) r.output.append(buf, got);
  const int status = ::pclose(pipe);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  return r;
}

// The same under `mpiexec -q -n K --oversubscribe` (OpenMPI, allowed as root; -q leaves out
// its own box of text about non-zero exit codes, so a failing job shows the program's line only).
inline RunResult run_mpi(int ranks, const std::string& name, const std::vector<std::string>& args) {
  return run_program(name, args,
                     "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 300 mpiexec -q -n " +
                         std::to_string(ranks) + " --oversubscribe ");
}

// A failing run: non-zero exit, exactly one line "<name>: ..." that contains `part`.
inline void expect_cli_error(const std::string& name, const std::vector<std::string>& args,
                             const std::string& part) {
  std::string shown = name;
  for (const std::string& a : args) shown += " " + a;
  const RunResult r = run_program(name, args);
  CHECK_MESSAGE(r.rc != 0, shown, ": exit code 0, output: ", r.output);
  CHECK_MESSAGE(std::count(r.output.begin(), r.output.end(), '\n') == 1, shown,
                ": expected one line, got: ", r.output);
  CHECK_MESSAGE(r.output.starts_with(name + ": "), shown, ": line does not start with the name: ", r.output);
  CHECK_MESSAGE(r.output.find(part) != std::string::npos, shown, ": '", r.output, "' does not say '", part, "'");
}

using Vec = std::vector<double>;

inline Vec to_double(const Tensor& t) {
  Vec v(size_t(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[size_t(i)] = t.data()[i];
  return v;
}

inline void from_double(Tensor& t, const Vec& v) {
  REQUIRE(int64_t(v.size()) == t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = float(v[size_t(i)]);
}

// Deterministic uniform values in [lo, hi).
inline void fill_uniform(Tensor& t, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  Rng rng(seed, 7);
  for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = rng.uniform(uint64_t(i), lo, hi);
}

inline Tensor random_tensor(const Shape& s, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  Tensor t = Tensor::empty(s);
  fill_uniform(t, seed, lo, hi);
  return t;
}

inline double max_abs(const Vec& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// Every element: |got - want| <= atol + rtol * |want|, with atol = atol_frac * max|want|.
// Reports the worst element on failure.
inline void expect_close(const std::string& what, const Tensor& got, const Vec& want,
                         double rtol = 1e-4, double atol_frac = 1e-5) {
  REQUIRE_MESSAGE(int64_t(want.size()) == got.numel(), what, ": size ", got.numel(), " vs ",
                  want.size());
  double atol = atol_frac * std::max(max_abs(want), 1e-30);
  int64_t worst = -1;
  double worst_excess = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    double err = std::fabs(double(got.data()[i]) - want[size_t(i)]);
    double excess = err - (atol + rtol * std::fabs(want[size_t(i)]));
    if (!(excess <= worst_excess)) worst_excess = excess, worst = i;  // NaN counts as worst
  }
  if (worst >= 0)
    FAIL_CHECK(what, ": element ", worst, " is ", got.data()[worst], ", expected ",
               want[size_t(worst)], " (rtol ", rtol, ", atol ", atol, ")");
  else
    CHECK(true);
}

struct GradCheckOptions {
  double h = 1e-5;          // central-difference step (in double)
  int max_checks = 200;     // entries checked per tensor (all when smaller)
  double rtol = 2e-3;       // per-entry tolerance relative to the entry
  double atol_frac = 2e-4;  // plus this fraction of the largest |gradient|
  double kink_tol = 1e-3;   // |forward diff - backward diff| above this (relative): a kink
  double max_kink_fraction = 0.25;
};

// Checks `analytic` (float, from the fast backward) against central differences of `f`
// (a double-precision reference objective) at `x0`. `f` may perturb its argument only
// through the vector it is given. Entries at a kink of `f` (one-sided differences disagree)
// are skipped; too many skipped entries fail the check (the test would prove nothing).
inline void check_gradient(const std::string& what, const Tensor& analytic,
                           const std::function<double(const Vec&)>& f, const Vec& x0,
                           const GradCheckOptions& opt = {}) {
  REQUIRE_MESSAGE(int64_t(x0.size()) == analytic.numel(), what, ": gradient size mismatch");
  const int64_t n = analytic.numel();
  std::vector<int64_t> idx;
  if (n <= opt.max_checks) {
    for (int64_t i = 0; i < n; ++i) idx.push_back(i);
  } else {
    Rng rng(12345, stream_id(what));
    for (int k = 0; k < opt.max_checks; ++k) idx.push_back(int64_t(rng.below(uint64_t(k), uint64_t(n))));
  }
  Vec x = x0;
  const double f0 = f(x);
  Vec ga, gf;
  int kinks = 0;
  for (int64_t i : idx) {
    double xi = x[size_t(i)];
    x[size_t(i)] = xi + opt.h;
    double fp = f(x);
    x[size_t(i)] = xi - opt.h;
    double fm = f(x);
    x[size_t(i)] = xi;
    double central = (fp - fm) / (2 * opt.h);
    double fwd = (fp - f0) / opt.h, bwd = (f0 - fm) / opt.h;
    if (std::fabs(fwd - bwd) > opt.kink_tol * (1.0 + std::fabs(central))) {
      ++kinks;
      continue;
    }
    ga.push_back(analytic.data()[i]);
    gf.push_back(central);
  }
  CHECK_MESSAGE(kinks <= opt.max_kink_fraction * double(idx.size()), what, ": ", kinks, " of ",
                idx.size(), " entries sit on kinks");
  REQUIRE_MESSAGE(!gf.empty(), what, ": no entry could be checked");
  double atol = opt.atol_frac * std::max(max_abs(gf), 1e-12);
  size_t worst = 0;
  double worst_excess = -1e300;
  for (size_t k = 0; k < gf.size(); ++k) {
    double excess = std::fabs(ga[k] - gf[k]) - (atol + opt.rtol * std::fabs(gf[k]));
    if (!(excess <= worst_excess)) worst_excess = excess, worst = k;
  }
  CHECK_MESSAGE(worst_excess <= 0, what, ": analytic ", ga[worst], " vs numeric ", gf[worst],
                " (", gf.size(), " entries checked, ", kinks, " kinks skipped)");
}

// Weighted-sum objective used to turn a tensor output into a scalar: L = sum_i w_i * y_i.
inline double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Slice of a double vector (for splitting a flat argument into input and parameters).
inline Vec part(const Vec& x, size_t begin, size_t count) {
  return Vec(x.begin() + long(begin), x.begin() + long(begin + count));
}

// The repository the test binary was built in: the nearest folder above it that holds
// tests/python (build/<variant>[/cuda]/tests/unit_tests). Found at run time rather than compiled
// in, so that no compile line names the clone's folder and ccache reuses objects across clones.
inline std::string source_dir() {
  namespace fs = std::filesystem;
  static const std::string dir = [] {
    for (fs::path p = fs::read_symlink("/proc/self/exe").parent_path();; p = p.parent_path()) {
      if (fs::is_directory(p / "tests" / "python")) return p.string();
      if (p == p.root_path()) return std::string();
    }
  }();
  REQUIRE_MESSAGE(!dir.empty(), "no folder above ", fs::read_symlink("/proc/self/exe").string(),
                  " holds tests/python (the test binary must stay in its build folder)");
  return dir;
}

// The length of the longest line of `text` (help texts must fit a 100-column terminal).
inline size_t longest_line(const std::string& text) {
  size_t start = 0, longest = 0;
  for (size_t end; (end = text.find('\n', start)) != std::string::npos; start = end + 1)
    longest = std::max(longest, end - start);
  return std::max(longest, text.size() - start);
}

// `help` (a program's --help) holds the one help text of each flag ./train and ./pipeline_eval
// share (core/common_flags.h), as written: wrapping aside, each run of spaces is one space.
inline void expect_shared_flag_help(const std::string& help) {
  std::string text;
  for (size_t i = 0; i < help.size(); ++i) {
    const bool space = help[i] == ' ' || help[i] == '\n';
    if (!space) text += help[i];
    else if (!text.empty() && text.back() != ' ') text += ' ';
  }
  namespace common = mpicnn::cli::common;
  for (const std::string& shared :
       {common::data().def.help, common::skip_bad().def.help, common::threads().def.help,
        common::timeout().def.help, common::device().def.help, common::mean().def.help,
        common::stddev().def.help})
    CHECK_MESSAGE(text.find(shared) != std::string::npos, "help does not say: ", shared);
}

// Runs tests/python/SCRIPT with ARGS (already shell-quoted) under $PYTHON (default
// /usr/bin/python3: it has torch); a non-zero exit fails the test.
inline void run_python(const std::string& script, const std::string& args) {
  const char* py = std::getenv("PYTHON");
  const std::string cmd = shell_quote(py && *py ? py : "/usr/bin/python3") + " " +
                          shell_quote(source_dir() + "/" + (script.find('/') == std::string::npos ? "tests/python/" : "") + script) +
                          " " + args;
  const int status = std::system(cmd.c_str());
  REQUIRE_MESSAGE((status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0), script, " failed (status ",
                  status, "): ", cmd);
}

// The standard output of tests/python/SCRIPT with ARGS (already shell-quoted) under $PYTHON;
// a non-zero exit fails the test.
inline std::string python_output(const std::string& script, const std::string& args) {
  const char* py = std::getenv("PYTHON");
  const std::string cmd = shell_quote(py && *py ? py : "/usr/bin/python3") + " " +
                          shell_quote(source_dir() + "/tests/python/" + script) + " " + args;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  REQUIRE_MESSAGE(pipe != nullptr, "cannot run ", cmd);
  std::string text;
  char buf[4096];
  for (size_t got; (got = std::fread(buf, 1, sizeof buf, pipe)) > 0;) text.append(buf, got);
  const int status = ::pclose(pipe);
  REQUIRE_MESSAGE((WIFEXITED(status) && WEXITSTATUS(status) == 0), script, " failed (PYTHON without torch?): ", cmd);
  return text;
}

// `f` must throw mpicnn::Error whose message contains `part`.
template <class F>
void expect_error(F&& f, const std::string& part) {
  try {
    f();
    FAIL_CHECK("no error; expected one saying: ", part);
  } catch (const Error& e) {
    CHECK_MESSAGE(e.message().find(part) != std::string::npos, "error '", e.message(),
                  "' does not say '", part, "'");
  }
}

}  // namespace mpicnn::testing
