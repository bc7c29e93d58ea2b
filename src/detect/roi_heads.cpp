// The box branch of Faster R-CNN. The head is four Linear layers on planned buffers; ReLU is
// applied in place on fc6/fc7's outputs, whose signs then also mask the backward (torch's
// threshold_backward reads the output too). Sampling and postprocessing follow roi_heads.py
// step for step, so each intermediate can be compared with torchvision's.
#include "detect/roi_heads.h"

#include <algorithm>
#include <cmath>
#include <iterator>

#include "core/check.h"

namespace mpicnn::detect {

namespace {

constexpr float kBoxBeta = 1.f / 9.f;    // fastrcnn_loss's smooth L1 beta
constexpr float kMinBoxSize = 1e-2f;     // postprocess_detections' remove_small_boxes

void relu_inplace(Tensor& t) {
  real* p = t.data();
  const int64_t n = t.numel();
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) p[i] = p[i] > 0 ? p[i] : 0;
}

// d *= (out > 0).
void relu_backward_inplace(Tensor& d, const Tensor& out) {
  real* g = d.data();
  const real* y = out.data();
  const int64_t n = d.numel();
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) g[i] = y[i] > 0 ? g[i] : 0;
}

}  // namespace

RoiHeads::RoiHeads(int in_channels, int num_classes, int representation_size, int resolution,
                   const RoiHeadsOptions& options)
    : in_channels_(in_channels),
      num_classes_(num_classes),
      representation_(representation_size),
      resolution_(resolution),
      opt_(options),
      pool_(resolution, options.sampling_ratio, options.canonical_scale, 4),
      fc6_(in_channels * resolution * resolution, representation_size),
      fc7_(representation_size, representation_size),
      cls_score_(representation_size, num_classes),
      bbox_pred_(representation_size, 4 * num_classes) {
  CHECK(num_classes >= 2, "RoiHeads: num_classes counts the background and must be >= 2, got ",
        num_classes);
  CHECK(options.batch_size_per_image >= 1 && options.detections_per_img >= 0,
        "RoiHeads: batch_size_per_image must be >= 1 and detections_per_img >= 0");
}

void RoiHeads::register_state(ParamStore& store, const std::string& prefix) {
  prefix_ = prefix;
  fc6_.register_state(store, prefix + "box_head.fc6.");
  fc7_.register_state(store, prefix + "box_head.fc7.");
  cls_score_.register_state(store, prefix + "box_predictor.cls_score.");
  bbox_pred_.register_state(store, prefix + "box_predictor.bbox_pred.");
}

void RoiHeads::init(uint64_t seed) {
  for_each_layer([seed](Layer& l, const std::string&) { l.reset_parameters(seed); });
}

void RoiHeads::for_each_layer(const std::function<void(Layer&, const std::string&)>& fn) {
  fn(fc6_, prefix_ + "box_head.fc6.");
  fn(fc7_, prefix_ + "box_head.fc7.");
  fn(cls_score_, prefix_ + "box_predictor.cls_score.");
  fn(bbox_pred_, prefix_ + "box_predictor.bbox_pred.");
}

void RoiHeads::set_training(bool training) {
  for_each_layer([training](Layer& l, const std::string&) { l.set_training(training); });
}

void RoiHeads::plan(const std::vector<Shape>& levels, Size2 image, int64_t max_rois) {
  CHECK(!levels.empty(), "RoiHeads::plan: no feature levels");
  CHECK(levels[0].ndim == 4 && levels[0][1] == in_channels_, "RoiHeads::plan: level 0 is ",
        levels[0].str(), ", expected (N, ", in_channels_, ", H, W)");
  CHECK(max_rois >= 1, "RoiHeads::plan: max_rois must be >= 1, got ", max_rois);
  pool_.plan(levels, image.h, image.w, max_rois);
  planned_image_ = image;
  max_rois_ = max_rois;
  const int64_t flat = int64_t(in_channels_) * resolution_ * resolution_;
  pooled_ = Tensor::empty({max_rois, flat});
  dpooled_ = Tensor::empty({max_rois, flat});
  for (Tensor* t : {&h6_, &h7_, &dh6_, &dh7_, &dh7b_}) *t = Tensor::empty({max_rois, representation_});
  for (Tensor* t : {&logits_, &probs_, &dlogits_}) *t = Tensor::empty({max_rois, num_classes_});
  box_reg_ = Tensor::empty({max_rois, 4 * int64_t(num_classes_)});
  dbox_ = Tensor::empty({max_rois, 4 * int64_t(num_classes_)});
  rois_.reserve(size_t(5 * max_rois));
  decoded_.reserve(size_t(4 * num_classes_ * max_rois));
  samples_.rois.reserve(size_t(5 * max_rois));
  samples_.labels.reserve(size_t(max_rois));
  samples_.matched.reserve(size_t(max_rois));
  samples_.regression_targets.reserve(size_t(4 * max_rois));
  R_ = 0;
}

const RoiSamples& RoiHeads::select_training_samples(
    const std::vector<std::vector<float>>& proposals, const std::vector<std::vector<float>>& gt_boxes,
    const std::vector<std::vector<int64_t>>& gt_labels, SampleRule rule, uint64_t seed,
    uint64_t stream_base) {
  const size_t N = proposals.size();
  CHECK(gt_boxes.size() == N && gt_labels.size() == N, "RoiHeads: ", N, " proposal lists, ",
        gt_boxes.size(), " box lists and ", gt_labels.size(), " label lists");
  const Matcher matcher{opt_.fg_iou_thresh, opt_.bg_iou_thresh, false};
  const Sampler sampler{opt_.batch_size_per_image, opt_.positive_fraction};
  RoiSamples& s = samples_;
  s.rois.clear(), s.labels.clear(), s.matched.clear(), s.regression_targets.clear();
  s.per_image.assign(N, 0);
  const float zero_box[4] = {0, 0, 0, 0};  // torchvision's stand-in gt of an empty image
  for (size_t n = 0; n < N; ++n) {
    const std::vector<float>& p = proposals[n];
    const std::vector<float>& g = gt_boxes[n];
    CHECK(p.size() % 4 == 0 && g.size() % 4 == 0, "RoiHeads: image ", n,
          ": box lists must hold 4 values per box");
    const int64_t m = int64_t(g.size() / 4);
    CHECK(int64_t(gt_labels[n].size()) == m, "RoiHeads: image ", n, " has ", m, " gt boxes and ",
          gt_labels[n].size(), " labels");
    const int64_t total = int64_t(p.size() / 4) + m;
    all_boxes_.assign(p.begin(), p.end());  // add_gt_proposals
    all_boxes_.insert(all_boxes_.end(), g.begin(), g.end());
    labels_.assign(size_t(total), 0);
    matches_.assign(size_t(total), 0);
    if (m > 0) {
      iou_.resize(size_t(m * total));
      box_iou(iou_.data(), g.data(), m, all_boxes_.data(), total);
      matcher.match(matches_, iou_.data(), m, total);
      for (int64_t j = 0; j < total; ++j) {
        const int64_t k = matches_[size_t(j)];
        labels_[size_t(j)] = k >= 0 ? gt_labels[n][size_t(k)] : k == Matcher::kBelowLow ? 0 : -1;
        matches_[size_t(j)] = std::max<int64_t>(k, 0);
      }
    }
    sampler.sample(pos_, neg_, labels_.data(), total, rule, Rng(seed, stream_base + n));
    // subsample(): torch.where(pos | neg), i.e. positives and negatives in index order.
    chosen_.clear();
    std::merge(pos_.begin(), pos_.end(), neg_.begin(), neg_.end(), std::back_inserter(chosen_));
    for (int64_t j : chosen_) {
      const float* box = all_boxes_.data() + 4 * j;
      const int64_t k = matches_[size_t(j)];
      s.rois.push_back(float(n));
      s.rois.insert(s.rois.end(), box, box + 4);
      s.labels.push_back(labels_[size_t(j)]);
      s.matched.push_back(k);
      float t[4];
      coder_.encode(t, m > 0 ? g.data() + 4 * k : zero_box, box, 1);
      s.regression_targets.insert(s.regression_targets.end(), t, t + 4);
    }
    s.per_image[n] = int64_t(chosen_.size());
  }
  return s;
}

void RoiHeads::run_head(const std::vector<FeatureLevel>& levels) {
  CHECK(max_rois_ > 0, "RoiHeads: forward before plan()");
  R_ = int64_t(rois_.size() / 5);
  CHECK(R_ <= max_rois_, "RoiHeads: ", R_, " rois exceed the planned ", max_rois_);
  CHECK(!levels.empty() && levels[0].shape[1] == in_channels_, "RoiHeads: features must have ",
        in_channels_, " channels");
  if (R_ == 0) return;
  Tensor pooled = pooled_.slice0(0, R_), h6 = h6_.slice0(0, R_), h7 = h7_.slice0(0, R_);
  Tensor logits = logits_.slice0(0, R_), box = box_reg_.slice0(0, R_);
  pool_.forward(pooled.data(), levels, rois_.data(), R_, planned_image_.h, planned_image_.w);
  fc6_.forward(h6, pooled);  // (R, C, res, res) read as flatten(start_dim=1)
  relu_inplace(h6);
  fc7_.forward(h7, h6);
  relu_inplace(h7);
  cls_score_.forward(logits, h7);
  bbox_pred_.forward(box, h7);
}

void RoiHeads::softmax() {
  const int64_t C = num_classes_;
  const real* x = logits_.data();
  real* p = probs_.data();
  for (int64_t i = 0; i < R_; ++i) {
    const real* xi = x + i * C;
    real* pi = p + i * C;
    const real mx = *std::max_element(xi, xi + C);
    real sum = 0;
    for (int64_t c = 0; c < C; ++c) sum += (pi[c] = std::exp(xi[c] - mx));
    for (int64_t c = 0; c < C; ++c) pi[c] /= sum;
  }
}

RoiHeadsLosses RoiHeads::forward_train(const std::vector<FeatureLevel>& levels,
                                       const std::vector<std::vector<float>>& proposals,
                                       const std::vector<Size2>& image_sizes,
                                       const std::vector<std::vector<float>>& gt_boxes,
                                       const std::vector<std::vector<int64_t>>& gt_labels,
                                       SampleRule rule, uint64_t seed, uint64_t stream_base) {
  // image_sizes only decide the pooling scales, which plan() fixed (torchvision caches them).
  CHECK(image_sizes.size() == proposals.size(), "RoiHeads: ", image_sizes.size(),
        " image sizes for ", proposals.size(), " images");
  select_training_samples(proposals, gt_boxes, gt_labels, rule, seed, stream_base);
  rois_ = samples_.rois;
  run_head(levels);
  RoiHeadsLosses losses;
  if (R_ == 0) return losses;  // torchvision would give a NaN mean; nothing to learn from
  softmax();
  const int64_t C = num_classes_;
  for (int64_t i = 0; i < R_; ++i) {
    const int64_t label = samples_.labels[size_t(i)];
    CHECK(label >= 0 && label < C, "RoiHeads: gt label ", label, " outside [0, ", C, ")");
    // -log softmax in double, from the float logits.
    const real* xi = logits_.data() + i * C;
    const double mx = *std::max_element(xi, xi + C);
    double sum = 0;
    for (int64_t c = 0; c < C; ++c) sum += std::exp(double(xi[c]) - mx);
    losses.classifier += mx + std::log(sum) - double(xi[label]);
    if (label > 0)
      losses.box_reg += smooth_l1(nullptr, box_reg_.data() + i * 4 * C + 4 * label,
                                  samples_.regression_targets.data() + 4 * i, 4, kBoxBeta, 1.f);
  }
  losses.classifier /= double(R_);
  losses.box_reg /= double(R_);
  return losses;
}

void RoiHeads::backward(const std::vector<float*>& dfeats, float w_cls, float w_box) {
  if (R_ == 0) return;
  CHECK(int64_t(samples_.labels.size()) == R_,
        "RoiHeads::backward: the last forward was not forward_train");
  const int64_t C = num_classes_;
  const float inv = 1.f / float(R_);
  Tensor dlogits = dlogits_.slice0(0, R_), dbox = dbox_.slice0(0, R_);
  // Cross entropy (mean): d logits = (softmax - onehot) / R.
  for (int64_t i = 0; i < R_; ++i) {
    const int64_t label = samples_.labels[size_t(i)];
    for (int64_t c = 0; c < C; ++c)
      dlogits.data()[i * C + c] = w_cls * inv * (probs_.data()[i * C + c] - (c == label ? 1.f : 0.f));
  }
  dbox.fill(0);
  for (int64_t i = 0; i < R_; ++i) {
    const int64_t label = samples_.labels[size_t(i)];
    if (label <= 0) continue;
    const int64_t at = i * 4 * C + 4 * label;
    smooth_l1(dbox.data() + at, box_reg_.data() + at, samples_.regression_targets.data() + 4 * i,
              4, kBoxBeta, w_box * inv);
  }
  Tensor pooled = pooled_.slice0(0, R_), h6 = h6_.slice0(0, R_), h7 = h7_.slice0(0, R_);
  Tensor logits = logits_.slice0(0, R_), box = box_reg_.slice0(0, R_);
  Tensor dh7 = dh7_.slice0(0, R_), dh7b = dh7b_.slice0(0, R_), dh6 = dh6_.slice0(0, R_);
  Tensor dpooled = dpooled_.slice0(0, R_);
  cls_score_.backward(dh7, dlogits, h7, logits);
  bbox_pred_.backward(dh7b, dbox, h7, box);
  real* a = dh7.data();
  const real* b = dh7b.data();
  const int64_t n = dh7.numel();
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) a[i] += b[i];
  relu_backward_inplace(dh7, h7);
  fc7_.backward(dh6, dh7, h6, h7);
  relu_backward_inplace(dh6, h6);
  fc6_.backward(dpooled, dh6, pooled, h6);
  pool_.backward(dfeats, dpooled.data(), rois_.data(), R_);
}

void RoiHeads::detect(std::vector<Detections>& out, const std::vector<FeatureLevel>& levels,
                      const std::vector<std::vector<float>>& proposals,
                      const std::vector<Size2>& image_sizes) {
  const size_t N = proposals.size();
  CHECK(image_sizes.size() == N, "RoiHeads: ", image_sizes.size(), " image sizes for ", N,
        " images");
  rois_.clear();
  all_boxes_.clear();
  for (size_t n = 0; n < N; ++n) {
    const std::vector<float>& p = proposals[n];
    CHECK(p.size() % 4 == 0, "RoiHeads: image ", n, ": proposals must hold 4 values per box");
    for (size_t j = 0; j < p.size(); j += 4) {
      rois_.push_back(float(n));
      rois_.insert(rois_.end(), p.begin() + long(j), p.begin() + long(j) + 4);
    }
    all_boxes_.insert(all_boxes_.end(), p.begin(), p.end());
  }
  // No samples: backward() refuses to run after an eval forward.
  samples_.rois.clear(), samples_.labels.clear(), samples_.matched.clear();
  samples_.regression_targets.clear(), samples_.per_image.clear();
  run_head(levels);
  out.assign(N, Detections{});
  if (R_ == 0) return;
  softmax();
  const int64_t C = num_classes_;
  decoded_.resize(size_t(R_ * C * 4));
  coder_.decode(decoded_.data(), box_reg_.data(), all_boxes_.data(), R_, C);
  int64_t begin = 0;
  for (size_t n = 0; n < N; ++n) {
    const int64_t count = int64_t(proposals[n].size() / 4);
    float* boxes = decoded_.data() + begin * C * 4;
    clip_boxes_to_image(boxes, count * C, image_sizes[n].h, image_sizes[n].w);
    // Every (roi, foreground class) is a candidate, roi-major as torchvision's reshape(-1).
    cand_boxes_.clear(), cand_scores_.clear(), cand_labels_.clear();
    for (int64_t i = 0; i < count; ++i)
      for (int64_t c = 1; c < C; ++c) {
        const float score = probs_.data()[(begin + i) * C + c];
        if (!(score > opt_.score_thresh)) continue;
        const float* b = boxes + (i * C + c) * 4;
        cand_boxes_.insert(cand_boxes_.end(), b, b + 4);
        cand_scores_.push_back(score);
        cand_labels_.push_back(c);
      }
    remove_small_boxes(small_keep_, cand_boxes_.data(), int64_t(cand_scores_.size()), kMinBoxSize);
    // Compact in place: small_keep_ is increasing, so each kept entry moves down or stays.
    for (size_t j = 0; j < small_keep_.size(); ++j) {
      const size_t k = size_t(small_keep_[j]);
      std::copy_n(cand_boxes_.begin() + long(4 * k), 4, cand_boxes_.begin() + long(4 * j));
      cand_scores_[j] = cand_scores_[k];
      cand_labels_[j] = cand_labels_[k];
    }
    const int64_t m = int64_t(small_keep_.size());
    batched_nms(keep_, cand_boxes_.data(), cand_scores_.data(), cand_labels_.data(), m,
                opt_.nms_thresh);
    if (int64_t(keep_.size()) > opt_.detections_per_img) keep_.resize(size_t(opt_.detections_per_img));
    Detections& d = out[n];
    for (int64_t k : keep_) {
      d.boxes.insert(d.boxes.end(), cand_boxes_.begin() + 4 * k, cand_boxes_.begin() + 4 * k + 4);
      d.scores.push_back(cand_scores_[size_t(k)]);
      d.labels.push_back(cand_labels_[size_t(k)]);
    }
    begin += count;
  }
}

}  // namespace mpicnn::detect
