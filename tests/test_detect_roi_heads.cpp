// Faster R-CNN's box branch (src/detect/roi_heads.h) against torchvision 0.14's RoIHeads, from
// references tests/python/detect_roi_heads_torch.py writes at test time: the training samples,
// both losses, every parameter and feature gradient, and the eval detections; plus a case
// computed by hand and the checks on bad sizes.
#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "detect/roi_heads.h"
#include "io/safetensors.h"
#include "models/model.h"
#include "testing.h"

using namespace mpicnn;
using namespace mpicnn::testing;
using namespace mpicnn::detect;

namespace {

constexpr int kChannels = 16, kRepresentation = 32, kClasses = 4, kLevels = 4;

RoiHeadsOptions test_options() {
  RoiHeadsOptions o;
  o.batch_size_per_image = 32;  // below the ~60 candidates per image: the sampler must choose
  o.canonical_scale = 32;       // so that rois of 6..150 pixels reach all four levels
  return o;
}

// The reference's inputs, and our RoiHeads loaded with its weights.
struct Case {
  TempDir dir;
  std::unique_ptr<SafetensorsReader> ref;
  RoiHeads heads{kChannels, kClasses, kRepresentation, 7, test_options()};
  ParamStore store;
  std::vector<Tensor> feats;
  std::vector<FeatureLevel> levels;
  std::vector<Size2> sizes;
  std::vector<std::vector<float>> proposals, gt_boxes;
  std::vector<std::vector<int64_t>> gt_labels;

  explicit Case(const std::string& mode) {
    const std::string path = dir / "roi_heads.safetensors";
    run_python("detect_roi_heads_torch.py", shell_quote(path) + " " + mode + " 5");
    ref = std::make_unique<SafetensorsReader>(path);
    heads.register_state(store, "roi_heads.");
    store.allocate();
    for (const StateEntry& e : store.entries()) {
      REQUIRE_MESSAGE(ref->contains("init." + e.name), "no reference tensor for ", e.name);
      StateEntry renamed = e;
      renamed.name = "init." + e.name;
      read_state_entry(*ref, renamed);
    }
    std::vector<Shape> shapes;
    for (int l = 0; l < kLevels; ++l) {
      const std::string name = "feat." + std::to_string(l);
      const std::vector<int64_t>& d = ref->info(name).shape;
      feats.push_back(Tensor::empty({d[0], d[1], d[2], d[3]}));
      ref->read(feats.back(), name);
      levels.push_back({feats.back().data(), feats.back().shape()});
      shapes.push_back(feats.back().shape());
    }
    const std::vector<int64_t> hw = ref->read_i64("image_sizes");
    Size2 largest;
    for (size_t n = 0; n < hw.size() / 2; ++n) {
      sizes.push_back({hw[2 * n], hw[2 * n + 1]});
      largest = {std::max(largest.h, hw[2 * n]), std::max(largest.w, hw[2 * n + 1])};
      const std::string k = std::to_string(n);
      proposals.push_back(ref->read_f32("proposals." + k));
      gt_boxes.push_back(ref->read_f32("gt_boxes." + k));
      gt_labels.push_back(ref->read_i64("gt_labels." + k));
    }
    heads.plan(shapes, largest, 128);
  }
};

Tensor as_tensor(const std::vector<float>& v) {
  Tensor t = Tensor::empty({int64_t(v.size())});
  std::copy(v.begin(), v.end(), t.data());
  return t;
}

// expect_close, where equal infinities (the targets of an image without ground truth) match.
void expect_close_inf(const std::string& what, const std::vector<float>& got, const Vec& want,
                      double rtol, double atol_frac) {
  REQUIRE(got.size() == want.size());
  std::vector<float> g = got;
  Vec w = want;
  for (size_t i = 0; i < g.size(); ++i)
    if (std::isinf(w[i]) && g[i] == float(w[i])) g[i] = 0, w[i] = 0;
  expect_close(what, as_tensor(g), w, rtol, atol_frac);
}

void check_training(const std::string& mode) {
  Case c(mode);
  const SafetensorsReader& ref = *c.ref;
  c.heads.set_training(true);
  const RoiHeadsLosses losses =
      c.heads.forward_train(c.levels, c.proposals, c.sizes, c.gt_boxes, c.gt_labels,
                            SampleRule::kFirst, 0, 0);
  const RoiSamples& s = c.heads.samples();
  const std::vector<int64_t> labels = ref.read_i64("labels");
  REQUIRE(s.count() == int64_t(labels.size()));
  CHECK(s.labels == labels);
  CHECK(s.matched == ref.read_i64("matched"));
  expect_close(mode + " rois", as_tensor(s.rois), ref.read_f64("rois"), 0, 0);
  expect_close_inf(mode + " regression targets", s.regression_targets,
                   ref.read_f64("regression_targets"), 1e-5, 1e-6);
  CHECK(std::accumulate(s.per_image.begin(), s.per_image.end(), int64_t(0)) == s.count());
  const int64_t positives = std::count_if(labels.begin(), labels.end(), [](int64_t l) { return l > 0; });
  CHECK(positives > 0);
  CHECK(positives < s.count());

  expect_close(mode + " class_logits", c.heads.class_logits(), ref.read_f64("class_logits"), 1e-4, 1e-5);
  expect_close(mode + " box_regression", c.heads.box_regression(), ref.read_f64("box_regression"), 1e-4, 1e-5);
  const double want_cls = ref.read_f64("loss_classifier")[0], want_box = ref.read_f64("loss_box_reg")[0];
  CHECK(losses.classifier == doctest::Approx(want_cls).epsilon(1e-5));
  CHECK(losses.box_reg == doctest::Approx(want_box).epsilon(1e-5));
  CHECK(want_box > 0);

  // Backward twice: the second pass must add as much again to both kinds of gradient.
  const Vec w = ref.read_f64("w");
  std::vector<Tensor> dfeats;
  std::vector<float*> dptr;
  for (const Tensor& f : c.feats) {
    dfeats.push_back(Tensor::zeros(f.shape()));
    dptr.push_back(dfeats.back().data());
  }
  c.store.zero_grad();
  for (int pass = 1; pass <= 2; ++pass) {
    c.heads.backward(dptr, float(w[0]), float(w[1]));
    const std::string times = std::to_string(pass) + " x ";
    for (const StateEntry& e : c.store.entries()) {
      Vec want = ref.read_f64("grad." + e.name);
      for (double& v : want) v *= pass;
      expect_close(mode + " " + times + "grad " + e.name, *e.grad, want, 1e-4, 1e-5);
    }
    for (int l = 0; l < kLevels; ++l) {
      Vec want = ref.read_f64("dfeat." + std::to_string(l));
      CHECK(max_abs(want) > 0);  // every level receives rois (canonical_scale 32)
      for (double& v : want) v *= pass;
      expect_close(mode + " " + times + "dfeat." + std::to_string(l), dfeats[size_t(l)], want, 1e-4, 1e-5);
    }
  }
}

}  // namespace

TEST_CASE("RoiHeads training matches torchvision: samples, targets, losses, gradients") {
  check_training("train");
}

TEST_CASE("RoiHeads training with an image without ground truth matches torchvision") {
  check_training("train_empty");
}

TEST_CASE("RoiHeads random sampling: the same counts as the first-k rule, seeded, valid rois") {
  Case c("train");
  const RoiSamples first = c.heads.select_training_samples(c.proposals, c.gt_boxes, c.gt_labels,
                                                           SampleRule::kFirst, 0, 0);
  const RoiSamples a = c.heads.select_training_samples(c.proposals, c.gt_boxes, c.gt_labels,
                                                       SampleRule::kRandom, 9, 100);
  const RoiSamples b = c.heads.select_training_samples(c.proposals, c.gt_boxes, c.gt_labels,
                                                       SampleRule::kRandom, 9, 100);
  const RoiSamples other = c.heads.select_training_samples(c.proposals, c.gt_boxes, c.gt_labels,
                                                           SampleRule::kRandom, 10, 100);
  CHECK(a.rois == b.rois);
  CHECK(a.rois != other.rois);
  CHECK(a.per_image == first.per_image);
  auto positives = [](const RoiSamples& s) { return std::count_if(s.labels.begin(), s.labels.end(), [](int64_t l) { return l > 0; }); };
  CHECK(positives(a) == positives(first));
  // Each chosen roi is one of its image's proposals or gt boxes, and its label is its match's.
  for (int64_t r = 0; r < a.count(); ++r) {
    const size_t n = size_t(a.rois[size_t(5 * r)]);
    const float* box = a.rois.data() + 5 * r + 1;
    bool found = false;
    for (const std::vector<float>* list : {&c.proposals[n], &c.gt_boxes[n]})
      for (size_t j = 0; j < list->size(); j += 4) found |= std::equal(box, box + 4, list->data() + j);
    CHECK(found);
    if (a.labels[size_t(r)] > 0) CHECK(a.labels[size_t(r)] == c.gt_labels[n][size_t(a.matched[size_t(r)])]);
  }
}

TEST_CASE("RoiHeads eval detections match torchvision's postprocess_detections") {
  Case c("eval");
  const SafetensorsReader& ref = *c.ref;
  c.heads.set_training(false);
  std::vector<Detections> dets;
  c.heads.detect(dets, c.levels, c.proposals, c.sizes);
  expect_close("eval class_logits", c.heads.class_logits(), ref.read_f64("class_logits"), 1e-4, 1e-5);
  expect_close("eval box_regression", c.heads.box_regression(), ref.read_f64("box_regression"), 1e-4, 1e-5);
  REQUIRE(dets.size() == 2u);
  bool capped = false, below_cap = false;
  for (size_t n = 0; n < dets.size(); ++n) {
    const std::string k = std::to_string(n);
    const std::vector<int64_t> labels = ref.read_i64("labels." + k);
    REQUIRE(dets[n].labels.size() == labels.size());
    CHECK(dets[n].labels == labels);
    expect_close("scores." + k, as_tensor(dets[n].scores), ref.read_f64("scores." + k), 1e-5, 1e-6);
    expect_close("boxes." + k, as_tensor(dets[n].boxes), ref.read_f64("boxes." + k), 1e-4, 1e-5);
    capped |= labels.size() == 100u;
    below_cap |= labels.size() < 100u && !labels.empty();
  }
  CHECK(capped);     // detections_per_img cut one image's list
  CHECK(below_cap);  // score_thresh and NMS decided the other's length
}

TEST_CASE("RoiHeads by hand: one image, constant head outputs") {
  // Zero weights make every roi's head output its biases: h6 = relu(1, 2), h7 = relu(0.5, 0),
  // logits (0, ln 3) -> softmax (1/4, 3/4), class 1's deltas (1, 0, 0, 0).
  RoiHeadsOptions o;
  o.batch_size_per_image = 4;
  o.positive_fraction = 0.5f;
  RoiHeads heads(1, 2, 2, 1, o);
  ParamStore store;
  heads.register_state(store, "");
  store.allocate();
  const float b6[] = {1, 2}, b7[] = {0.5f, -1}, bc[] = {0, std::log(3.f)};
  std::copy(b6, b6 + 2, store.find("box_head.fc6.bias")->value->data());
  std::copy(b7, b7 + 2, store.find("box_head.fc7.bias")->value->data());
  std::copy(bc, bc + 2, store.find("box_predictor.cls_score.bias")->value->data());
  store.find("box_predictor.bbox_pred.bias")->value->data()[4] = 1;
  Tensor feat = random_tensor({1, 1, 10, 10}, 3);  // one level at stride 4 of a 40x40 image
  const std::vector<FeatureLevel> levels{{feat.data(), feat.shape()}};
  heads.plan({feat.shape()}, {40, 40}, 8);

  // Proposals: the gt box itself (positive) and a far box (IoU 0: background), then the
  // appended gt (positive): 2 positives, 1 negative, all sampled, in index order.
  const std::vector<std::vector<float>> proposals{{0, 0, 10, 10, 20, 20, 30, 30}};
  const std::vector<std::vector<float>> gt{{0, 0, 10, 10}};
  const std::vector<std::vector<int64_t>> gt_labels{{1}};
  const RoiHeadsLosses l = heads.forward_train(levels, proposals, {{40, 40}}, gt, gt_labels,
                                               SampleRule::kFirst, 0, 0);
  const RoiSamples& s = heads.samples();
  CHECK(s.labels == std::vector<int64_t>{1, 0, 1});
  CHECK(s.matched == std::vector<int64_t>{0, 0, 0});
  // The far box's target: centre offset -20 over width 10, times 10; same size: log 1 = 0.
  CHECK(s.regression_targets == std::vector<float>{0, 0, 0, 0, -20, -20, 0, 0, 0, 0, 0, 0});
  CHECK(l.classifier == doctest::Approx((2 * -std::log(0.75) - std::log(0.25)) / 3).epsilon(1e-6));
  // Positives' class-1 dx is 1 against a target of 0: smooth L1 = 1 - beta / 2 each.
  CHECK(l.box_reg == doctest::Approx(2 * (1 - 1.0 / 18) / 3).epsilon(1e-6));

  store.zero_grad();
  Tensor dfeat = Tensor::zeros(feat.shape());
  heads.backward({dfeat.data()}, 2.f, 3.f);
  // d/d cls bias = 2 * mean(softmax - onehot) = 2 * ((1/4, -1/4) * 2 + (-3/4, 3/4)) / 3.
  const float* gc = store.find("box_predictor.cls_score.bias")->grad->data();
  CHECK(gc[0] == doctest::Approx(2 * -0.25 / 3).epsilon(1e-6));
  CHECK(gc[1] == doctest::Approx(2 * 0.25 / 3).epsilon(1e-6));
  // d/d bbox bias: class 1's dx gets sign(1) from each of the 2 positives, times 3 / 3.
  const float* gb = store.find("box_predictor.bbox_pred.bias")->grad->data();
  for (int i = 0; i < 8; ++i) CHECK(gb[i] == doctest::Approx(i == 4 ? 2.0 : 0.0));
  // fc7's second unit is dead (bias -1): nothing flows through it.
  CHECK(store.find("box_head.fc7.bias")->grad->data()[1] == 0);
  CHECK(max_abs(to_double(dfeat)) == 0);  // fc6's weights are zero

  // Eval: class 1 moves each proposal right by 0.1 * width; the second box overlaps the first
  // (IoU 9.5 / 10.5) with the same score, and the first in index order wins.
  std::vector<Detections> d;
  heads.detect(d, levels, {{0, 0, 10, 10, 0.5f, 0, 10.5f, 10, 20, 20, 30, 30}}, {{40, 40}});
  REQUIRE(d.size() == 1u);
  CHECK(d[0].labels == std::vector<int64_t>{1, 1});
  CHECK(d[0].boxes == std::vector<float>{1, 0, 11, 10, 21, 20, 31, 30});
  for (float sc : d[0].scores) CHECK(sc == doctest::Approx(0.75).epsilon(1e-6));
  expect_error([&] { heads.backward({dfeat.data()}, 1.f, 1.f); }, "not forward_train");
}

TEST_CASE("RoiHeads rejects sizes that do not fit its plan or its inputs") {
  RoiHeads heads(1, 2, 2, 1);
  ParamStore store;
  heads.register_state(store, "");
  store.allocate();
  heads.init(1);
  Tensor feat = Tensor::zeros({1, 1, 10, 10});
  const std::vector<FeatureLevel> levels{{feat.data(), feat.shape()}};
  std::vector<Detections> d;
  expect_error([&] { heads.detect(d, levels, {{0, 0, 5, 5}}, {{40, 40}}); }, "before plan()");
  heads.plan({feat.shape()}, {40, 40}, 2);
  expect_error([&] { heads.detect(d, levels, {{0, 0, 5, 5, 1, 1, 6, 6, 2, 2, 7, 7}}, {{40, 40}}); },
               "exceed the planned 2");
  expect_error([&] { heads.detect(d, levels, {{0, 0, 5}}, {{40, 40}}); }, "4 values per box");
  expect_error([&] {
    heads.forward_train(levels, {{0, 0, 5, 5}}, {{40, 40}}, {{0, 0, 5, 5}}, {{1, 1}},
                        SampleRule::kFirst, 0, 0);
  }, "1 gt boxes and 2 labels");
  expect_error([&] {
    heads.forward_train(levels, {{0, 0, 5, 5}}, {{40, 40}}, {{0, 0, 5, 5}}, {{7}},
                        SampleRule::kFirst, 0, 0);
  }, "gt label 7 outside [0, 2)");
}
