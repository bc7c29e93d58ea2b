// The stages of ./pipeline_eval spread over the ranks as a Layout says (eval/layout.h: each
// stage on a range of ranks, by default rank 0 reads, rank 1 decodes and resizes, rank 2
// normalizes and batches, ranks 3..K-1 predict), and the per-rank loop that moves samples
// between them. Rank 0 also collects the predictions. Samples go to the next stage's ranks by
// block of batch-size samples, so each block becomes the sequential run's batch wherever it ran;
// batches go to whichever predictor has room. Flow control by credits: a rank sends only while
// its receiver has granted room (samples between the first three stages, batches per
// predictor), so a slow stage holds the others back instead of filling memory. Each rank sends
// an end-of-stream item after its last sample to every rank of the next stage, which passes it
// on once it has one from each of its senders; any rank's error reaches all ranks, and every
// rank ends with the same SharedError.
// The work of each stage is the task's (eval/task.h): the loop is the same for every task.
// Not the stage work itself and not the report (eval/report.h).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "dist/comm.h"
#include "eval/layout.h"
#include "eval/setup.h"
#include "eval/task.h"

namespace mpicnn::eval {

struct PipelineOptions {
  int credits = 128;       // samples in flight from a rank to each of the next stage's (read..normalize)
  int batch_credits = 2;   // batches in flight from a batching rank to each predicting rank
  bool skip_bad = false;   // skip samples that cannot be read or decoded (reported) instead of failing
  std::optional<Layout> layout;  // which ranks run which stages; none: layout_for(the job's ranks)
};

// Collective: the staged run over all ranks of `comm`, for `count` and `batch_size` of
// `setup` (the task's own setup, or fewer samples of it). The task's data is read on the reading
// ranks only (EvalTask::has_data there); `predictor` is used on the predicting ranks only (it may
// be null elsewhere). Errors are SharedError on every rank, with the failing rank's message
// ("rank 1 (decode+resize): photos/x.jpg: ...").
RunOutput run_pipeline(const EvalSetup& setup, const EvalTask& task, Predictor* predictor,
                       const dist::Comm& comm, const PipelineOptions& options);

// The same stages one after the other in this process alone (no MPI): the baseline.
RunOutput run_sequential(const EvalSetup& setup, const EvalTask& task, Predictor& predictor,
                         const PipelineOptions& options);

}  // namespace mpicnn::eval
