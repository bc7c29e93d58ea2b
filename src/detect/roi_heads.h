// Faster R-CNN's box branch (torchvision 0.14 RoIHeads without masks or keypoints): training
// samples (match, sample, targets), MultiScaleRoIAlign -> TwoMLPHead -> FastRCNNPredictor, the
// two losses with their backward into the parameters and the FPN features, and the eval-mode
// postprocessing. Not the RPN (rpn.h), nor the rescaling of boxes to the original image (transform.h).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/tensor.h"
#include "detect/boxes.h"
#include "detect/matcher.h"
#include "detect/roi_align.h"
#include "detect/transform.h"
#include "layers/linear.h"
#include "models/detectors.h"

namespace mpicnn::detect {

// fasterrcnn_resnet50_fpn's box_* arguments.
struct RoiHeadsOptions {
  float fg_iou_thresh = 0.5f, bg_iou_thresh = 0.5f;
  int64_t batch_size_per_image = DetectorDefaults::box_batch_size_per_image;
  float positive_fraction = 0.25f;
  float score_thresh = 0.05f, nms_thresh = 0.5f;
  int64_t detections_per_img = 100;
  int sampling_ratio = 2;
  int canonical_scale = 224;  // MultiScaleRoIAlign's LevelMapper; tests lower it to use every level
};

struct RoiHeadsLosses {
  double classifier = 0, box_reg = 0;  // torchvision's loss_classifier, loss_box_reg
};

// One image's detections, by decreasing score.
struct Detections {
  std::vector<float> boxes;     // (k, 4) x1 y1 x2 y2 in the resized image
  std::vector<float> scores;    // (k)
  std::vector<int64_t> labels;  // (k) in 1..num_classes-1
};

// What select_training_samples chose, all images one after another (image 0's rois first).
struct RoiSamples {
  std::vector<float> rois;                // (R, 5) [image, x1, y1, x2, y2]
  std::vector<int64_t> labels;            // (R) 0 = background
  std::vector<int64_t> matched;           // (R) ground truth of each roi (0 for background)
  std::vector<float> regression_targets;  // (R, 4) encode(matched gt, roi), for every roi
  std::vector<int64_t> per_image;         // (N) rois of each image
  int64_t count() const { return int64_t(labels.size()); }
};

class RoiHeads {
 public:
  // in_channels: the FPN's channels; resolution: RoIAlign's output side (7);
  // representation_size: TwoMLPHead's width (1024); num_classes counts the background.
  RoiHeads(int in_channels, int num_classes, int representation_size = 1024, int resolution = 7,
           const RoiHeadsOptions& options = {});
  RoiHeads(const RoiHeads&) = delete;  // its layers are registered by address
  RoiHeads& operator=(const RoiHeads&) = delete;

  // prefix + "box_head.fc6.", "box_head.fc7.", "box_predictor.cls_score.",
  // "box_predictor.bbox_pred." (weight, bias); torchvision's prefix is "roi_heads.".
  void register_state(ParamStore& store, const std::string& prefix);
  // torchvision keeps nn.Linear's default for all four layers: U(+-1/sqrt(fan_in)).
  void init(uint64_t seed);
  void for_each_layer(const std::function<void(Layer&, const std::string&)>& fn);
  void set_training(bool training);

  // levels: (N, C, H, W) of the pooled FPN levels ('0'..'3', finest first); image: the
  // largest resized height and width of the batch (MultiScaleRoIAlign's scales, kept from
  // here on as torchvision caches them); max_rois: most rois of one call over the whole batch
  // (training: N * batch_size_per_image; eval: all proposals).
  void plan(const std::vector<Shape>& levels, Size2 image, int64_t max_rois);

  // torchvision's select_training_samples: per image, proposals[n] (k_n, 4) with gt_boxes[n]
  // (m_n, 4) appended, matched (Matcher fg/bg thresholds, no low-quality matches), labelled by
  // gt_labels[n] (m_n), subsampled (Sampler; kRandom draws image n from Rng(seed,
  // stream_base + n)), in increasing index order, with regression targets (BoxCoder 10,10,5,5).
  // An image without ground truth is all background, its targets encoded against a zero box.
  const RoiSamples& select_training_samples(const std::vector<std::vector<float>>& proposals,
                                            const std::vector<std::vector<float>>& gt_boxes,
                                            const std::vector<std::vector<int64_t>>& gt_labels,
                                            SampleRule rule, uint64_t seed, uint64_t stream_base);

  // Training forward: select_training_samples, the box head on the sampled rois, fastrcnn_loss.
  // levels: as planned; image_sizes[n]: image n's resized (h, w).
  RoiHeadsLosses forward_train(const std::vector<FeatureLevel>& levels,
                               const std::vector<std::vector<float>>& proposals,
                               const std::vector<Size2>& image_sizes,
                               const std::vector<std::vector<float>>& gt_boxes,
                               const std::vector<std::vector<int64_t>>& gt_labels,
                               SampleRule rule, uint64_t seed, uint64_t stream_base);
  // Gradient of (w_cls * classifier + w_box * box_reg) of the last forward_train: parameter
  // gradients '+=', dfeats[l] (levels[l]'s shape) '+='. Proposals get none (torchvision
  // detaches them).
  void backward(const std::vector<float*>& dfeats, float w_cls, float w_box);

  // Eval: the box head on proposals[n] (k_n, 4), then torchvision's postprocess_detections.
  void detect(std::vector<Detections>& out, const std::vector<FeatureLevel>& levels,
              const std::vector<std::vector<float>>& proposals,
              const std::vector<Size2>& image_sizes);

  // Of the last forward_train or select_training_samples; emptied by detect().
  const RoiSamples& samples() const { return samples_; }
  // The predictor's outputs of the last forward: (R, num_classes) and (R, 4 * num_classes).
  Tensor class_logits() const { return logits_.slice0(0, R_); }
  Tensor box_regression() const { return box_reg_.slice0(0, R_); }
  const RoiHeadsOptions& options() const { return opt_; }
  int num_classes() const { return num_classes_; }

 private:
  // The pooled rows of rois_ (R, 5) through fc6, fc7 and the predictor.
  void run_head(const std::vector<FeatureLevel>& levels);
  void softmax();  // probs_ = softmax of logits_, row by row

  int in_channels_, num_classes_, representation_, resolution_;
  RoiHeadsOptions opt_;
  BoxCoder coder_{10, 10, 5, 5};
  MultiScaleRoIAlign pool_;
  Linear fc6_, fc7_, cls_score_, bbox_pred_;
  std::string prefix_;
  Size2 planned_image_;
  int64_t max_rois_ = 0, R_ = 0;
  RoiSamples samples_;
  std::vector<float> rois_;  // (R, 5) of the last forward
  // Activations and gradients, each planned for max_rois rows.
  Tensor pooled_;   // (R, C * res * res)
  Tensor h6_, h7_;  // (R, representation) after ReLU
  Tensor logits_;   // (R, num_classes)
  Tensor box_reg_;  // (R, 4 * num_classes)
  Tensor probs_;    // (R, num_classes) softmax of logits_
  Tensor dlogits_, dbox_, dh7_, dh7b_, dh6_, dpooled_;
  // Scratch reused between calls.
  std::vector<float> iou_, all_boxes_, decoded_, cand_boxes_, cand_scores_;
  std::vector<int64_t> matches_, labels_, pos_, neg_, chosen_, cand_labels_, keep_, small_keep_;
};

}  // namespace mpicnn::detect
