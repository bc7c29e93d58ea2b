// Region proposals and RPN training targets (src/detect/rpn.*, matcher.*) against torchvision
// 0.14's RegionProposalNetwork, from references tests/python/detect_rpn_torch.py writes at test
// time (the sampler's randperm replaced by the first-k rule); the matcher, sampler and losses
// on hand-worked cases.
#include <cmath>
#include <string>
#include <vector>

#include "detect/rpn.h"
#include "io/safetensors.h"
#include "testing.h"

using namespace mpicnn;
using namespace mpicnn::testing;

TEST_CASE("Matcher: thresholds, the between band and low-quality matches") {
  // Two ground truths x four predictions.
  const float iou[8] = {0.8f, 0.5f, 0.1f, 0.2f,   //
                        0.75f, 0.6f, 0.25f, 0.2f};
  std::vector<int64_t> m;
  detect::Matcher{0.7f, 0.3f, false}.match(m, iou, 2, 4);
  CHECK(m == std::vector<int64_t>{0, detect::Matcher::kBetween, detect::Matcher::kBelowLow,
                                  detect::Matcher::kBelowLow});
  // High 0.9: nothing passes, but with low-quality matches prediction 0, the best of both
  // ground truths (0.8 and 0.75), keeps its match to gt 0, its own best.
  detect::Matcher{0.9f, 0.3f, true}.match(m, iou, 2, 4);
  CHECK(m == std::vector<int64_t>{0, detect::Matcher::kBetween, detect::Matcher::kBelowLow,
                                  detect::Matcher::kBelowLow});
  const float tie[4] = {0.4f, 0.4f, 0.1f, 0.0f};  // one gt, its best twice
  detect::Matcher{0.7f, 0.3f, true}.match(m, tie, 1, 4);
  CHECK(m == std::vector<int64_t>{0, 0, detect::Matcher::kBelowLow, detect::Matcher::kBelowLow});
}

TEST_CASE("Sampler: positive fraction, first-k rule, random draws are a subset and repeatable") {
  std::vector<int64_t> labels(100, 0);
  for (int i = 0; i < 10; ++i) labels[size_t(3 * i)] = 1;
  labels[1] = -1;
  const detect::Sampler s{16, 0.25f};
  std::vector<int64_t> pos, neg;
  s.sample(pos, neg, labels.data(), 100, detect::SampleRule::kFirst, Rng(1, 0));
  CHECK(pos == std::vector<int64_t>{0, 3, 6, 9});
  REQUIRE(neg.size() == 12u);
  CHECK(neg.front() == 2);  // index 1 is ignored
  std::vector<int64_t> pos2, neg2;
  s.sample(pos, neg, labels.data(), 100, detect::SampleRule::kRandom, Rng(5, 2));
  s.sample(pos2, neg2, labels.data(), 100, detect::SampleRule::kRandom, Rng(5, 2));
  CHECK(pos == pos2);
  CHECK(neg == neg2);
  CHECK(pos.size() == 4u);
  CHECK(neg.size() == 12u);
  for (int64_t i : pos) CHECK(labels[size_t(i)] == 1);
  for (int64_t i : neg) CHECK(labels[size_t(i)] == 0);
  s.sample(pos2, neg2, labels.data(), 100, detect::SampleRule::kRandom, Rng(6, 2));
  CHECK((pos != pos2 || neg != neg2));
}

TEST_CASE("smooth L1 and BCE with logits: values and gradients by hand") {
  const float pred[3] = {0.05f, 1.f, -2.f}, target[3] = {0.f, 0.f, 0.f};
  float d[3];
  // beta 1/9: 0.05 is inside (0.5 z^2 / beta), 1 and 2 outside (z - beta / 2).
  const double l = detect::smooth_l1(d, pred, target, 3, 1.f / 9.f, 2.f);
  CHECK(l == doctest::Approx(0.5 * 0.0025 * 9 + (1 - 1.0 / 18) + (2 - 1.0 / 18)).epsilon(1e-6));
  CHECK(d[0] == doctest::Approx(2 * 0.05 * 9));
  CHECK(d[1] == 2.f);
  CHECK(d[2] == -2.f);
  const float x[2] = {0.f, 30.f}, y[2] = {1.f, 0.f};
  float dx[2];
  const double b = detect::bce_with_logits(dx, x, y, 2, 1.f);
  CHECK(b == doctest::Approx(std::log(2.0) + 30.0).epsilon(1e-6));
  CHECK(dx[0] == doctest::Approx(-0.5));
  CHECK(dx[1] == doctest::Approx(1.0));
}

namespace {

// batch: the sampler's anchors per image; 256 as torchvision, or more than there are anchors,
// so that every positive and negative counts (which the first-k rule alone would not show).
void check_rpn(int64_t batch) {
  TempDir dir;
  const std::string path = (dir.path / "rpn.safetensors").string();
  run_python("detect_rpn_torch.py", shell_quote(path) + " 3 " + std::to_string(batch));
  SafetensorsReader ref(path);
  const int64_t N = 2, A = 3;
  const std::vector<std::array<int64_t, 2>> grids = {{32, 40}, {16, 20}, {8, 10}, {4, 5}, {2, 3}};
  const detect::Size2 padded{128, 160};
  const std::vector<detect::Size2> sizes = {{120, 160}, {128, 150}};

  std::vector<std::vector<float>> obj, del;
  std::vector<detect::RpnLevel> levels;
  for (size_t l = 0; l < grids.size(); ++l) {
    obj.push_back(ref.read_f32("obj." + std::to_string(l)));
    del.push_back(ref.read_f32("deltas." + std::to_string(l)));
  }
  for (size_t l = 0; l < grids.size(); ++l)
    levels.push_back({obj[l].data(), del[l].data(), A, grids[l][0], grids[l][1]});

  detect::RpnOptions o;
  o.pre_nms_top_n_train = 300, o.pre_nms_top_n_test = 200;
  o.post_nms_top_n_train = 100, o.post_nms_top_n_test = 50;
  o.batch_size_per_image = batch;
  detect::Rpn rpn(o, detect::AnchorGenerator({{32}, {64}, {128}, {256}, {512}}, {{0.5f, 1.f, 2.f}}));
  CHECK(rpn.anchors(levels, padded) == ref.read_f32("anchors"));

  for (const char* mode : {"train", "eval"}) {
    std::vector<std::vector<float>> proposals;
    rpn.propose(proposals, levels, N, sizes, padded, std::string(mode) == "train");
    for (int64_t n = 0; n < N; ++n) {
      const std::vector<float> want = ref.read_f32(std::string("proposals_") + mode + "." + std::to_string(n));
      REQUIRE_MESSAGE(proposals[size_t(n)].size() == want.size(), mode, " image ", n);
      for (size_t i = 0; i < want.size(); ++i)
        CHECK_MESSAGE(std::fabs(proposals[size_t(n)][i] - want[i]) <= 1e-4f * std::max(1.f, std::fabs(want[i])),
                      mode, " image ", n, " value ", i);
    }
  }

  std::vector<std::vector<float>> gt = {ref.read_f32("gt.0"), ref.read_f32("gt.1")};
  std::vector<std::vector<float>> dobj, ddel;
  std::vector<float*> dobj_p, ddel_p;
  for (size_t l = 0; l < grids.size(); ++l) {
    dobj.emplace_back(obj[l].size(), 7.f);  // overwritten (=), not added to
    ddel.emplace_back(del[l].size(), 7.f);
  }
  for (size_t l = 0; l < grids.size(); ++l) dobj_p.push_back(dobj[l].data()), ddel_p.push_back(ddel[l].data());
  const detect::RpnLosses losses = rpn.loss(dobj_p, ddel_p, levels, N, gt, padded, 1.f, 1.f,
                                            detect::SampleRule::kFirst, 0, 0);
  CHECK(losses.objectness == doctest::Approx(ref.read_f32("loss_objectness")[0]).epsilon(1e-5));
  CHECK(losses.box_reg == doctest::Approx(ref.read_f32("loss_rpn_box_reg")[0]).epsilon(1e-5));
  for (size_t l = 0; l < grids.size(); ++l) {
    const std::string L = std::to_string(l);
    const Tensor go = Tensor::view(dobj[l].data(), {int64_t(dobj[l].size())});
    const Tensor gd = Tensor::view(ddel[l].data(), {int64_t(ddel[l].size())});
    expect_close("dobj." + L, go, ref.read_f64("dobj." + L), 1e-5, 1e-6);
    expect_close("ddeltas." + L, gd, ref.read_f64("ddeltas." + L), 1e-5, 1e-6);
  }
}

}  // namespace

TEST_CASE("RPN proposals, anchor targets, losses and gradients match torchvision") {
  check_rpn(256);
}

TEST_CASE("RPN losses match torchvision when every anchor is sampled") {
  check_rpn(100000);
}
