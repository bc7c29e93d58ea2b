// VOC and COCO-style detection AP (see map_eval.h for the rules each follows). Work is grouped by
// class, then by image, through index lists sorted once; nothing here is parallel or incremental.
// Not a port of either toolkit's data handling: boxes, labels and images come in as plain structs.
#include "detect/map_eval.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "core/check.h"

namespace mpicnn::detect {
namespace {

constexpr int kT = 10;   // COCO IoU thresholds
constexpr int kR = 101;  // COCO recall thresholds
constexpr double kVocIou = 0.5;

// pycocotools' maskApi bbIou in double; a crowd region is scored by intersection over the
// detection's area, so a detection inside a crowd fully "matches" it whatever the crowd's size.
double iou(const float* d, const float* g, bool crowd) {
  const double iw = std::min<double>(d[2], g[2]) - std::max<double>(d[0], g[0]);
  if (iw <= 0) return 0;
  const double ih = std::min<double>(d[3], g[3]) - std::max<double>(d[1], g[1]);
  if (ih <= 0) return 0;
  const double inter = iw * ih;
  const double da = (double(d[2]) - d[0]) * (double(d[3]) - d[1]);
  if (crowd) return inter / da;
  const double ga = (double(g[2]) - g[0]) * (double(g[3]) - g[1]);
  return inter / (da + ga - inter);
}

bool ignored(const GroundTruth& g) { return g.difficult || g.iscrowd; }

void check_box(const char* what, size_t i, int64_t image, int32_t label, const float* b, int32_t num_classes) {
  CHECK(label >= 0 && label < num_classes, what, " ", i, " (image ", image, "): label ", label,
        " is outside 0..", num_classes - 1);
  for (int k = 0; k < 4; ++k)
    CHECK(std::isfinite(b[k]), what, " ", i, " (image ", image, "): box coordinate ", k, " is ", b[k],
          "; coordinates must be finite");
  CHECK(b[2] >= b[0] && b[3] >= b[1], what, " ", i, " (image ", image, "): box (", b[0], ", ", b[1], ", ",
        b[2], ", ", b[3], ") has x2 < x1 or y2 < y1; boxes must be (x1, y1, x2, y2)");
}

void check_inputs(const std::vector<GroundTruth>& gts, const std::vector<Detection>& dets, int32_t num_classes,
                  const MapOptions& options) {
  CHECK(num_classes >= 1, "detection metrics: num_classes is ", num_classes, "; it must be at least 1");
  CHECK(options.max_dets >= 1, "detection metrics: max_dets is ", options.max_dets, "; it must be at least 1");
  for (size_t i = 0; i < gts.size(); ++i) check_box("ground truth", i, gts[i].image, gts[i].label, gts[i].box, num_classes);
  for (size_t i = 0; i < dets.size(); ++i) {
    const Detection& d = dets[i];
    check_box("detection", i, d.image, d.label, d.box, num_classes);
    CHECK(std::isfinite(d.score), "detection ", i, " (image ", d.image, "): score is ", d.score,
          "; scores must be finite");
  }
}

// Indices of items sorted by (label, image), input order within: each class is then one run,
// and each image of it a sub-run.
template <class T>
std::vector<int64_t> by_class_image(const std::vector<T>& items) {
  std::vector<int64_t> idx(items.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) {
    const T &x = items[a], &y = items[b];
    return x.label != y.label ? x.label < y.label : x.image < y.image;
  });
  return idx;
}

// Sub-range [begin, end) of sorted (by label, then image) with the given label.
template <class T>
std::pair<size_t, size_t> class_run(const std::vector<int64_t>& sorted, const std::vector<T>& items, int32_t label) {
  auto lo = std::partition_point(sorted.begin(), sorted.end(), [&](int64_t i) { return items[i].label < label; });
  auto hi = std::partition_point(lo, sorted.end(), [&](int64_t i) { return items[i].label <= label; });
  return {size_t(lo - sorted.begin()), size_t(hi - sorted.begin())};
}

// Detection indices by decreasing score, equal scores in the order given.
void sort_by_score(std::vector<int64_t>& idx, const std::vector<Detection>& dets) {
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return dets[a].score > dets[b].score; });
}

// VOC2010+ AP: outcome per ranked detection (1 true positive, 0 false positive, 2 ignored).
// Precision is made monotone from the right; recall steps are weighted by it (devkit VOCap.m).
double voc_ap(const std::vector<uint8_t>& outcome, int64_t npos) {
  if (npos == 0) return kNaN;
  const size_t n = outcome.size();
  std::vector<double> rec(n), prec(n);
  double tp = 0, fp = 0;
  for (size_t k = 0; k < n; ++k) {
    tp += outcome[k] == 1;
    fp += outcome[k] == 0;
    rec[k] = tp / double(npos);
    prec[k] = tp + fp > 0 ? tp / (tp + fp) : 0;  // an ignored first detection: 0, as voc_eval.py
  }
  for (size_t k = n; k-- > 1;) prec[k - 1] = std::max(prec[k - 1], prec[k]);
  double ap = 0, prev = 0;
  for (size_t k = 0; k < n; ++k) {
    if (rec[k] != prev) ap += (rec[k] - prev) * prec[k];
    prev = rec[k];
  }
  return ap;  // the devkit's closing point (recall 1, precision 0) adds nothing
}

void voc_class(ClassAp& out, const std::vector<GroundTruth>& gts, const std::vector<Detection>& dets,
               const std::vector<int64_t>& gt_sorted, std::pair<size_t, size_t> gt_run,
               const std::vector<int64_t>& det_sorted, std::pair<size_t, size_t> det_run) {
  std::vector<int64_t> order(det_sorted.begin() + det_run.first, det_sorted.begin() + det_run.second);
  std::sort(order.begin(), order.end());  // input order, so that equal scores keep it
  sort_by_score(order, dets);
  std::vector<uint8_t> taken(gts.size(), 0), outcome;
  outcome.reserve(order.size());
  const auto gbegin = gt_sorted.begin() + gt_run.first, gend = gt_sorted.begin() + gt_run.second;
  for (int64_t di : order) {
    const Detection& d = dets[di];
    auto lo = std::partition_point(gbegin, gend, [&](int64_t g) { return gts[g].image < d.image; });
    double ovmax = -1;
    int64_t jmax = -1;
    for (auto it = lo; it != gend && gts[*it].image == d.image; ++it) {
      const double ov = iou(d.box, gts[*it].box, false);
      if (ov > ovmax) ovmax = ov, jmax = *it;
    }
    if (jmax < 0 || ovmax < kVocIou) outcome.push_back(0);
    else if (ignored(gts[jmax])) outcome.push_back(2);
    else if (taken[jmax]) outcome.push_back(0);  // a second detection of a found object
    else taken[jmax] = 1, outcome.push_back(1);
  }
  out.ap50_voc = voc_ap(outcome, out.gt_count);
}

// One kept COCO detection after matching: bit t of tp / ign says matched to a counted / an
// ignored box at threshold t; neither bit means a false positive there.
struct CocoDet {
  float score;
  uint16_t tp, ign;
};

// pycocotools evaluateImg for one (image, class): gt (indices, counted boxes first), dt (indices
// by decreasing score, already cut to max_dets).
void coco_match(std::vector<CocoDet>& out, const std::vector<GroundTruth>& gts, const std::vector<Detection>& dets,
                const std::vector<int64_t>& gt, const std::vector<int64_t>& dt) {
  const size_t G = gt.size(), D = dt.size();
  std::vector<double> ious(D * G);  // (D, G)
  for (size_t d = 0; d < D; ++d)
    for (size_t g = 0; g < G; ++g) ious[d * G + g] = iou(dets[dt[d]].box, gts[gt[g]].box, gts[gt[g]].iscrowd);
  const size_t first = out.size();
  for (size_t d = 0; d < D; ++d) out.push_back({dets[dt[d]].score, 0, 0});
  const auto& thr = coco_iou_thresholds();
  std::vector<uint8_t> gtm(G);
  for (int t = 0; t < kT; ++t) {
    std::fill(gtm.begin(), gtm.end(), 0);
    for (size_t d = 0; d < D; ++d) {
      double best = std::min(thr[t], 1 - 1e-10);
      int64_t m = -1;
      for (size_t g = 0; g < G; ++g) {
        const GroundTruth& b = gts[gt[g]];
        if (gtm[g] && !b.iscrowd) continue;
        if (m >= 0 && !ignored(gts[gt[m]]) && ignored(b)) break;  // a counted match beats any ignored box
        if (ious[d * G + g] < best) continue;
        best = ious[d * G + g];
        m = int64_t(g);
      }
      if (m < 0) continue;
      gtm[m] = 1;
      (ignored(gts[gt[m]]) ? out[first + d].ign : out[first + d].tp) |= uint16_t(1u << t);
    }
  }
}

// pycocotools accumulate + summarize for one class: fills the three COCO APs of c.
void coco_ap(ClassAp& c, std::vector<CocoDet>& ranked) {
  if (c.gt_count == 0) return;
  std::stable_sort(ranked.begin(), ranked.end(), [](const CocoDet& a, const CocoDet& b) { return a.score > b.score; });
  const auto& rthr = coco_recall_thresholds();
  const double eps = std::ldexp(1.0, -52);  // np.spacing(1), added to tp + fp by pycocotools
  const size_t n = ranked.size();
  std::vector<double> rc(n), pr(n);
  double total = 0, per_t[kT];
  for (int t = 0; t < kT; ++t) {
    double tp = 0, fp = 0;
    for (size_t k = 0; k < n; ++k) {
      const bool is_tp = ranked[k].tp >> t & 1, is_ign = ranked[k].ign >> t & 1;
      tp += is_tp;
      fp += !is_tp && !is_ign;
      rc[k] = tp / double(c.gt_count);
      pr[k] = tp / (fp + tp + eps);
    }
    for (size_t k = n; k-- > 1;)
      if (pr[k] > pr[k - 1]) pr[k - 1] = pr[k];
    double sum = 0;
    for (int r = 0; r < kR; ++r) {
      const size_t k = size_t(std::lower_bound(rc.begin(), rc.end(), rthr[r]) - rc.begin());
      sum += k < n ? pr[k] : 0.0;  // recall never reached: precision 0
    }
    per_t[t] = sum / kR;
    total += sum;
  }
  c.ap_coco = total / (kT * kR);
  c.ap50_coco = per_t[0];
  c.ap75_coco = per_t[5];
}

void coco_class(ClassAp& out, const std::vector<GroundTruth>& gts, const std::vector<Detection>& dets,
                const std::vector<int64_t>& gt_sorted, std::pair<size_t, size_t> gt_run,
                const std::vector<int64_t>& det_sorted, std::pair<size_t, size_t> det_run, int64_t max_dets) {
  std::vector<CocoDet> ranked;
  std::vector<int64_t> gt, dt;
  size_t gi = gt_run.first, di = det_run.first;
  while (gi < gt_run.second || di < det_run.second) {  // images in increasing id, as pycocotools' imgIds
    const int64_t image = std::min(gi < gt_run.second ? gts[gt_sorted[gi]].image : INT64_MAX,
                                   di < det_run.second ? dets[det_sorted[di]].image : INT64_MAX);
    gt.clear();
    dt.clear();
    for (; gi < gt_run.second && gts[gt_sorted[gi]].image == image; ++gi) gt.push_back(gt_sorted[gi]);
    for (; di < det_run.second && dets[det_sorted[di]].image == image; ++di) dt.push_back(det_sorted[di]);
    std::stable_partition(gt.begin(), gt.end(), [&](int64_t g) { return !ignored(gts[g]); });
    sort_by_score(dt, dets);
    if (int64_t(dt.size()) > max_dets) dt.resize(size_t(max_dets));
    coco_match(ranked, gts, dets, gt, dt);
  }
  coco_ap(out, ranked);
}

double mean_over_evaluated(const std::vector<ClassAp>& classes, double ClassAp::*field) {
  double sum = 0;
  int64_t n = 0;
  for (const ClassAp& c : classes)
    if (c.gt_count > 0) sum += c.*field, ++n;
  return n > 0 ? sum / double(n) : kNaN;
}

}  // namespace

const std::array<double, 10>& coco_iou_thresholds() {
  static const std::array<double, 10> thr = [] {
    std::array<double, 10> t{};
    const double step = (0.95 - 0.5) / 9;  // numpy linspace: i * step + start, then the end exact
    for (int i = 0; i < 9; ++i) t[i] = i * step + 0.5;
    t[9] = 0.95;
    return t;
  }();
  return thr;
}

const std::array<double, 101>& coco_recall_thresholds() {
  static const std::array<double, 101> thr = [] {
    std::array<double, 101> t{};
    const double step = 1.0 / 100;
    for (int i = 0; i < 100; ++i) t[i] = i * step + 0.0;
    t[100] = 1.0;
    return t;
  }();
  return thr;
}

MapResult evaluate_detections(const std::vector<GroundTruth>& gts, const std::vector<Detection>& dets,
                              int32_t num_classes, const MapOptions& options) {
  check_inputs(gts, dets, num_classes, options);
  const std::vector<int64_t> gt_sorted = by_class_image(gts), det_sorted = by_class_image(dets);
  MapResult result;
  result.classes.resize(size_t(num_classes));
  for (int32_t c = 0; c < num_classes; ++c) {
    ClassAp& out = result.classes[size_t(c)];
    out.label = c;
    const auto gt_run = class_run(gt_sorted, gts, c), det_run = class_run(det_sorted, dets, c);
    out.det_count = int64_t(det_run.second - det_run.first);
    for (size_t i = gt_run.first; i < gt_run.second; ++i) out.gt_count += !ignored(gts[gt_sorted[i]]);
    voc_class(out, gts, dets, gt_sorted, gt_run, det_sorted, det_run);
    coco_class(out, gts, dets, gt_sorted, gt_run, det_sorted, det_run, options.max_dets);
    result.classes_evaluated += out.gt_count > 0;
  }
  result.map50_voc = mean_over_evaluated(result.classes, &ClassAp::ap50_voc);
  result.map_coco = mean_over_evaluated(result.classes, &ClassAp::ap_coco);
  result.map50_coco = mean_over_evaluated(result.classes, &ClassAp::ap50_coco);
  result.map75_coco = mean_over_evaluated(result.classes, &ClassAp::ap75_coco);
  return result;
}

std::string format_map_table(const MapResult& result, const std::vector<std::string>& names) {
  CHECK(names.empty() || names.size() == result.classes.size(), "detection metrics table: ", names.size(),
        " class names for ", result.classes.size(), " classes");
  auto name_of = [&](const ClassAp& c) { return names.empty() ? std::to_string(c.label) : names[size_t(c.label)]; };
  size_t width = 5;  // "class"
  for (const ClassAp& c : result.classes)
    if (c.gt_count > 0 || c.det_count > 0) width = std::max(width, name_of(c).size());
  auto ap = [](double v) {
    char s[32];
    std::snprintf(s, sizeof s, "%12s", "-");
    if (!std::isnan(v)) std::snprintf(s, sizeof s, "%12.4f", v);
    return std::string(s);
  };
  auto pad = [&](std::string s) { return s.append(width - std::min(width, s.size()), ' '); };
  std::string out = pad("class") + "        GT    AP@.5(VOC) AP@[.5:.95]\n";
  for (const ClassAp& c : result.classes) {
    if (c.gt_count == 0 && c.det_count == 0) continue;
    char gt[32];
    std::snprintf(gt, sizeof gt, "%10lld", static_cast<long long>(c.gt_count));
    out += pad(name_of(c)) + gt + "  " + ap(c.ap50_voc) + ap(c.ap_coco) + "\n";
  }
  if (result.classes_evaluated == 0) return out + "mAP: no class has ground truth\n";
  char line[256];
  std::snprintf(line, sizeof line, "mAP over %lld classes: @.5 (VOC) %.4f  @[.5:.95] %.4f  @.5 %.4f  @.75 %.4f (COCO)\n",
                static_cast<long long>(result.classes_evaluated), result.map50_voc, result.map_coco,
                result.map50_coco, result.map75_coco);
  return out + line;
}

}  // namespace mpicnn::detect
