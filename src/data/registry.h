// The dataset kinds, each declared once: its name (what --dataset takes), its task, whether it
// needs a path, how a path is recognised as one (--dataset auto), how it is opened, and the
// normalisation statistics models train on it with. Every list of kinds (the programs'
// --dataset choices and help, auto-detection, open_dataset, kind_normalization) reads this
// table; adding a kind is one row in registry.cpp. Detection kinds (voc, coco) are opened by
// data/detection.h's open_detection_set, which tells the two apart from the path.
#pragma once
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/task.h"
#include "data/dataset.h"

namespace mpicnn::data {

struct DatasetKind {
  std::string name;
  Task task = Task::Classify;
  // The path a missing -d/--data means ("" = none); no_path: the kind reads no files at all.
  std::string default_path;
  bool no_path = false;
  // --dataset auto tries the kinds in this order (1 first), each recognise(path) on an existing
  // file or folder; 0: never detected (named only).
  int detect_order = 0;
  bool (*recognise)(const std::filesystem::path& p) = nullptr;
  // The split `split` of the data at `path` (classification kinds; null for detection and for
  // streamed kinds).
  std::unique_ptr<Dataset> (*open)(const DatasetSpec& spec, const std::string& path) = nullptr;
  // Per-channel statistics of the data in [0, 1]: 1 value (any model) or 3 (RGB; a
  // 1-channel model gets their luma, preprocess.h). Empty: no default normalisation.
  std::vector<float> mean, stddev;
  // Read as a stream, not by index: tar shards (shards.h), which ./train's data split reads
  // shard by shard (dist/split_data.h); open_dataset refuses them.
  bool streamed = false;
};

// Every kind, in the order the programs list them.
const std::vector<DatasetKind>& dataset_kinds();
// The kind named `name`, or null.
const DatasetKind* find_dataset_kind(const std::string& name);
// "auto" then the names of the kinds of `task` (every task when none), in table order: the
// choices of a --dataset flag; without the streamed kinds for programs that read by index.
std::vector<std::string> dataset_choices(std::optional<Task> task = std::nullopt, bool streamed = true);
// The names of the kinds that need no -d/--data ("fashion-mnist and synthetic"), for messages.
std::string kinds_without_path();

}  // namespace mpicnn::data
