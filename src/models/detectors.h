// The detectors `./train --task detection` builds (detect/faster_rcnn.h makes them): their names
// and the settings a user may change, with their defaults (torchvision's fasterrcnn_resnet50_fpn),
// declared once. ./train's options, the detector's own option structs and ./pipeline_eval read
// them here, so that parsing options needs nothing of the detector itself.
#pragma once
#include <string>
#include <vector>

namespace mpicnn {

struct DetectorDefaults {
  // GeneralizedRCNNTransform: the shorter side resized to min_size unless the longer would pass
  // max_size.
  static constexpr int min_size = 800, max_size = 1333;
  // trainable_backbone_layers over pretrained weights (from random weights all 5 train).
  static constexpr int trainable_layers = 3;
  static constexpr int box_batch_size_per_image = 512;  // RoIs sampled per image for the box head
  static constexpr int rpn_post_nms_top_n_test = 1000;  // proposals kept per image in evaluation
};

// fasterrcnn_<resnet>_fpn for resnet18, 34 and 50.
const std::vector<std::string>& detection_model_names();
// The ResNet body of detection model `name` ("resnet18"), or an Error listing the names.
std::string detection_body(const std::string& name);

}  // namespace mpicnn
