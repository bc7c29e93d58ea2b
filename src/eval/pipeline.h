// The stages of ./pipeline_eval spread over the ranks: which rank runs which stage, and the
// per-rank loop that moves samples between them. Rank 0 reads (and collects the predictions),
// rank 1 decodes and resizes, rank 2 normalizes and batches, ranks 3..K-1 predict (batches go to
// whichever predictor has room); fewer ranks fold stages together, one rank runs them all.
// Flow control by credits: a stage sends only while its receiver has granted room (samples
// between the first three stages, batches per predictor), so a slow stage holds the others
// back instead of filling memory. An end-of-stream item follows the last sample through every
// stage; any rank's error reaches all ranks, and every rank ends with the same SharedError.
// A detection setup runs the same loop with the detector's stages (eval/detect_stages.h).
// Not the stage work itself (eval/setup.h) and not the report (eval/report.h).
#pragma once
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/detection.h"
#include "dist/comm.h"
#include "eval/detect_stages.h"
#include "eval/setup.h"
#include "eval/report.h"

namespace mpicnn::eval {

enum Stage : int { kRead = 0, kDecode = 1, kNormalize = 2, kPredict = 3 };
const char* stage_name(int stage);  // "read", "decode+resize", "normalize+batch", "predict"

// Stage ranges per rank for a job of `ranks` ranks: K >= 4: 0 read | 1 decode | 2 normalize |
// 3.. predict; K = 3: 0 read | 1 decode+normalize | 2 predict; K = 2: 0 read..normalize |
// 1 predict; K = 1: 0 everything.
struct Layout {
  int ranks = 1;
  int first(int rank) const;  // the first stage rank runs
  int last(int rank) const;   // the last stage rank runs (== first unless stages are folded)
  int rank_of(int stage) const;  // the (first) rank running the stage
  std::vector<int> ranks_of(int stage) const;
  std::string describe() const;  // "rank 0: read | rank 1: decode+resize | ranks 3-5: predict"
};
Layout layout_for(int ranks);

struct PipelineOptions {
  int credits = 128;       // samples in flight between read, decode and normalize
  int batch_credits = 2;   // batches in flight per predicting rank
  bool skip_bad = false;   // skip samples that cannot be read or decoded (reported) instead of failing
};

// What one run measured, complete on rank 0 (the other ranks return their own stage times).
struct RunOutput {
  std::vector<Prediction> predictions;  // sorted by index
  std::vector<ImageDetections> detections;  // detection plans: per image, sorted by index
  std::vector<Skipped> skipped;         // sorted by index
  std::vector<double> latency_s;        // per prediction
  std::vector<StageTime> stages;        // every rank's, by rank then stage
  double wall_s = 0;
};

// Collective: the staged run over all ranks of `comm`. `dataset` is used on rank 0 only (it
// may be null elsewhere); `predictor` on the predicting ranks only. Errors are SharedError on
// every rank, with the failing rank's message ("rank 1 (decode+resize): photos/x.jpg: ...").
RunOutput run_pipeline(const EvalSetup& setup, const data::Dataset* dataset, Predictor* predictor,
                       const dist::Comm& comm, const PipelineOptions& options);

// The same stages one after the other in this process alone (no MPI): the baseline.
RunOutput run_sequential(const EvalSetup& setup, const data::Dataset& dataset, Predictor& predictor,
                         const PipelineOptions& options);

// The same two for a detection setup: `set` on rank 0, the detector on the predicting ranks.
RunOutput run_pipeline(const EvalSetup& setup, const data::DetectionSet* set, DetectionPredictor* detector,
                       const dist::Comm& comm, const PipelineOptions& options);
RunOutput run_sequential(const EvalSetup& setup, const data::DetectionSet& set, DetectionPredictor& detector,
                         const PipelineOptions& options);

}  // namespace mpicnn::eval
