// ./pipeline_eval on a Faster R-CNN run (`./train --task detection`): the setup rank 0 makes from
// the run's checkpoint (model, classes, --min-size/--max-size) and the evaluation set (a Pascal
// VOC folder or a COCO JSON file), and the four stage functions read -> decode+resize ->
// normalize+batch -> predict that reproduce detect::predict exactly: decode to floats in [0, 1],
// normalise, resize (torchvision's GeneralizedRCNNTransform order: normalise, then resize the
// floats) on the decoding rank; pad the batch to a multiple of 32 on the batching rank; the
// detector in eval mode, boxes scaled back to each original image, on the predicting ranks.
// Not the scheduling over ranks (eval/pipeline.h) nor the scoring and report (eval/report.h,
// detect/map_eval.h).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/detection.h"
#include "detect/transform.h"
#include "eval/options.h"
#include "eval/setup.h"
#include "eval/report.h"
#include "models/model.h"

namespace mpicnn::eval {

// Rank 0: whether --checkpoint names a detection run (its trainer.json's task, or a fasterrcnn_*
// model). False without --checkpoint. Errors name the checkpoint as resolve_checkpoint does.
bool is_detection_checkpoint(const EvalOptions& o);

// The data a detection run is evaluated on without -d: its --test-data when it had one, else its
// data path's test/ when it has train/ and test/, else the data itself (what ./train --task
// detection evaluated or trained on). An error line asking for -d when the record lacks the path or it is not there.
std::string detection_run_data(const TrainerState& st, const std::string& record);

// Rank 0: the setup for a detection checkpoint and the evaluation set `set` it opens: -d (a VOC
// folder, or a COCO instances .json, or a folder holding one, whose images lie in the JSON's
// folder: as ./train reads them), or the run's own data (detection_run_data). The classes are
// the checkpoint's record's, or else (detection runs record none) its training data's, read as
// ./train read them. Refuses the classifier's preprocessing and dataset flags with one line
// naming the flag, and a set whose classes are not the checkpoint's with one line naming the file.
EvalSetup make_detection_setup(const EvalOptions& o, data::DetectionSet& set, std::string& data_note);

// The detector's transform for the setup (its min/max size; torchvision's mean and std).
detect::ResizeOptions resize_options(const EvalSetup& setup);

// Stage 1, read: image i's file bytes, its path as source and its annotated size. The ground
// truth stays with the set (rank 0).
RawSample read_detection_sample(const data::DetectionSet& set, uint64_t i);

// Stage 2, decode+resize: the image normalised and resized (floats, not yet padded).
struct DetectionWindow {
  uint64_t index = 0;
  detect::Size2 original, resized;
  std::vector<float> pixels;  // (3, resized.h, resized.w)
};
// Errors name the image (undecodable, or not the size its annotation gives).
DetectionWindow decode_detection(const EvalSetup& setup, const RawSample& s);

// Stage 3, normalize+batch: the windows of a batch zero-padded into one (n, 3, PH, PW) block,
// PH and PW each side's maximum rounded up to a multiple of 32 (detect::batch_size).
struct DetectionInputBatch {
  std::vector<uint64_t> indices;
  std::vector<detect::Size2> original, resized;
  int64_t height = 0, width = 0;  // padded
  std::vector<float> pixels;      // (n, 3, height, width)
  size_t size() const { return indices.size(); }
};
DetectionInputBatch batch_detection_windows(const std::vector<DetectionWindow>& windows, int size_divisible = 32);

// Stage 4, predict: the detector (built as the run built it, loaded with the setup's weights,
// eval mode) on a batch; each image's boxes scaled back to its original size. The model is
// re-planned as detect::predict re-plans it (a batch of another padded size), so the same
// batches give the same bits.
class DetectionPredictor {
 public:
  explicit DetectionPredictor(const EvalSetup& setup);
  ~DetectionPredictor();
  std::vector<ImageDetections> predict(const DetectionInputBatch& batch);
  // A batch of zero images at min-size x min-size, so that the timed run does not pay for
  // first-touch memory and thread start-up.
  void warm_up();

 private:
  std::unique_ptr<Model> model_;
  int64_t batch_size_;
  int min_size_ = 0;  // the detector's transform's
};

}  // namespace mpicnn::eval
