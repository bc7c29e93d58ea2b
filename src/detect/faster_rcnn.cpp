// The detector's forward: backbone -> RPN head -> proposals (-> RPN losses) -> box branch
// (losses, or detections). Backward adds the box branch's feature gradients (levels '0'-'3')
// to the RPN head's (all five) and runs the backbone's backward once.
#include "detect/faster_rcnn.h"

#include <algorithm>

#include "core/check.h"
#include "core/text.h"
#include "io/safetensors.h"
#include "layers/add.h"

namespace mpicnn::detect {

namespace {

std::vector<std::vector<float>> fpn_anchor_sizes() { return {{32}, {64}, {128}, {256}, {512}}; }

void scale(Tensor& t, float a) {
  if (a == 1.f) return;
  real* p = t.data();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] *= a;
}

}  // namespace

FasterRcnnNet::FasterRcnnNet(const FasterRcnnOptions& options)
    : opt_(options),
      backbone_(options.body, options.trainable_layers, options.fpn_channels, options.frozen_batchnorm),
      rpn_head_(options.fpn_channels, 3, ResNetFpn::kLevels),
      rpn_(options.rpn, AnchorGenerator(fpn_anchor_sizes(), {{0.5f, 1.f, 2.f}})),
      roi_heads_(options.fpn_channels, options.num_classes, options.representation_size, 7,
                 options.roi) {
  CHECK(options.num_classes >= 2, "Faster R-CNN: num_classes counts the background and must be "
        ">= 2, got ", options.num_classes);
}

void FasterRcnnNet::register_state(ParamStore& store, const std::string& prefix) {
  backbone_.register_state(store, prefix + "backbone.");
  rpn_head_.register_state(store, prefix + "rpn.head.");
  roi_heads_.register_state(store, prefix + "roi_heads.");
}

void FasterRcnnNet::for_each_layer(const std::function<void(Layer&, const std::string&)>& fn) {
  backbone_.for_each_layer(fn);
  rpn_head_.for_each_layer(fn);
  roi_heads_.for_each_layer(fn);
}

void FasterRcnnNet::set_training(bool training) {
  training_ = training;
  backbone_.set_training(training);
  rpn_head_.set_training(training);
  roi_heads_.set_training(training);
}

void FasterRcnnNet::bind_shared() { rpn_head_.share_parameters(); }

void FasterRcnnNet::init(uint64_t seed) {
  backbone_.init(seed);
  rpn_head_.init(seed);
  roi_heads_.init(seed);
}

Shape FasterRcnnNet::plan(const Shape& in, const ExecConfig& cfg) {
  // Inference-only plans share block outputs between stages (ExecConfig::inference); the FPN
  // reads every stage's output after the last stage has run.
  CHECK(!cfg.inference,
        "Faster R-CNN: no inference-only plan yet (plan it for training "
        "and call set_training(false))");
  const std::vector<Shape> levels = backbone_.plan(in, cfg);
  rpn_head_.plan(levels, cfg);
  const int64_t N = in[0];
  // The box head sees the sampled rois in training (at most batch_size_per_image an image) and
  // every proposal in eval (at most post_nms_top_n_test an image).
  const int64_t max_rois =
      N * std::max(opt_.roi.batch_size_per_image, opt_.rpn.post_nms_top_n_test);
  roi_heads_.plan(std::vector<Shape>(levels.begin(), levels.begin() + 4), {in[2], in[3]}, max_rois);
  dobj_.clear(), ddeltas_.clear(), dlevels_.clear();
  for (const Shape& s : levels) {
    dobj_.push_back(Tensor::empty({N, 3, s[2], s[3]}));
    ddeltas_.push_back(Tensor::empty({N, 12, s[2], s[3]}));
    dlevels_.push_back(Tensor::empty(s));
  }
  losses_ = Tensor::zeros({kLosses});
  return {kLosses};
}

void FasterRcnnNet::set_batch(std::vector<Size2> image_sizes, std::vector<DetectionTarget> targets,
                              uint64_t seed, uint64_t stream) {
  image_sizes_ = std::move(image_sizes);
  targets_ = std::move(targets);
  seed_ = seed;
  stream_ = stream;
}

const Tensor& FasterRcnnNet::forward(const Tensor& in) {
  const int64_t N = in.size(0);
  CHECK(int64_t(image_sizes_.size()) == N, "Faster R-CNN: ", image_sizes_.size(),
        " image sizes set for a batch of ", N, " (set_batch before forward)");
  CHECK(!training_ || int64_t(targets_.size()) == N, "Faster R-CNN: training needs ", N,
        " targets, set_batch gave ", targets_.size());
  batch_ = N;
  const Size2 padded{in.size(2), in.size(3)};
  const std::vector<Tensor>& levels = backbone_.forward(in);
  rpn_head_.forward(levels);
  std::vector<RpnLevel> rpn_levels;
  for (size_t l = 0; l < levels.size(); ++l)
    rpn_levels.push_back({rpn_head_.objectness()[l].data(), rpn_head_.deltas()[l].data(), 3,
                          levels[l].size(2), levels[l].size(3)});
  rpn_.propose(proposals_, rpn_levels, N, image_sizes_, padded, training_);
  std::vector<FeatureLevel> pooled;
  for (size_t l = 0; l < 4; ++l) pooled.push_back({levels[l].data(), levels[l].shape()});
  losses_.fill(0.f);
  if (!training_) {
    roi_heads_.detect(detections_, pooled, proposals_, image_sizes_);
    return losses_;
  }
  std::vector<std::vector<float>> gt_boxes;
  std::vector<std::vector<int64_t>> gt_labels;
  for (const DetectionTarget& t : targets_) gt_boxes.push_back(t.boxes), gt_labels.push_back(t.labels);
  std::vector<float*> dobj, ddel;
  for (size_t l = 0; l < levels.size(); ++l)
    dobj.push_back(dobj_[l].data()), ddel.push_back(ddeltas_[l].data());
  // The RPN's gradients for unit weights; backward scales them by its dout.
  const RpnLosses rpn = rpn_.loss(dobj, ddel, rpn_levels, N, gt_boxes, padded, 1.f, 1.f,
                                  opt_.sample_rule, seed_, stream_);
  const RoiHeadsLosses roi = roi_heads_.forward_train(pooled, proposals_, image_sizes_, gt_boxes,
                                                     gt_labels, opt_.sample_rule, seed_,
                                                     stream_ + uint64_t(N));
  losses_[0] = real(roi.classifier);
  losses_[1] = real(roi.box_reg);
  losses_[2] = real(rpn.objectness);
  losses_[3] = real(rpn.box_reg);
  return losses_;
}

void FasterRcnnNet::backward(Tensor& /*din*/, const Tensor& dout) {
  CHECK(training_, "Faster R-CNN: backward needs a training forward");
  CHECK(dout.numel() == kLosses, "Faster R-CNN: backward takes ", int(kLosses), " loss weights");
  const int64_t N = batch_;
  std::vector<Tensor> dobj, ddel, dfeat;
  for (size_t l = 0; l < dobj_.size(); ++l) {
    dobj.push_back(dobj_[l].slice0(0, N));
    ddel.push_back(ddeltas_[l].slice0(0, N));
    scale(dobj.back(), dout.data()[2]);
    scale(ddel.back(), dout.data()[3]);
    dfeat.push_back(dlevels_[l].slice0(0, N));
  }
  rpn_head_.backward(dfeat, dobj, ddel);  // dfeat '='
  std::vector<float*> droi;
  for (size_t l = 0; l < 4; ++l) droi.push_back(dfeat[l].data());
  roi_heads_.backward(droi, dout.data()[0], dout.data()[1]);  // '+='
  Tensor none;
  backbone_.backward(none, dfeat);
}

// The record's layout: one object per options struct, every field by its own name.
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(ResizeOptions, min_size, max_size, size_divisible, mean, std)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(RpnOptions, pre_nms_top_n_train, pre_nms_top_n_test, post_nms_top_n_train,
                                   post_nms_top_n_test, nms_thresh, fg_iou_thresh, bg_iou_thresh,
                                   batch_size_per_image, positive_fraction, score_thresh, min_size)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(RoiHeadsOptions, fg_iou_thresh, bg_iou_thresh, batch_size_per_image,
                                   positive_fraction, score_thresh, nms_thresh, detections_per_img,
                                   sampling_ratio, canonical_scale)

nlohmann::json options_record(const FasterRcnnOptions& o) {
  return {{"body", o.body},
          {"num_classes", o.num_classes},
          {"trainable_layers", o.trainable_layers},
          {"frozen_batchnorm", o.frozen_batchnorm},
          {"fpn_channels", o.fpn_channels},
          {"representation_size", o.representation_size},
          {"transform", o.transform},
          {"rpn", o.rpn},
          {"roi", o.roi}};
}

FasterRcnnOptions options_from_record(const nlohmann::json& j, const std::string& where) {
  FasterRcnnOptions o;
  try {
    j.at("body").get_to(o.body);
    j.at("num_classes").get_to(o.num_classes);
    j.at("trainable_layers").get_to(o.trainable_layers);
    j.at("frozen_batchnorm").get_to(o.frozen_batchnorm);
    j.at("fpn_channels").get_to(o.fpn_channels);
    j.at("representation_size").get_to(o.representation_size);
    j.at("transform").get_to(o.transform);
    j.at("rpn").get_to(o.rpn);
    j.at("roi").get_to(o.roi);
  } catch (const nlohmann::json::exception& e) {
    FAIL(where, ": not a Faster R-CNN record (", e.what(), ")");
  }
  CHECK(o.num_classes >= 2 && o.trainable_layers >= 0 && o.trainable_layers <= 5 &&
            o.transform.min_size >= 1 && o.transform.max_size >= o.transform.min_size,
        where, ": an impossible detector (", o.num_classes, " classes, trainable layers ",
        o.trainable_layers, ", sizes ", o.transform.min_size, "...", o.transform.max_size, ")");
  return o;
}

std::unique_ptr<Model> make_faster_rcnn(const std::string& name, FasterRcnnOptions options,
                                        uint64_t seed, bool initialise) {
  options.body = detection_body(name);
  auto net = std::make_unique<FasterRcnnNet>(options);
  FasterRcnnNet* raw = net.get();
  // Model's constructor registers and allocates the state, then calls init; sharing the RPN
  // head's parameters needs the allocated store, so it comes first in the init function.
  auto model = std::make_unique<Model>(
      name, std::move(net),
      ModelOptions{.num_classes = options.num_classes, .in_channels = 3, .initialise = initialise},
      [raw](Model&, uint64_t s) { raw->init(s); }, seed);
  raw->bind_shared();
  raw->freeze_backbone(model->params());
  model->set_head({"roi_heads.box_predictor"});  // what a fine-tune with other classes replaces
  return model;
}

int load_classifier_backbone(Model& detector, const std::string& path) {
  const std::string& resnet = faster_rcnn_net(detector).options().body;
  const SafetensorsReader r(path);
  const std::string body = "backbone.body.";
  std::vector<StateEntry> wanted;
  for (const StateEntry& e : detector.params().entries()) {
    if (!e.name.starts_with(body)) continue;
    StateEntry renamed = e;
    renamed.name = e.name.substr(body.size());
    CHECK(r.contains(renamed.name), path, ": no tensor '", renamed.name, "' for ", e.name,
          " (the detector's body is torchvision's ", resnet, ")");
    const Dims want = dims_of(e.shape);
    CHECK(r.info(renamed.name).shape == want, path, ": tensor '", renamed.name, "' has shape ",
          dims_str(r.info(renamed.name).shape), ", ", e.name, " needs ", dims_str(want));
    wanted.push_back(renamed);
  }
  for (const TensorInfo& t : r.tensors()) {
    const bool known = std::any_of(wanted.begin(), wanted.end(),
                                   [&](const StateEntry& e) { return e.name == t.name; });
    CHECK(known || t.name.starts_with("fc.") || t.name.ends_with("num_batches_tracked"), path,
          ": tensor '", t.name, "' is not part of a ResNet classifier's body");
  }
  for (const StateEntry& e : wanted) read_state_entry(r, e);
  return int(wanted.size());
}

FasterRcnnNet& faster_rcnn_net(Model& model) {
  auto* net = dynamic_cast<FasterRcnnNet*>(&model.root());
  CHECK(net != nullptr, "model ", model.name(), " is not a detection model");
  return *net;
}

}  // namespace mpicnn::detect
