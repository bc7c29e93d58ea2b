// ./train: data-parallel training over the ranks of `mpiexec -n K ./train [options]` (also
// runs alone as one rank). Thin main: options (train/options.h), the loop (train/trainer.h).
#include <iostream>
#include <nlohmann/json.hpp>

#include "dist/asan_options.h"
#include "dist/comm.h"
#include "dist/watchdog.h"
#include "io/checkpoint.h"
#include "train/options.h"
#include "train/trainer.h"

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
  // First: a scheduler's stop signal during start-up (MPI init, reading data) must become a
  // checkpoint-and-stop at the first step, not SIGUSR1's default action (terminate).
  install_stop_signals();
  dist::Comm comm(&argc, &argv);
  const std::vector<std::string> args(argv + 1, argv + argc);
  try {
    // Rank 0 parses (it alone reads --config and --resume files) and hands every rank the
    // effective options, so all ranks run the same configuration.
    train::TrainOptions options;
    std::string shared;
    comm.on_root([&] {
      options = train::parse_train_options(args);
      if (!options.help && !options.resume.empty()) options = train::resume_options(args);
      shared = nlohmann::json{{"help", options.help}, {"config", train::to_config(options)}}.dump();
    });
    comm.broadcast(shared);
    const nlohmann::json j = nlohmann::json::parse(shared);
    if (j["help"].get<bool>()) {
      if (comm.root()) std::cout << train::train_help();
      return 0;
    }
    if (!comm.root()) {
      std::vector<std::string> flags;
      for (const auto& [k, v] : j["config"].items()) flags.push_back("--" + k + "=" + v.get<std::string>());
      options = train::parse_train_options(flags);
    }
    // --timeout: a rank stuck waiting on another ends the job (dist/watchdog.h).
    const auto watchdog = dist::Watchdog::start(options.timeout, comm.rank(), comm.host());
    train::run_training(options, comm, std::cout);
    return 0;
  } catch (const dist::SharedError& e) {  // every rank has it: report once, exit normally
    if (comm.root()) std::cerr << "train: " << e.message() << std::endl;
    return 1;
  } catch (const Error& e) {  // this rank alone: the others may be inside a collective
    return fail_rank(comm, "train: " + e.message());
  } catch (const std::exception& e) {
    return fail_rank(comm, std::string("train: ") + e.what());
  }
}
