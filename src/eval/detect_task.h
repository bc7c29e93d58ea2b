// ./pipeline_eval on a Faster R-CNN run (`./train --task detection`): the detection task
// (eval/task.h; open_detect_task, make_detect_task) makes its setup on rank 0 from the run's
// checkpoint (model, classes, --min-size/--max-size) and the evaluation set (a Pascal VOC folder
// or a COCO JSON file), and its four stages read -> decode+resize -> normalize+batch -> predict
// reproduce detect::predict exactly: decode to floats in [0, 1], normalise, resize
// (torchvision's GeneralizedRCNNTransform order: normalise, then resize the floats) on the
// decoding rank; pad the batch to a multiple of 32 on the batching rank; the detector in eval
// mode, boxes scaled back to each original image, on the predicting ranks; rank 0 scores the
// boxes (detect/map_eval.h). Here: what else needs to know a detection run.
#pragma once
#include <string>

#include "eval/options.h"
#include "io/checkpoint.h"

namespace mpicnn::eval {

// Rank 0: whether --checkpoint names a detection run (its trainer.json's task, or a fasterrcnn_*
// model). False without --checkpoint. Errors name the checkpoint as resolve_checkpoint does.
bool is_detection_checkpoint(const EvalOptions& o);

// The data a detection run is evaluated on without -d: its --test-data when it had one, else its
// data path's test/ when it has train/ and test/, else the data itself (what ./train --task
// detection evaluated or trained on). An error line asking for -d when the record lacks the path or it is not there.
std::string detection_run_data(const TrainerState& st, const std::string& record);

}  // namespace mpicnn::eval
