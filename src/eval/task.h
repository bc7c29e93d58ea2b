// What ./pipeline_eval evaluates, as the staged run (eval/pipeline.h) and the orchestration
// (eval/evaluate.h) ask it, mirroring training's TrainTask (train/task.h): a task opens its data
// and makes the setup, does the work of the four stages read -> decode+resize -> normalize+batch
// -> predict, and scores the results into the report. Which rank runs which stage, the credits,
// the baseline and the report's common figures are the pipeline's and evaluate.cpp's, the same
// for every task. Two tasks: classification (classify_task.cpp) and Faster R-CNN detection
// (detect_task.cpp). The items between the stages are one set of types for both: a task fills
// the fields it needs.
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/exec.h"
#include "data/image.h"
#include "detect/transform.h"
#include "dist/comm.h"
#include "eval/options.h"
#include "eval/report.h"
#include "eval/setup.h"

namespace mpicnn::eval {

// Stage 1's output: a sample as read from its source, before decoding.
struct RawSample {
  uint64_t index = 0;
  int32_t label = 0;
  std::string source;          // for error messages and the predictions CSV
  std::vector<uint8_t> bytes;  // encoded file, or raw (H, W, C) pixels
  // Detection: the size the image's annotation gives (its boxes are only right for that size;
  // the decoding rank checks it). 0 for classifiers.
  int64_t height = 0, width = 0;
};

// Stage 2's output: one sample decoded and resized for the model.
struct Window {
  uint64_t index = 0;
  int32_t label = 0;
  data::Image image;                 // classification: the 8-bit model-sized window
  detect::Size2 original, resized;   // detection: the image's size and its size resized
  std::vector<float> pixels;         // detection: normalised and resized (3, resized.h, resized.w)
};

// Stage 3's output: a block of samples as the model's input, (n, C, H, W) floats.
struct InputBatch {
  std::vector<uint64_t> indices;  // (n)
  std::vector<int32_t> labels;    // (n)
  std::vector<float> pixels;      // (n, C, H, W)
  // Detection: each image's original and resized size, and (H, W), the padded size.
  std::vector<detect::Size2> original, resized;
  int64_t height = 0, width = 0;
  // Detection: the block's windows while it fills (EvalTask::add), padded into pixels once it is
  // complete (EvalTask::seal). Never sent.
  std::vector<Window> windows;
  size_t size() const { return indices.size(); }
};

// Stage 4's output: one result per sample of a batch, of the task's kind.
struct Results {
  std::vector<Prediction> predictions;      // classification
  std::vector<ImageDetections> detections;  // detection
  size_t size() const { return predictions.size() + detections.size(); }
  std::vector<uint64_t> indices() const;    // the samples, in order
  void append(Results&& more);
  void sort();  // by sample index
};

// A task's model on a predicting rank: loaded, in eval mode, planned for the setup's batch size.
class Predictor {
 public:
  virtual ~Predictor() = default;
  virtual Results predict(const InputBatch& batch) = 0;
  // One full batch of zeros through the model, so that no timed run pays for first-touch memory
  // and thread-pool start-up (the baseline, which runs first, otherwise would).
  virtual void warm_up() = 0;
  // How the model computes (the report's device and execution lines).
  virtual const ExecConfig& exec() const = 0;
  virtual std::string explain_plan() const = 0;  // --explain-plan: Model::explain_plan
};

// What one run measured, complete on rank 0 (the other ranks return their own stage times).
struct RunOutput {
  Results results;                  // sorted by index
  std::vector<Skipped> skipped;     // sorted by index
  std::vector<double> latency_s;    // per result of a sample rank 0 read (its own clock)
  std::vector<StageTime> stages;    // every rank's, by rank then stage
  double wall_s = 0;
};

class EvalTask {
 public:
  virtual ~EvalTask() = default;
  const EvalSetup& setup() const { return setup_; }

  // ---- data and model ----
  // A reading rank other than rank 0: opens the data the options name, as rank 0 did, and
  // returns how many samples it found (the caller checks them against the setup's count).
  virtual uint64_t open_data(const EvalOptions& o) = 0;
  // Whether this rank has the data open (rank 0, and the reading ranks after open_data).
  virtual bool has_data() const = 0;
  // A predicting rank: the model, computing as the options say (--device, --precision,
  // --gpu-layout; a task may refuse what its model cannot do).
  virtual std::unique_ptr<Predictor> predictor(const EvalOptions& o, const dist::Comm& comm) const = 0;

  // ---- the stages (errors name the sample's source) ----
  virtual RawSample read(uint64_t i) const = 0;  // needs the data
  virtual Window decode(const RawSample& s) const = 0;
  // Normalize+batch: the window into the block's batch (its index and label appended to the
  // batch's), and (seal) the batch made complete once the block's last sample has arrived.
  virtual void add(InputBatch& batch, Window&& w) const = 0;
  virtual void seal(InputBatch& /*batch*/) const {}

  // ---- rank 0, after the run ----
  // The report's task part: every evaluated sample's source, the results and their scores, and
  // with a baseline (--compare) how many results differ from it.
  virtual void score(Report& report, RunOutput& run, const RunOutput* baseline) const = 0;

 protected:
  explicit EvalTask(EvalSetup setup) : setup_(std::move(setup)) {}
  EvalSetup setup_;
};

// Rank 0: the task the options name (a detection checkpoint, else classification; resolves a
// checkpoint's own data when -d is not given), its data opened and its setup made. Errors name
// the flag or file.
std::unique_ptr<EvalTask> open_eval_task(const EvalOptions& o);
// The other ranks: the task of rank 0's setup, without data (EvalTask::open_data opens it).
std::unique_ptr<EvalTask> make_eval_task(const EvalSetup& setup);

// The two tasks' factories (classify_task.cpp, detect_task.cpp).
std::unique_ptr<EvalTask> open_classify_task(const EvalOptions& o);
std::unique_ptr<EvalTask> make_classify_task(const EvalSetup& setup);
std::unique_ptr<EvalTask> open_detect_task(const EvalOptions& o);
std::unique_ptr<EvalTask> make_detect_task(const EvalSetup& setup);

// Samples that differ between two runs of the same samples (both sorted by index): `same`
// compares two results of one sample; a sample present in one run only counts too. Tasks
// compare what is exact whatever the threads (classes, not probabilities or boxes: with other
// thread counts, as the baseline has, a matrix product may round its last bit differently).
template <class T, class Same>
int64_t count_mismatches(const std::vector<T>& a, const std::vector<T>& b, Same same) {
  int64_t n = 0;
  size_t i = 0, j = 0;
  while (i < a.size() || j < b.size()) {
    if (j == b.size() || (i < a.size() && a[i].index < b[j].index)) {
      ++n, ++i;
    } else if (i == a.size() || b[j].index < a[i].index) {
      ++n, ++j;
    } else {
      n += !same(a[i], b[j]), ++i, ++j;
    }
  }
  return n;
}

}  // namespace mpicnn::eval
