// What ./pipeline_eval evaluates and the work of each of its stages, independent of where the
// stages run: the setup (model, weights, preprocessing, dataset facts) that rank 0 makes from the
// options and shares with every rank, and the four stage functions read -> decode+resize ->
// normalize -> predict. The sequential baseline and every rank of the pipeline call exactly
// these, so their predictions are the same. Not the MPI plumbing (eval/pipeline.h).
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "data/dataset.h"
#include "data/transform.h"
#include "eval/options.h"
#include "eval/report.h"
#include "layers/softmax_xent.h"
#include "models/model.h"

namespace mpicnn::eval {

struct EvalSetup {
  Task task = Task::Classify;  // Detection: a Faster R-CNN run (eval/detect_stages.h)
  std::string model;         // registry name (detection: fasterrcnn_*)
  int num_classes = 0, in_channels = 3;
  std::string weights_file;  // the safetensors state dict every predicting rank loads
  std::string weights;       // for the report: the checkpoint directory or the weights file
  data::Preprocess preprocess;
  std::vector<std::string> class_names;  // the model's classes (num_classes entries)
  std::string dataset;       // Dataset::describe()
  uint64_t count = 0;        // samples evaluated: the first `count` of the dataset
  // Fixed-size datasets (IDX, CIFAR, synthetic) store raw (H, W, C) pixels; 0 = encoded files.
  int raw_channels = 0, raw_height = 0, raw_width = 0;
  int64_t batch_size = 32;
  // Detection: the detector as the run built it (detect::options_record: its transform, RPN
  // and RoI settings, frozen BatchNorm). class_names then exclude the background; num_classes
  // counts it.
  nlohmann::json detector;
};

// The split --split auto picks for a dataset kind and path: "test", or "all" for an image folder
// without train/test/val folders and a CSV file without a split column (they hold one set).
std::string auto_split(const std::string& kind, const std::string& path);

// Rank 0: opens the dataset and reads the checkpoint's record (or applies the --weights
// defaults). Errors name the flag or file. `dataset` receives the opened dataset.
EvalSetup make_setup(const EvalOptions& o, std::unique_ptr<data::Dataset>& dataset);

std::string setup_to_json(const EvalSetup& p);
EvalSetup setup_from_json(const std::string& text);

// A sample as read from its source, before decoding: what rank 0 sends to the decoding rank.
struct RawSample {
  uint64_t index = 0;
  int32_t label = 0;
  std::string source;          // for error messages and the predictions CSV
  std::vector<uint8_t> bytes;  // encoded file, or raw (H, W, C) pixels
  // Detection: the size the image's annotation gives (its boxes are only right for that size;
  // the decoding rank checks it). 0 for classifiers.
  int64_t height = 0, width = 0;
};

// Stage 1, read: sample i's bytes (Dataset::read), label and source.
RawSample read_sample(const data::Dataset& ds, uint64_t i);

// Stage 2, decode+resize: the sample's 8-bit model-sized window (Transform::geometry). Errors
// name the sample's source.
data::Image decode_resize(const EvalSetup& setup, const data::Transform& tf, const RawSample& s);

// Stage 3, normalize+batch: a batch being filled, then handed to a predictor.
struct InputBatch {
  std::vector<uint64_t> indices;  // (n)
  std::vector<int32_t> labels;    // (n)
  std::vector<float> pixels;      // (n, C, H, W)
  size_t size() const { return indices.size(); }
};
// Appends the normalised window to the batch.
void normalize_into(InputBatch& batch, const data::Transform& tf, uint64_t index, int32_t label,
                    const data::Image& window);

// Stage 4, predict: the model (loaded with the setup's weights, eval mode, planned for the batch
// size) and the top-5 of each sample of a batch.
class Predictor {
 public:
  // Builds and loads (errors name the weights file), then places the model on exec's device and
  // plans it for inference as exec says.
  explicit Predictor(const EvalSetup& setup, const ExecConfig& exec = ExecConfig{});
  std::vector<Prediction> predict(const InputBatch& batch);
  // One full batch of zeros through the model, so that neither timed run pays for first-touch
  // memory and thread-pool start-up (the baseline, which runs first, otherwise would).
  void warm_up();
  // The model's plan, per layer (Model::explain_plan): --explain-plan.
  std::string explain_plan() const { return model_->explain_plan(); }

 private:
  std::unique_ptr<Model> model_;
  SoftmaxCrossEntropy softmax_;
  int64_t batch_size_;
  std::vector<int64_t> shape_;  // (C, H, W)
  InputStage input_;
};

}  // namespace mpicnn::eval
