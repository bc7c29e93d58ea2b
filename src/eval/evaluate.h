// ./pipeline_eval from parsed options to the report: rank 0 makes the setup and shares it, the
// predicting ranks load the model, then the staged run (or the sequential baseline, or both with
// --compare), and rank 0 assembles the report and writes the output files. Not option parsing
// (eval/options.h) and not the stage loop (eval/pipeline.h).
#pragma once
#include <sched.h>

#include <vector>

#include "dist/comm.h"
#include "eval/options.h"
#include "eval/report.h"

namespace mpicnn::eval {

// Collective. Returns the complete report on rank 0 (others get theirs without predictions).
// Every error, wherever it happens, is a dist::SharedError on every rank with one line naming
// the flag, file or sample (and the failing rank when it was not 0).
Report run_evaluation(const EvalOptions& options, const dist::Comm& comm);

// For the sequential baseline (--compare, --sequential): this process, every thread of it, may
// run on `cpu_ids` (Comm::node_cpu_ids: the CPUs the job's ranks on this node may use, where
// mpiexec may have bound rank 0 to one core) until the end of the scope, then on its own
// binding again. When a thread refuses, nothing changes.
class NodeWideAffinity {
 public:
  explicit NodeWideAffinity(const std::vector<int>& cpu_ids);
  ~NodeWideAffinity();
  NodeWideAffinity(const NodeWideAffinity&) = delete;
  NodeWideAffinity& operator=(const NodeWideAffinity&) = delete;
  // The CPUs this process may run on now (the calling thread's mask).
  static int cpus();

 private:
  cpu_set_t own_;
  bool widened_ = false;
};

// Rank 0: creates options.output if missing and checks that it can be written to (an Error
// naming it otherwise); run_evaluation calls it first. Nothing when output is empty.
void prepare_output(const EvalOptions& options);

// Rank 0: predictions.csv and report.json into options.output (created if missing), each
// written atomically. Nothing when output is empty.
void write_outputs(const EvalOptions& options, const Report& report);

}  // namespace mpicnn::eval
