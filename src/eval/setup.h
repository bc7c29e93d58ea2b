// What ./pipeline_eval evaluates: the setup (task, model, weights, preprocessing, dataset facts)
// that rank 0 makes from the options and shares with every rank, and the classifier's setup
// (make_setup). The work of the stages is the task's (eval/task.h); not the MPI plumbing
// (eval/pipeline.h).
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/task.h"
#include "data/dataset.h"
#include "data/transform.h"
#include "eval/options.h"

namespace mpicnn::eval {

struct EvalSetup {
  Task task = Task::Classify;  // Detection: a Faster R-CNN run (eval/detect_task.h)
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

}  // namespace mpicnn::eval
