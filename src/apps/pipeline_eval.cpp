// ./pipeline_eval: evaluates a trained model with the read -> decode+resize -> normalize -> predict
// stages spread over the ranks of `mpiexec -n K ./pipeline_eval ...` (also runs alone). Thin
// main: options (eval/options.h), the run (eval/evaluate.h), the report (eval/report.h).
#include <iostream>

#include "dist/asan_options.h"
#include "dist/comm.h"
#include "dist/watchdog.h"
#include "eval/evaluate.h"
#include "eval/options.h"
#include "eval/report.h"

using namespace mpicnn;

// A failure on this rank alone. With one rank there is no job to abort: print the one line and
// return (MPI_Abort would add OpenMPI's multi-line notice after it); with more ranks, abort the
// job so that no rank waits forever in a collective.
static int fail_rank(const dist::Comm& comm, const std::string& message) {
  if (comm.size() > 1) comm.fail_job(message);
  std::cout.flush();
  std::cerr << message << std::endl;
  return 1;
}

int main(int argc, char** argv) {
  dist::Comm comm(&argc, &argv);
  const std::vector<std::string> args(argv + 1, argv + argc);
  try {
    // Every rank gets the same command line; rank 0's verdict on it is everyone's.
    eval::EvalOptions options;
    comm.on_root([&] { options = eval::parse_eval_options(args); });
    if (!comm.root()) options = eval::parse_eval_options(args);
    if (options.help) {
      if (comm.root()) std::cout << eval::eval_help();
      return 0;
    }
    // --timeout: a rank stuck waiting on another ends the job (dist/watchdog.h).
    const auto watchdog = dist::Watchdog::start(options.timeout, comm.rank(), comm.host());
    const eval::Report report = eval::run_evaluation(options, comm);
    comm.on_root([&] {
      std::cout << (options.json ? eval::report_json(report) + "\n" : eval::format_report(report)) << std::flush;
      eval::write_outputs(options, report);
    });
    return 0;
  } catch (const dist::SharedError& e) {  // every rank has it: report once, exit normally
    if (comm.root()) std::cerr << "pipeline_eval: " << e.message() << std::endl;
    return 1;
  } catch (const Error& e) {  // this rank alone: the others may be inside a collective
    return fail_rank(comm, "pipeline_eval: " + e.message());
  } catch (const std::exception& e) {
    return fail_rank(comm, std::string("pipeline_eval: ") + e.what());
  }
}
