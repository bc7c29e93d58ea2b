// Faster R-CNN with a ResNet-FPN backbone, as torchvision 0.14's FasterRCNN builds it
// (fasterrcnn_resnet50_fpn, and fasterrcnn_resnet18_fpn: the same over resnet_fpn_backbone
// of ResNet-18), parameter names equal to torchvision's state dict. FasterRcnnNet is the root
// Module of a Model, so state dicts, checkpoints, freezing and the optimizers work as for a
// classifier: forward takes the batched, normalised images (detect/transform.h) after
// set_batch() gave their sizes (and, to train, their targets), and outputs the four losses
// (loss_classifier, loss_box_reg, loss_objectness, loss_rpn_box_reg) in training mode;
// backward's dout weights them. In eval mode forward leaves detections() per image.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "detect/fpn.h"
#include "detect/roi_heads.h"
#include "detect/rpn.h"
#include "detect/rpn_head.h"
#include "detect/transform.h"
#include "models/detectors.h"
#include "models/model.h"

namespace mpicnn::detect {

struct FasterRcnnOptions {
  std::string body = "resnet50";  // resnet18, resnet34, resnet50
  int num_classes = 91;           // with the background (label 0)
  int trainable_layers = DetectorDefaults::trainable_layers;  // trainable_backbone_layers
  bool frozen_batchnorm = true;   // FrozenBatchNorm2d in the body (ResNetFpn)
  int fpn_channels = 256;
  int representation_size = 1024;  // TwoMLPHead
  ResizeOptions transform;
  RpnOptions rpn;
  RoiHeadsOptions roi;
  // Training samples: kRandom (the RNG stream of each image of each step, set_batch) or the
  // deterministic first-k rule (parity tests).
  SampleRule sample_rule = SampleRule::kRandom;
};

// One image's ground truth in the resized image's coordinates.
struct DetectionTarget {
  std::vector<float> boxes;     // (m, 4)
  std::vector<int64_t> labels;  // (m) in 1..num_classes-1
};

class FasterRcnnNet : public Module {
 public:
  static constexpr int kLosses = 4;  // classifier, box_reg, objectness, rpn_box_reg

  explicit FasterRcnnNet(const FasterRcnnOptions& options);

  void register_state(ParamStore& store, const std::string& prefix) override;
  void for_each_layer(const std::function<void(Layer&, const std::string&)>& fn) override;
  void set_training(bool training) override;
  // in: the padded batch (N, 3, H, W). Returns (kLosses).
  Shape plan(const Shape& in, const ExecConfig& cfg) override;
  const Tensor& forward(const Tensor& in) override;
  // dout (kLosses): the weight of each loss. din is never computed (images get no gradient).
  void backward(Tensor& din, const Tensor& dout) override;
  bool outputs_logits() const override { return false; }

  // Called after the store is allocated (Model's constructor has done so): the RPN head's
  // per-level layers share level 0's parameters.
  void bind_shared();
  // Freezes what torchvision does not train (ResNetFpn::freeze): after the store is allocated.
  void freeze_backbone(ParamStore& store) { backbone_.freeze(store); }
  void init(uint64_t seed);

  // The next forward's images: their resized sizes (inside the padded batch) and, in training,
  // their targets; `seed` and `stream` key the samplers' random draws (image n: stream + n).
  void set_batch(std::vector<Size2> image_sizes, std::vector<DetectionTarget> targets = {},
                 uint64_t seed = 0, uint64_t stream = 0);
  // Eval forward's detections, per image, in the resized image's coordinates.
  const std::vector<Detections>& detections() const { return detections_; }
  // The last forward's proposals per image (the RPN's output).
  const std::vector<std::vector<float>>& proposals() const { return proposals_; }

  const FasterRcnnOptions& options() const { return opt_; }

 private:
  FasterRcnnOptions opt_;
  ResNetFpn backbone_;
  RpnHead rpn_head_;
  Rpn rpn_;
  RoiHeads roi_heads_;
  bool training_ = true;

  std::vector<Size2> image_sizes_;
  std::vector<DetectionTarget> targets_;
  uint64_t seed_ = 0, stream_ = 0;
  std::vector<std::vector<float>> proposals_;
  std::vector<Detections> detections_;
  Tensor losses_;  // (kLosses)
  int64_t batch_ = 0;
  // Backward buffers: the RPN head's output gradients and each level's feature gradient.
  std::vector<Tensor> dobj_, ddeltas_, dlevels_;
};

// The options a detector was built with, as its checkpoint records them (trainer.json's
// "model_options") and evaluation rebuilds it from: every field but the training sample rule.
nlohmann::json options_record(const FasterRcnnOptions& o);
// The record read back; a missing or mistyped field is one line naming `where` and the field.
FasterRcnnOptions options_from_record(const nlohmann::json& record, const std::string& where);

// fasterrcnn_resnet18_fpn / fasterrcnn_resnet34_fpn / fasterrcnn_resnet50_fpn: a Model whose
// root is a FasterRcnnNet (models/detectors.h names them). options.body is set from the name.
std::unique_ptr<Model> make_faster_rcnn(const std::string& name, FasterRcnnOptions options,
                                        uint64_t seed, bool initialise = true);
FasterRcnnNet& faster_rcnn_net(Model& model);  // the root, or an Error if it is no detector

// A torchvision ResNet classifier's state dict (export_torchvision.py) as the detector's
// backbone body: "X" is loaded into "backbone.body.X", "fc.*" and BatchNorm counters are left
// out, as torchvision's resnet_fpn_backbone does with ImageNet weights. Every body tensor must
// be in the file with its shape (else one line naming it and the file, before any value
// changes). Returns the number of tensors loaded.
int load_classifier_backbone(Model& detector, const std::string& path);

}  // namespace mpicnn::detect
