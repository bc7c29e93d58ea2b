// Detection metrics (src/detect/map_eval): hand-worked VOC and COCO cases, a naive reference
// written here (brute-force matching, precision and recall counted per rank, envelope as the max
// over later ranks, recall thresholds by linear search) on random scenes, the errors, the table,
// and the COCO thresholds against numpy (tests/python/map_thresholds_numpy.py).
#include <cstdlib>
#include <fstream>
#include <random>
#include <set>

#include "detect/map_eval.h"
#include "testing.h"

using namespace mpicnn;
using namespace mpicnn::detect;
using namespace mpicnn::testing;

namespace {

GroundTruth gt(int64_t image, int32_t label, float x1, float y1, float x2, float y2, bool difficult = false,
               bool crowd = false) {
  GroundTruth g;
  g.image = image, g.label = label, g.difficult = difficult, g.iscrowd = crowd;
  g.box[0] = x1, g.box[1] = y1, g.box[2] = x2, g.box[3] = y2;
  return g;
}

Detection det(int64_t image, int32_t label, float x1, float y1, float x2, float y2, float score) {
  Detection d;
  d.image = image, d.label = label, d.score = score;
  d.box[0] = x1, d.box[1] = y1, d.box[2] = x2, d.box[3] = y2;
  return d;
}

// A detection that is exactly the given ground truth box (IoU 1 at every threshold).
Detection on(const GroundTruth& g, float score) {
  return det(g.image, g.label, g.box[0], g.box[1], g.box[2], g.box[3], score);
}

// pycocotools adds 2^-52 to every precision denominator, which moves the hand-worked values below
// by less than 1e-15.
const double kTol = 1e-12;

// ---- the naive reference ---------------------------------------------------------------------

double ref_iou(const float* a, const float* b, bool crowd) {
  const double iw = std::max(0.0, std::min<double>(a[2], b[2]) - std::max<double>(a[0], b[0]));
  const double ih = std::max(0.0, std::min<double>(a[3], b[3]) - std::max<double>(a[1], b[1]));
  const double inter = iw * ih;
  if (inter == 0) return 0;
  const double area_a = (double(a[2]) - a[0]) * (double(a[3]) - a[1]);
  const double area_b = (double(b[2]) - b[0]) * (double(b[3]) - b[1]);
  return crowd ? inter / area_a : inter / (area_a + area_b - inter);
}

bool ref_ignored(const GroundTruth& g) { return g.difficult || g.iscrowd; }

int64_t ref_npos(const std::vector<GroundTruth>& gts, int32_t label) {
  int64_t n = 0;
  for (const GroundTruth& g : gts) n += g.label == label && !ref_ignored(g);
  return n;
}

// Positions in `items` of the entries `pick` accepts, best first by repeated selection of the
// highest remaining score; on equal scores `before` decides.
template <class Pick, class Before>
std::vector<size_t> ref_rank(size_t n, Pick pick, const std::vector<float>& score, Before before) {
  std::vector<size_t> left, ranked;
  for (size_t i = 0; i < n; ++i)
    if (pick(i)) left.push_back(i);
  while (!left.empty()) {
    size_t best = 0;
    for (size_t j = 1; j < left.size(); ++j)
      if (score[left[j]] > score[left[best]] || (score[left[j]] == score[left[best]] && before(left[j], left[best])))
        best = j;
    ranked.push_back(left[best]);
    left.erase(left.begin() + long(best));
  }
  return ranked;
}

// Area under the precision envelope; kind per rank: 1 true positive, 0 false positive, 2 ignored.
double ref_voc_area(const std::vector<int>& kind, int64_t npos) {
  const size_t n = kind.size();
  std::vector<double> prec(n), rec(n);
  for (size_t k = 0; k < n; ++k) {
    double tp = 0, fp = 0;
    for (size_t j = 0; j <= k; ++j) tp += kind[j] == 1, fp += kind[j] == 0;
    rec[k] = tp / double(npos);
    prec[k] = tp + fp == 0 ? 0 : tp / (tp + fp);
  }
  double ap = 0;
  for (size_t k = 0; k < n; ++k) {
    double env = 0;
    for (size_t j = k; j < n; ++j) env = std::max(env, prec[j]);
    ap += (rec[k] - (k == 0 ? 0.0 : rec[k - 1])) * env;
  }
  return ap;
}

double ref_voc_ap(const std::vector<GroundTruth>& gts, const std::vector<Detection>& dets, int32_t label) {
  const int64_t npos = ref_npos(gts, label);
  if (npos == 0) return kNaN;
  std::vector<float> score;
  for (const Detection& d : dets) score.push_back(d.score);
  const std::vector<size_t> ranked = ref_rank(
      dets.size(), [&](size_t i) { return dets[i].label == label; }, score, [](size_t a, size_t b) { return a < b; });
  std::vector<bool> found(gts.size(), false);
  std::vector<int> kind;
  for (size_t di : ranked) {
    // the best box of the image and class, taken or not (first one on equal IoU)
    double best = -1;
    long bg = -1;
    for (size_t g = 0; g < gts.size(); ++g) {
      if (gts[g].image != dets[di].image || gts[g].label != label) continue;
      const double ov = ref_iou(dets[di].box, gts[g].box, false);
      if (bg < 0 || ov > best) best = ov, bg = long(g);
    }
    if (bg < 0 || !(best >= 0.5)) kind.push_back(0);
    else if (ref_ignored(gts[size_t(bg)])) kind.push_back(2);
    else if (found[size_t(bg)]) kind.push_back(0);
    else found[size_t(bg)] = true, kind.push_back(1);
  }
  return ref_voc_area(kind, npos);
}

// COCO AP per IoU threshold (NaN when the class has no counted box).
std::array<double, 10> ref_coco_ap(const std::vector<GroundTruth>& gts, const std::vector<Detection>& dets,
                                   int32_t label, int64_t max_dets) {
  std::array<double, 10> ap;
  const int64_t npig = ref_npos(gts, label);
  if (npig == 0) return ap.fill(kNaN), ap;
  std::set<int64_t> images;
  for (const GroundTruth& g : gts)
    if (g.label == label) images.insert(g.image);
  for (const Detection& d : dets)
    if (d.label == label) images.insert(d.image);
  std::vector<float> score;
  for (const Detection& d : dets) score.push_back(d.score);
  const double eps = std::nextafter(1.0, 2.0) - 1.0;
  for (int t = 0; t < 10; ++t) {
    const double thr = std::min(coco_iou_thresholds()[size_t(t)], 1 - 1e-10);
    std::vector<size_t> kept;  // detections surviving the per-image cap
    std::vector<int> kind(dets.size(), -1);
    for (int64_t image : images) {
      std::vector<size_t> mine = ref_rank(
          dets.size(), [&](size_t i) { return dets[i].label == label && dets[i].image == image; }, score,
          [](size_t a, size_t b) { return a < b; });
      if (int64_t(mine.size()) > max_dets) mine.resize(size_t(max_dets));
      std::vector<bool> used(gts.size(), false);
      for (size_t di : mine) {
        kept.push_back(di);
        // counted boxes first: the free one with the highest IoU >= thr (the later one on equal
        // IoU); only when none qualifies, the ignored boxes the same way (crowds never get used up)
        long m = -1;
        for (int phase = 0; phase < 2 && m < 0; ++phase) {
          double best = thr;
          for (size_t g = 0; g < gts.size(); ++g) {
            const GroundTruth& b = gts[g];
            if (b.image != image || b.label != label || ref_ignored(b) != (phase == 1)) continue;
            if (used[g] && !b.iscrowd) continue;
            const double ov = ref_iou(dets[di].box, b.box, b.iscrowd);
            if (ov >= best) best = ov, m = long(g);
          }
        }
        if (m < 0) kind[di] = 0;
        else kind[di] = ref_ignored(gts[size_t(m)]) ? 2 : 1, used[size_t(m)] = true;
      }
    }
    // all kept detections, best first; equal scores: lower image id, then input order
    const std::vector<size_t> ranked = ref_rank(
        dets.size(), [&](size_t i) { return kind[i] >= 0; }, score,
        [&](size_t a, size_t b) { return dets[a].image != dets[b].image ? dets[a].image < dets[b].image : a < b; });
    const size_t n = ranked.size();
    std::vector<double> rc(n), pr(n);
    for (size_t k = 0; k < n; ++k) {
      double tp = 0, fp = 0;
      for (size_t j = 0; j <= k; ++j) tp += kind[ranked[j]] == 1, fp += kind[ranked[j]] == 0;
      rc[k] = tp / double(npig);
      pr[k] = tp / (fp + tp + eps);
    }
    double sum = 0;
    for (double r : coco_recall_thresholds()) {
      for (size_t k = 0; k < n; ++k) {
        if (rc[k] < r) continue;
        double env = 0;
        for (size_t j = k; j < n; ++j) env = std::max(env, pr[j]);
        sum += env;
        break;
      }
    }
    ap[size_t(t)] = sum / 101;
  }
  return ap;
}

void expect_same(const char* what, double got, double want) {
  if (std::isnan(want)) {
    CHECK_MESSAGE(std::isnan(got), what, ": got ", got, ", want NaN");
  } else {
    CHECK_MESSAGE(std::abs(got - want) <= kTol, what, ": got ", got, ", want ", want);
  }
}

// ---- random scenes ---------------------------------------------------------------------------

struct Scene {
  std::vector<GroundTruth> gts;
  std::vector<Detection> dets;
  int32_t num_classes;
  int64_t max_dets;
};

Scene random_scene(uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto uni = [&](double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); };
  auto coin = [&](double p) { return uni(0, 1) < p; };
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  Scene s;
  s.num_classes = pick(2, 5);
  s.max_dets = coin(0.3) ? pick(1, 4) : 100;
  const bool tied_scores = coin(0.4);  // scores on a coarse grid, so ties across and within images
  auto score = [&] { return tied_scores ? float(pick(0, 10)) / 10 : float(uni(0, 1)); };
  auto box = [&](double size) {
    const double x = uni(0, 100), y = uni(0, 100);
    return std::array<float, 4>{float(x), float(y), float(x + uni(1, size)), float(y + uni(1, size))};
  };
  const int images = pick(1, 8);
  for (int im = 0; im < images; ++im) {
    const int64_t image = 1000 - 37 * im;  // ids neither contiguous nor in increasing input order
    const int n_gt = pick(0, 6);
    for (int k = 0; k < n_gt; ++k) {
      const bool crowd = coin(0.07);
      const auto b = box(crowd ? 80 : 40);
      // label 0 rarely gets ground truth, as torchvision's background never does
      const int32_t label = int32_t(coin(0.1) ? 0 : pick(1, s.num_classes - 1));
      s.gts.push_back(gt(image, label, b[0], b[1], b[2], b[3], !crowd && coin(0.15), crowd));
    }
    // detections of this image's objects: exact, jittered or with a wrong label
    for (size_t g = s.gts.size() - size_t(n_gt); g < s.gts.size(); ++g) {
      const int copies = coin(0.2) ? 0 : pick(1, 3);
      for (int c = 0; c < copies; ++c) {
        const GroundTruth& o = s.gts[g];
        const float w = o.box[2] - o.box[0], h = o.box[3] - o.box[1];
        std::array<float, 4> b;
        for (int i = 0; i < 4; ++i) b[size_t(i)] = coin(0.1) ? o.box[i] : o.box[i] + float(uni(-0.2, 0.2)) * (i % 2 ? h : w);
        if (b[2] < b[0]) std::swap(b[0], b[2]);
        if (b[3] < b[1]) std::swap(b[1], b[3]);
        const int32_t label = coin(0.1) ? int32_t(pick(0, s.num_classes - 1)) : o.label;
        s.dets.push_back(det(image, label, b[0], b[1], b[2], b[3], score()));
      }
    }
    for (int k = pick(0, 5); k > 0; --k) {  // unrelated false positives
      const auto b = box(40);
      s.dets.push_back(det(image, int32_t(pick(0, s.num_classes - 1)), b[0], b[1], b[2], b[3], score()));
    }
  }
  if (coin(0.5))  // an image without any ground truth
    for (int k = pick(1, 3); k > 0; --k) {
      const auto b = box(40);
      s.dets.push_back(det(5, int32_t(pick(0, s.num_classes - 1)), b[0], b[1], b[2], b[3], score()));
    }
  if (coin(0.06)) s.dets.clear();
  std::shuffle(s.dets.begin(), s.dets.end(), rng);
  return s;
}

}  // namespace

TEST_CASE("detect map: VOC all-point AP of a known TP/FP sequence, and its 101-point COCO AP") {
  // 3 objects in two images, 5 detections of them by decreasing score: TP FP TP FP TP.
  const std::vector<GroundTruth> gts = {gt(1, 0, 0, 0, 10, 10), gt(1, 0, 20, 20, 40, 30), gt(2, 0, 5, 5, 15, 25)};
  const std::vector<Detection> dets = {
      det(2, 0, 50, 50, 60, 60, 0.6f),  // rank 4: FP, overlaps nothing
      on(gts[0], 0.9f),                  // rank 1: TP
      on(gts[2], 0.5f),                  // rank 5: TP
      on(gts[1], 0.7f),                  // rank 3: TP
      det(1, 0, 0, 0, 10, 10, 0.8f),     // rank 2: FP, a second detection of gts[0]
  };
  // rank:       1    2    3    4    5
  // precision:  1   1/2  2/3  2/4  3/5     recall: 1/3 1/3 2/3 2/3 1
  // envelope:   1   2/3  2/3  3/5  3/5
  // VOC AP = 1/3 * 1 + 1/3 * 2/3 + 1/3 * 3/5 = 34/45.
  // COCO (all IoUs are 1, so every threshold agrees): recall levels 0..0.33 (34 of them) first
  // reached at rank 1 (envelope 1), 0.34..0.66 (33) at rank 3 (2/3), 0.67..1 (34) at rank 5 (3/5):
  // AP = (34 + 33 * 2/3 + 34 * 3/5) / 101 = 76.4 / 101.
  const MapResult r = evaluate_detections(gts, dets, 1);
  REQUIRE(r.classes.size() == 1);
  CHECK(r.classes[0].gt_count == 3);
  CHECK(r.classes[0].det_count == 5);
  CHECK(r.classes_evaluated == 1);
  expect_same("VOC AP", r.classes[0].ap50_voc, 34.0 / 45);
  expect_same("mAP VOC", r.map50_voc, 34.0 / 45);
  expect_same("COCO AP", r.classes[0].ap_coco, 76.4 / 101);
  expect_same("COCO AP50", r.classes[0].ap50_coco, 76.4 / 101);
  expect_same("COCO AP75", r.classes[0].ap75_coco, 76.4 / 101);
  expect_same("mAP COCO", r.map_coco, 76.4 / 101);

  // FP TP TP with 2 objects: precision 0 1/2 2/3 rises, so the envelope lifts the first TP to 2/3:
  // VOC AP = 1/2 * 2/3 + 1/2 * 2/3 = 2/3 (not 1/2 * 1/2 + 1/2 * 2/3). COCO: 2/3 at every level.
  const MapResult rising = evaluate_detections(
      {gts[0], gts[1]}, {det(1, 0, 60, 60, 70, 70, 0.9f), on(gts[0], 0.8f), on(gts[1], 0.7f)}, 1);
  expect_same("VOC AP, rising precision", rising.classes[0].ap50_voc, 2.0 / 3);
  expect_same("COCO AP, rising precision", rising.classes[0].ap_coco, 2.0 / 3);
}

TEST_CASE("detect map: COCO thresholds are inclusive, VOC's 0.5 too") {
  // IoU 0.6 exactly (intersection 60, union 100) meets the thresholds .50 .55 .60 and misses the
  // other 7. Matched: both objects found, AP 1. Missed: TP then FP, recall 1/2 at precision 1 and
  // never more, so recall levels 0..0.50 (51 of 101) score 1: AP 51/101.
  // AP@[.5:.95] = (3 * 1 + 7 * 51/101) / 10 = 660/1010.
  const std::vector<GroundTruth> gts = {gt(3, 1, 20, 20, 30, 30), gt(3, 1, 0, 0, 10, 10)};
  const std::vector<Detection> dets = {on(gts[0], 0.9f), det(3, 1, 0, 0, 10, 6, 0.8f)};
  const MapResult r = evaluate_detections(gts, dets, 2);
  expect_same("COCO AP", r.classes[1].ap_coco, 660.0 / 1010);
  expect_same("COCO AP50", r.classes[1].ap50_coco, 1.0);
  expect_same("COCO AP75", r.classes[1].ap75_coco, 51.0 / 101);
  expect_same("VOC AP", r.classes[1].ap50_voc, 1.0);
  CHECK(std::isnan(r.classes[0].ap50_voc));  // label 0: no ground truth, left out of the means
  CHECK(std::isnan(r.classes[0].ap_coco));
  CHECK(r.classes_evaluated == 1);
  expect_same("mAP COCO", r.map_coco, 660.0 / 1010);

  // IoU exactly 0.5 (50 / 100): a true positive for the devkit (ovmax >= 0.5) and for COCO's .50
  // only: AP@.5 = 1, AP@.55.. = 0 (FP only), so AP@[.5:.95] = 1/10.
  const MapResult half = evaluate_detections({gt(0, 0, 0, 0, 10, 10)}, {det(0, 0, 0, 0, 10, 5, 0.3f)}, 1);
  expect_same("VOC AP at IoU 0.5", half.classes[0].ap50_voc, 1.0);
  expect_same("COCO AP50 at IoU 0.5", half.classes[0].ap50_coco, 1.0);
  expect_same("COCO AP at IoU 0.5", half.classes[0].ap_coco, 0.1);
}

TEST_CASE("detect map: difficult boxes are neither rewarded nor penalised") {
  // One counted object, one difficult one. Ranked: on the difficult box (ignored), a stray box
  // (FP), on the counted object (TP). npos 1. VOC: precision 0 0 1/2, recall 0 0 1, envelope 1/2:
  // AP 1/2. COCO: the same ranks, envelope 1/2 from rank 1 on, so every recall level reads 1/2.
  const std::vector<GroundTruth> gts = {gt(7, 0, 0, 0, 10, 10), gt(7, 0, 40, 40, 60, 60, true)};
  const std::vector<Detection> dets = {on(gts[1], 0.9f), det(7, 0, 80, 80, 90, 90, 0.8f), on(gts[0], 0.7f)};
  const MapResult r = evaluate_detections(gts, dets, 1);
  CHECK(r.classes[0].gt_count == 1);
  expect_same("VOC AP", r.classes[0].ap50_voc, 0.5);
  expect_same("COCO AP", r.classes[0].ap_coco, 0.5);
  // Counted as an object, the difficult box would make rank 1 a TP: VOC AP (1/2)(1) + (1/2)(2/3).
  std::vector<GroundTruth> plain = gts;
  plain[1].difficult = false;
  expect_same("VOC AP, not difficult", evaluate_detections(plain, dets, 1).classes[0].ap50_voc, 5.0 / 6);

  // Only difficult boxes: no AP at all.
  const MapResult none = evaluate_detections({gts[1]}, dets, 1);
  CHECK(none.classes[0].gt_count == 0);
  CHECK(std::isnan(none.classes[0].ap50_voc));
  CHECK(std::isnan(none.map_coco));
}

TEST_CASE("detect map: a duplicate detection is a false positive") {
  // Objects in images 1 and 2; detections: on object 1 (.9), again on object 1 (.8), on object 2
  // (.7): TP FP TP, precision 1 1/2 2/3, recall 1/2 1/2 1, envelope 1 2/3 2/3:
  // AP = 1/2 * 1 + 1/2 * 2/3 = 5/6 (VOC). COCO: recall 0..0.5 (51 levels) at 1, 0.51..1 (50) at 2/3.
  const std::vector<GroundTruth> gts = {gt(1, 0, 0, 0, 10, 10), gt(2, 0, 0, 0, 10, 10)};
  const std::vector<Detection> dets = {on(gts[0], 0.9f), on(gts[0], 0.8f), on(gts[1], 0.7f)};
  const MapResult r = evaluate_detections(gts, dets, 1);
  expect_same("VOC AP", r.classes[0].ap50_voc, 5.0 / 6);
  expect_same("COCO AP", r.classes[0].ap_coco, (51 + 50 * 2.0 / 3) / 101);
}

TEST_CASE("detect map: VOC takes the best box even if taken, COCO the best free one; their tie rules") {
  // g1 = (0,0,10,10) and g2 = (5,0,15,10); d1 = (2.5,0,12.5,10) has IoU 75/125 = 0.6 with both;
  // d2 = g1 exactly (IoU 1 with g1, 1/3 with g2).
  // VOC (first box on equal IoU): d1 takes g1; d2's best box is g1, already taken: FP. TP FP with
  // npos 2: AP = 1/2.
  // COCO (last box on equal IoU): d1 takes g2, d2 then takes g1 where IoU >= threshold: thresholds
  // .50 .55 .60 find both (AP 1); from .65 on d1 is a FP and d2 a TP: precision 0 then 1/2, recall
  // 0 then 1/2, so recall levels 0..0.5 (51) read 1/2: AP 25.5/101. Mean: (3 + 7 * 25.5/101) / 10.
  const std::vector<GroundTruth> gts = {gt(4, 0, 0, 0, 10, 10), gt(4, 0, 5, 0, 15, 10)};
  const std::vector<Detection> dets = {det(4, 0, 2.5f, 0, 12.5f, 10, 0.9f), on(gts[0], 0.8f)};
  const MapResult r = evaluate_detections(gts, dets, 1);
  expect_same("VOC AP", r.classes[0].ap50_voc, 0.5);
  expect_same("COCO AP50", r.classes[0].ap50_coco, 1.0);
  expect_same("COCO AP75", r.classes[0].ap75_coco, 25.5 / 101);
  expect_same("COCO AP", r.classes[0].ap_coco, (3 + 7 * 25.5 / 101) / 10);

  // A duplicate next to a second object: g3 = (0,0,10,12) has IoU 100/120 with g1. d1 and d2 both
  // equal g1. VOC: d2's best box is g1, taken: TP FP, AP 1/2. COCO: d2 takes the free g3 up to the
  // .80 threshold (7 of 10, AP 1); at .85 .90 .95 it is a FP: recall levels 0..0.5 at 1, AP 51/101.
  const std::vector<GroundTruth> near = {gt(4, 0, 0, 0, 10, 10), gt(4, 0, 0, 0, 10, 12)};
  const MapResult dup = evaluate_detections(near, {on(near[0], 0.9f), on(near[0], 0.8f)}, 1);
  expect_same("VOC AP, duplicate near a free box", dup.classes[0].ap50_voc, 0.5);
  expect_same("COCO AP, duplicate near a free box", dup.classes[0].ap_coco, (7 + 3 * 51.0 / 101) / 10);

  // Equal scores keep input order: the duplicate given first is the one counted as FP at rank 1.
  // FP TP with npos 1: VOC AP = 1 * 1/2.
  const GroundTruth g = gt(0, 0, 0, 0, 10, 10);
  const MapResult tied = evaluate_detections({g}, {det(0, 0, 0, 0, 10, 4, 0.5f), on(g, 0.5f)}, 1);
  expect_same("VOC AP, tied scores", tied.classes[0].ap50_voc, 0.5);
}

TEST_CASE("detect map: crowd regions absorb any number of detections (COCO); max_dets per image and class") {
  // A crowd region (0,0,100,100) holding a counted object (10,10,20,20). d1, d2 lie in the crowd
  // (intersection over their own area 1) away from the object, d3 is the object. COCO: d1, d2
  // ignored, d3 TP: AP 1. VOC counts the crowd as difficult but scores it by IoU (0.01): d1, d2 are
  // FPs, then the TP at precision 1/3: AP 1/3.
  const std::vector<GroundTruth> gts = {gt(9, 0, 0, 0, 100, 100, false, true), gt(9, 0, 10, 10, 20, 20)};
  const std::vector<Detection> dets = {det(9, 0, 50, 50, 60, 60, 0.9f), det(9, 0, 70, 70, 80, 80, 0.8f),
                                       on(gts[1], 0.7f)};
  const MapResult r = evaluate_detections(gts, dets, 1);
  CHECK(r.classes[0].gt_count == 1);
  expect_same("COCO AP", r.classes[0].ap_coco, 1.0);
  expect_same("VOC AP", r.classes[0].ap50_voc, 1.0 / 3);

  // Three objects in one image, one exact detection each (.9 .8 .7). With max_dets 2, COCO drops
  // the third: recall stops at 2/3, levels 0..0.66 (67) read 1: AP 67/101. VOC keeps all: AP 1.
  const std::vector<GroundTruth> three = {gt(0, 0, 0, 0, 10, 10), gt(0, 0, 20, 0, 30, 10), gt(0, 0, 40, 0, 50, 10)};
  MapOptions opt;
  opt.max_dets = 2;
  const MapResult capped = evaluate_detections(three, {on(three[2], 0.7f), on(three[0], 0.9f), on(three[1], 0.8f)}, 1, opt);
  expect_same("COCO AP, max_dets 2", capped.classes[0].ap_coco, 67.0 / 101);
  expect_same("VOC AP, max_dets 2", capped.classes[0].ap50_voc, 1.0);
}

TEST_CASE("detect map: no detections, and detections where nothing is") {
  const std::vector<GroundTruth> gts = {gt(0, 1, 0, 0, 10, 10), gt(1, 2, 0, 0, 10, 10)};
  const MapResult empty = evaluate_detections(gts, {}, 3);
  CHECK(empty.classes_evaluated == 2);
  for (int c = 1; c <= 2; ++c) {
    expect_same("VOC AP, no detections", empty.classes[size_t(c)].ap50_voc, 0.0);
    expect_same("COCO AP, no detections", empty.classes[size_t(c)].ap_coco, 0.0);
  }
  expect_same("mAP, no detections", empty.map50_voc, 0.0);
  // Class 1 found; class 2 only detected on image 3, which has no objects: AP 0. mAP = 1/2.
  const MapResult r = evaluate_detections(gts, {on(gts[0], 0.4f), det(3, 2, 0, 0, 10, 10, 0.9f)}, 3);
  expect_same("VOC AP, found", r.classes[1].ap50_voc, 1.0);
  expect_same("VOC AP, FP elsewhere", r.classes[2].ap50_voc, 0.0);
  expect_same("mAP VOC", r.map50_voc, 0.5);
  expect_same("mAP50 COCO", r.map50_coco, 0.5);
  const MapResult nothing = evaluate_detections({}, {}, 2);
  CHECK(nothing.classes_evaluated == 0);
  CHECK(std::isnan(nothing.map50_voc));
}

TEST_CASE("detect map: matches the naive reference on 50 random scenes") {
  int in_between = 0, classes = 0, capped = 0;  // so that the scenes are shown to be non-trivial
  for (uint64_t seed = 1; seed <= 50; ++seed) {
    const Scene s = random_scene(seed);
    MapOptions opt;
    opt.max_dets = s.max_dets;
    const MapResult r = evaluate_detections(s.gts, s.dets, s.num_classes, opt);
    REQUIRE(r.classes.size() == size_t(s.num_classes));
    capped += s.max_dets < 100;
    double sum_voc = 0, sum_coco = 0, sum50 = 0, sum75 = 0;
    int64_t evaluated = 0;
    for (int32_t c = 0; c < s.num_classes; ++c) {
      INFO("seed ", seed, ", class ", c);
      const ClassAp& got = r.classes[size_t(c)];
      const double voc = ref_voc_ap(s.gts, s.dets, c);
      const std::array<double, 10> coco = ref_coco_ap(s.gts, s.dets, c, s.max_dets);
      double coco_mean = 0;
      for (double v : coco) coco_mean += v / 10;
      CHECK(got.label == c);
      CHECK(got.gt_count == ref_npos(s.gts, c));
      expect_same("VOC AP", got.ap50_voc, voc);
      expect_same("COCO AP", got.ap_coco, coco_mean);
      expect_same("COCO AP50", got.ap50_coco, coco[0]);
      expect_same("COCO AP75", got.ap75_coco, coco[5]);
      if (!std::isnan(voc)) {
        sum_voc += voc, sum_coco += coco_mean, sum50 += coco[0], sum75 += coco[5], ++evaluated;
        in_between += voc > 0.05 && voc < 0.95 && coco_mean < voc;
        ++classes;
      }
    }
    CHECK(r.classes_evaluated == evaluated);
    if (evaluated > 0) {
      expect_same("mAP VOC", r.map50_voc, sum_voc / double(evaluated));
      expect_same("mAP COCO", r.map_coco, sum_coco / double(evaluated));
      expect_same("mAP50 COCO", r.map50_coco, sum50 / double(evaluated));
      expect_same("mAP75 COCO", r.map75_coco, sum75 / double(evaluated));
    }
  }
  MESSAGE(in_between, " of ", classes, " evaluated classes have 0.05 < VOC AP < 0.95 and a lower COCO AP; ",
          capped, " scenes cap detections per image");
  CHECK(in_between * 2 > classes);
  CHECK(capped >= 5);
}

TEST_CASE("detect map: bad inputs are errors naming the entry and its image") {
  const std::vector<GroundTruth> gts = {gt(3, 1, 0, 0, 10, 10)};
  expect_error([&] { evaluate_detections(gts, {det(42, 1, 0, 0, 10, 10, std::nanf(""))}, 2); },
               "detection 0 (image 42): score is nan");
  expect_error([&] { evaluate_detections(gts, {det(3, 1, 0, 0, 10, 10, 0.5f), det(8, 1, 0, 0, 10, 10, -INFINITY)}, 2); },
               "detection 1 (image 8): score is -inf");
  expect_error([&] { evaluate_detections(gts, {det(42, 1, 10, 0, 9, 10, 0.5f)}, 2); },
               "detection 0 (image 42): box (10, 0, 9, 10) has x2 < x1 or y2 < y1");
  expect_error([&] { evaluate_detections({gt(3, 1, 0, 0, 10, 10), gt(17, 0, 0, 5, 10, 4)}, {}, 2); },
               "ground truth 1 (image 17): box (0, 5, 10, 4) has x2 < x1");
  expect_error([&] { evaluate_detections({gt(3, 1, 0, 0, NAN, 10)}, {}, 2); },
               "ground truth 0 (image 3): box coordinate 2 is nan");
  expect_error([&] { evaluate_detections(gts, {det(6, 2, 0, 0, 10, 10, 0.5f)}, 2); },
               "detection 0 (image 6): label 2 is outside 0..1");
  expect_error([&] { evaluate_detections({gt(3, -1, 0, 0, 10, 10)}, {}, 2); }, "label -1 is outside 0..1");
  expect_error([&] { evaluate_detections(gts, {}, 0); }, "num_classes is 0");
  MapOptions opt;
  opt.max_dets = 0;
  expect_error([&] { evaluate_detections(gts, {}, 2, opt); }, "max_dets is 0");
  const MapResult r = evaluate_detections(gts, {}, 2);
  expect_error([&] { format_map_table(r, {"only one"}); }, "1 class names for 2 classes");
}

TEST_CASE("detect map: the per-class table") {
  // Labels: 0 background (nothing: no row), 1 cat (the 34/45 case), 2 dog (duplicate case, 5/6),
  // 3 bird (detections only: a row with "-").
  std::vector<GroundTruth> gts = {gt(1, 1, 0, 0, 10, 10), gt(1, 1, 20, 20, 40, 30), gt(2, 1, 5, 5, 15, 25),
                                  gt(1, 2, 0, 0, 10, 10), gt(2, 2, 0, 0, 10, 10)};
  std::vector<Detection> dets = {det(2, 1, 50, 50, 60, 60, 0.6f), on(gts[0], 0.9f), on(gts[2], 0.5f), on(gts[1], 0.7f),
                                 det(1, 1, 0, 0, 10, 10, 0.8f),   on(gts[3], 0.9f), on(gts[3], 0.8f), on(gts[4], 0.7f),
                                 det(1, 3, 0, 0, 5, 5, 0.9f)};
  const MapResult r = evaluate_detections(gts, dets, 4);
  const std::string table = format_map_table(r, {"__background__", "cat", "dog", "bird"});
  MESSAGE("\n", table);
  std::vector<std::string> lines;
  for (size_t at = 0, nl; (nl = table.find('\n', at)) != std::string::npos; at = nl + 1) lines.push_back(table.substr(at, nl - at));
  REQUIRE(lines.size() == 5);
  CHECK(lines[0] == "class        GT    AP@.5(VOC) AP@[.5:.95]");
  CHECK(lines[1] == "cat           3        0.7556      0.7564");  // 34/45, 76.4/101
  CHECK(lines[2] == "dog           2        0.8333      0.8350");  // 5/6, (51 + 100/3)/101
  CHECK(lines[3] == "bird          0             -           -");
  CHECK(lines[4] == "mAP over 2 classes: @.5 (VOC) 0.7944  @[.5:.95] 0.7957  @.5 0.7957  @.75 0.7957 (COCO)");
  CHECK(table.find("__background__") == std::string::npos);
  // Without names the labels stand in.
  const std::string plain = format_map_table(r);
  CHECK(plain.find("\n1             3        0.7556") != std::string::npos);
  CHECK(format_map_table(evaluate_detections({}, {}, 1)).find("no class has ground truth") != std::string::npos);
}

TEST_CASE("detect map: COCO thresholds equal numpy's linspace bit for bit") {
  TempDir dir;
  run_python("map_thresholds_numpy.py", shell_quote(dir / "thr.txt"));
  std::ifstream in(dir / "thr.txt");
  std::vector<double> want;
  for (std::string line; std::getline(in, line);) want.push_back(std::strtod(line.c_str(), nullptr));
  REQUIRE(want.size() == 111);
  for (size_t i = 0; i < 10; ++i) CHECK_MESSAGE(coco_iou_thresholds()[i] == want[i], "IoU threshold ", i);
  for (size_t i = 0; i < 101; ++i) CHECK_MESSAGE(coco_recall_thresholds()[i] == want[10 + i], "recall threshold ", i);
  CHECK(coco_iou_thresholds()[8] == 0.8999999999999999);  // why the thresholds are not 0.5 + 0.05 i
}
