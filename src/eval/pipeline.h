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
// A detection setup runs the same loop with the detector's stages (eval/detect_stages.h).
// Not the stage work itself (eval/setup.h) and not the report (eval/report.h).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/detection.h"
#include "dist/comm.h"
#include "eval/detect_stages.h"
#include "eval/layout.h"
#include "eval/setup.h"
#include "eval/report.h"

namespace mpicnn::eval {


struct PipelineOptions {
  int credits = 128;       // samples in flight from a rank to each of the next stage's (read..normalize)
  int batch_credits = 2;   // batches in flight from a batching rank to each predicting rank
  bool skip_bad = false;   // skip samples that cannot be read or decoded (reported) instead of failing
  std::optional<Layout> layout;  // which ranks run which stages; none: layout_for(the job's ranks)
};

// What one run measured, complete on rank 0 (the other ranks return their own stage times).
struct RunOutput {
  std::vector<Prediction> predictions;  // sorted by index
  std::vector<ImageDetections> detections;  // detection plans: per image, sorted by index
  std::vector<Skipped> skipped;         // sorted by index
  std::vector<double> latency_s;        // per prediction of a sample rank 0 read (its own clock)
  std::vector<StageTime> stages;        // every rank's, by rank then stage
  double wall_s = 0;
};

// Collective: the staged run over all ranks of `comm`. `dataset` is used on the reading ranks
// only (it may be null elsewhere); `predictor` on the predicting ranks only. Errors are SharedError on
// every rank, with the failing rank's message ("rank 1 (decode+resize): photos/x.jpg: ...").
RunOutput run_pipeline(const EvalSetup& setup, const data::Dataset* dataset, Predictor* predictor,
                       const dist::Comm& comm, const PipelineOptions& options);

// The same stages one after the other in this process alone (no MPI): the baseline.
RunOutput run_sequential(const EvalSetup& setup, const data::Dataset& dataset, Predictor& predictor,
                         const PipelineOptions& options);

// The same two for a detection setup: `set` on the reading ranks, the detector on the predicting ranks.
RunOutput run_pipeline(const EvalSetup& setup, const data::DetectionSet* set, DetectionPredictor* detector,
                       const dist::Comm& comm, const PipelineOptions& options);
RunOutput run_sequential(const EvalSetup& setup, const data::DetectionSet& set, DetectionPredictor& detector,
                         const PipelineOptions& options);

}  // namespace mpicnn::eval
