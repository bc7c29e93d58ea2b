// A doctest listener that appends each test case's wall time and CPU time to the file named by
// MPICNN_TEST_TIMES ("wall<TAB>cpu<TAB>name" lines, in seconds; nothing when unset), without
// changing what the console reporter prints. The CPU time is this process's and its waited-for
// children's (the programs a case runs), all threads: a case whose CPU time is far below its
// wall time mostly waits. tests/run_all.sh sets it per suite and prints the slowest cases at
// the end. Included once per test binary, in the file that implements doctest's main.
#pragma once
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <doctest/doctest.h>

namespace mpicnn::testing {

class CaseTimes : public doctest::IReporter {
 public:
  explicit CaseTimes(const doctest::ContextOptions&) {}
  void test_case_start(const doctest::TestCaseData& tc) override {
    name_ = tc.m_name;
    cpu0_ = cpu_s();
  }
  void test_case_end(const doctest::CurrentTestCaseStats& st) override {
    const char* path = std::getenv("MPICNN_TEST_TIMES");
    if (path == nullptr || *path == '\0') return;
    char line[64];
    const int n = std::snprintf(line, sizeof line, "%.3f\t%.3f\t", st.seconds, cpu_s() - cpu0_);
    const std::string text = std::string(line, size_t(n)) + name_ + "\n";
    // One O_APPEND write per case: ranks of an MPI test appending to one file never interleave.
    const int fd = ::open(path, O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd < 0) return;
    const ssize_t wrote = ::write(fd, text.data(), text.size());
    (void)wrote;  // timing is a report, never a reason to fail a test
    ::close(fd);
  }
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}

 private:
  // User + system seconds of this process and of its children that have been waited for.
  static double cpu_s() {
    double s = 0;
    for (const int who : {RUSAGE_SELF, RUSAGE_CHILDREN}) {
      rusage u{};
      if (getrusage(who, &u) != 0) continue;
      s += double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
    }
    return s;
  }
  std::string name_;
  double cpu0_ = 0;
};

REGISTER_LISTENER("case_times", 1, CaseTimes);

}  // namespace mpicnn::testing
