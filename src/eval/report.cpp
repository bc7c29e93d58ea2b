// pipeline_eval's report: metrics from the predictions, latency percentiles, and the text, JSON
// and predictions-CSV forms of a Report. Not the measuring: the caller collects predictions,
// stage times and latencies; nothing here uses MPI, models or datasets.
// Over 500 lines: the text, JSON and CSV forms each render every field of one Report, with
// shared formatting helpers; split, each file would repeat the helpers or export them for one caller.
#include "eval/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>

#include "core/check.h"
#include "core/text.h"
#include "data/tools.h"
#include "io/atomic_file.h"

namespace mpicnn::eval {

using ojson = nlohmann::ordered_json;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr size_t kFullMatrixClasses = 20;  // above this, only the most confused pairs are listed
constexpr size_t kConfusedPairs = 20;
constexpr size_t kSkippedShown = 10;

// How a report shows its task's results: the header's results lines, the sections between
// the header and the skipped samples, its keys in the JSON (before "per_class", into which it
// puts its rows) and its predictions CSV. The one place this file tells the tasks apart
// (form_of, at the end).
struct TaskForm {
  bool names_task;  // JSON "task" key (classification reports keep the keys they always had)
  std::string (*results)(const Report& r);
  std::string (*body)(const Report& r);
  void (*json)(const Report& r, ojson& j, ojson& per_class);
  void (*csv)(const std::string& path, const Report& r);
};
const TaskForm& form_of(const Report& r);

std::string fixed(double v, int decimals) {
  if (!std::isfinite(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

// 0.9107 -> "91.07%"; NaN -> "-".
std::string pct(double fraction, int decimals) {
  return std::isfinite(fraction) ? fixed(100.0 * fraction, decimals) + "%" : "-";
}

std::string pad_right(std::string s, size_t w) { return s.size() < w ? s + std::string(w - s.size(), ' ') : s; }
std::string pad_left(std::string s, size_t w) { return s.size() < w ? std::string(w - s.size(), ' ') + s : s; }

std::string plural(uint64_t n, const std::string& word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

// The class's name, or its id when the report has no name for it.
std::string class_name(const Report& r, int id) {
  return id >= 0 && size_t(id) < r.class_names.size() ? r.class_names[size_t(id)] : std::to_string(id);
}

// The path of dataset sample `index`: empty when the caller gave no sources at all.
std::string source_of(const Report& r, uint64_t index) {
  if (r.sources.empty()) return "";
  CHECK(index < r.sources.size(), "report: sample ", index, " has no source (", r.sources.size(), " sources)");
  return r.sources[size_t(index)];
}

// JSON has no NaN or infinity: a figure that was not measured is null.
ojson num_or_null(double v) { return std::isfinite(v) ? ojson(v) : ojson(nullptr); }

double mean_of(const std::vector<double>& v) {
  if (v.empty()) return kNaN;
  double s = 0;
  for (double x : v) s += x;
  return s / double(v.size());
}

double max_of(const std::vector<double>& v) {
  return v.empty() ? kNaN : *std::max_element(v.begin(), v.end());
}

double utilisation(const StageTime& s) { return s.wall_s > 0 ? s.busy_s / s.wall_s : kNaN; }

void write_text(const std::string& path, const std::string& text) {
  write_file_atomic(path, {reinterpret_cast<const uint8_t*>(text.data()), text.size()});
}

}  // namespace

// ---- metrics ----------------------------------------------------------------------------------

Metrics compute_metrics(const std::vector<Prediction>& predictions, int num_classes) {
  CHECK(num_classes > 0, "compute_metrics: ", num_classes, " classes");
  const size_t K = size_t(num_classes);
  const int k = std::min(5, num_classes);
  Metrics m;
  m.confusion.assign(K, std::vector<uint64_t>(K, 0));
  m.support.assign(K, 0);
  uint64_t hit1 = 0, hit5 = 0;
  for (const Prediction& p : predictions) {
    CHECK(p.label >= 0 && p.label < num_classes, "sample ", p.index, ": label ", p.label, " is outside [0, ",
          num_classes, ")");
    CHECK(p.top[0] >= 0 && p.top[0] < num_classes, "sample ", p.index, ": prediction ", p.top[0],
          " is outside [0, ", num_classes, ")");
    ++m.confusion[size_t(p.label)][size_t(p.top[0])];
    ++m.support[size_t(p.label)];
    hit1 += p.top[0] == p.label;
    hit5 += std::find(p.top, p.top + k, p.label) != p.top + k;
  }
  m.evaluated = predictions.size();
  const double n = double(m.evaluated);
  m.top1 = m.evaluated ? double(hit1) / n : kNaN;
  m.top5 = m.evaluated ? double(hit5) / n : kNaN;
  m.precision.assign(K, kNaN);
  m.recall.assign(K, kNaN);
  for (size_t c = 0; c < K; ++c) {
    uint64_t predicted = 0;
    for (size_t l = 0; l < K; ++l) predicted += m.confusion[l][c];
    const uint64_t diag = m.confusion[c][c];
    if (predicted) m.precision[c] = double(diag) / double(predicted);
    if (m.support[c]) m.recall[c] = double(diag) / double(m.support[c]);
  }
  return m;
}

double percentile(std::vector<double> values, double q) {
  CHECK(q >= 0 && q <= 1, "percentile: q = ", q, " is outside [0, 1]");
  if (values.empty()) return kNaN;
  std::sort(values.begin(), values.end());
  const double pos = q * double(values.size() - 1);
  const size_t lo = size_t(std::floor(pos)), hi = size_t(std::ceil(pos));
  return values[lo] + (values[hi] - values[lo]) * (pos - double(lo));
}

uint64_t Report::images() const { return predictions.size() + detections.size(); }  // one is empty

double Report::images_per_s() const { return wall_s > 0 ? double(images()) / wall_s : 0.0; }

double Report::speedup() const {
  return sequential_images_per_s > 0 ? images_per_s() / sequential_images_per_s : kNaN;
}

// ---- text -------------------------------------------------------------------------------------

namespace {

// The report's sections, in the order format_report prints them; each ends with a newline.

std::string header_section(const Report& r) {
  std::string o = "pipeline_eval: " + (r.model.empty() ? std::string("model") : r.model);
  if (!r.weights.empty()) o += " (" + r.weights + ")";
  o += ": " + plural(uint64_t(r.ranks), "rank") + " (" + r.mode + "), batch " + std::to_string(r.batch_size) +
       ", " + plural(uint64_t(r.threads), "thread") + " per predictor" +
       (r.device.empty() ? "" : ", " + r.device) + "\n";
  if (!r.execution.empty()) o += "  execution: " + r.execution + "\n";
  if (!r.plan.empty()) o += "  plan, per layer:\n" + indent(r.plan, "    ");
  if (!r.dataset.empty()) o += "  data: " + r.dataset + "\n";
  if (!r.layout.empty()) o += "  layout: " + r.layout + (r.stage_ranks.empty() ? "" : " (--stages " + r.stage_ranks + ")") + "\n";
  return o + form_of(r).results(r);
}

uint64_t box_count(const Report& r) {
  uint64_t boxes = 0;
  for (const ImageDetections& d : r.detections) boxes += d.scores.size();
  return boxes;
}

std::string classify_results(const Report& r) {
  const Metrics& m = r.metrics;
  return "  top-1 " + pct(m.top1, 2) + "  top-5 " + pct(m.top5, 2) + "  (" + std::to_string(m.evaluated) +
         " evaluated, " + std::to_string(r.skipped.size()) + " skipped)\n";
}

std::string detection_results(const Report& r) {
  const uint64_t boxes = box_count(r);
  std::string o;
  if (!r.resize.empty()) o += "  detector input: " + r.resize + "\n";
  return o + "  mAP@0.5 (VOC) " + fixed(r.map.map50_voc, 4) + "  mAP@[.5:.95] (COCO) " + fixed(r.map.map_coco, 4) +
         "  (" + plural(r.detections.size(), "image") + ", " + std::to_string(boxes) + (boxes == 1 ? " box" : " boxes") +
         ", " + std::to_string(r.skipped.size()) + " skipped)\n";
}

// Width of the class ids column: digits of the largest id.
size_t id_width(size_t K) { return std::to_string(K ? K - 1 : 0).size(); }

// Detection labels run from 1 (0 is the background): the names indexed by label.
std::vector<std::string> background_and(const std::vector<std::string>& classes) {
  std::vector<std::string> names = {"__background__"};
  names.insert(names.end(), classes.begin(), classes.end());
  return names;
}

std::string per_class_section(const Report& r) {
  const Metrics& m = r.metrics;
  const size_t K = m.confusion.size();
  size_t w = 9;  // "per class"
  for (size_t c = 0; c < K; ++c) w = std::max(w, std::min<size_t>(class_name(r, int(c)).size(), 40));
  const size_t idw = id_width(K);
  std::string o = "\n  " + pad_right("per class", idw + 2 + w) + "  precision   recall   support\n";
  for (size_t c = 0; c < K; ++c)
    o += "  " + pad_left(std::to_string(c), idw) + "  " + pad_right(class_name(r, int(c)), w) + "  " +
         pad_left(pct(c < m.precision.size() ? m.precision[c] : kNaN, 1), 9) + "  " +
         pad_left(pct(c < m.recall.size() ? m.recall[c] : kNaN, 1), 7) + "  " +
         pad_left(std::to_string(c < m.support.size() ? m.support[c] : 0), 8) + "\n";
  return o;
}

// Up to kFullMatrixClasses classes: the whole matrix and the class names under it.
std::string confusion_matrix_section(const Report& r) {
  const Metrics& m = r.metrics;
  const size_t K = m.confusion.size(), idw = id_width(K);
  uint64_t most = 0;
  for (const auto& row : m.confusion)
    for (uint64_t v : row) most = std::max(most, v);
  const size_t cw = std::max(std::to_string(most).size(), idw) + 2;
  std::string o = "\n  confusion matrix (rows: label, columns: prediction)\n  " + std::string(idw, ' ');
  for (size_t c = 0; c < K; ++c) o += pad_left(std::to_string(c), cw);
  o += "\n";
  for (size_t l = 0; l < K; ++l) {
    o += "  " + pad_left(std::to_string(l), idw);
    for (size_t c = 0; c < K; ++c) o += pad_left(std::to_string(m.confusion[l][c]), cw);
    o += "\n";
  }
  o += "  classes:";
  for (size_t c = 0; c < K; ++c) o += std::string(c ? ", " : " ") + std::to_string(c) + " " + class_name(r, int(c));
  return o + "\n";
}

// More classes: the kConfusedPairs largest off-diagonal cells (count, then label, prediction).
std::string confused_pairs_section(const Report& r) {
  const Metrics& m = r.metrics;
  const size_t K = m.confusion.size();
  std::vector<std::tuple<uint64_t, size_t, size_t>> cells;  // count, label, prediction
  for (size_t l = 0; l < K; ++l)
    for (size_t c = 0; c < K; ++c)
      if (l != c && m.confusion[l][c] > 0) cells.emplace_back(m.confusion[l][c], l, c);
  const size_t shown = std::min(kConfusedPairs, cells.size());
  std::partial_sort(cells.begin(), cells.begin() + long(shown), cells.end(), [](const auto& a, const auto& b) {
    if (std::get<0>(a) != std::get<0>(b)) return std::get<0>(a) > std::get<0>(b);
    return std::tie(std::get<1>(a), std::get<2>(a)) < std::tie(std::get<1>(b), std::get<2>(b));
  });
  std::string o = "\n  most confused pairs (" + std::to_string(shown) + " largest of " +
                  std::to_string(cells.size()) + " non-zero off-diagonal cells; label -> predicted: count)\n";
  if (cells.empty()) o += "    none\n";
  for (size_t j = 0; j < shown; ++j) {
    const auto& [count, l, c] = cells[j];
    o += "    " + std::to_string(l) + " " + class_name(r, int(l)) + " -> " + std::to_string(c) + " " +
         class_name(r, int(c)) + ": " + std::to_string(count) + "\n";
  }
  return o;
}

std::string skipped_section(const Report& r) {
  if (r.skipped.empty()) return "";
  std::string o = "\n  skipped " + plural(r.skipped.size(), "sample") + " that could not be decoded (--skip-bad):\n";
  for (size_t j = 0; j < std::min(kSkippedShown, r.skipped.size()); ++j)
    o += "    sample " + std::to_string(r.skipped[j].index) + ": " + data::one_line(r.skipped[j].reason) + "\n";
  if (r.skipped.size() > kSkippedShown) o += "    ... and " + std::to_string(r.skipped.size() - kSkippedShown) + " more\n";
  return o;
}

// The stages' names as --stages writes them, for the calibration's rates.
constexpr const char* kStageKeys[] = {"read", "decode", "batch", "predict"};

// Throughput, latency percentiles, the calibration (--stages auto) and the per-stage table.
std::string timing_section(const Report& r) {
  std::string o = "\n  throughput " + fixed(r.images_per_s(), 1) + " images/s, wall " + fixed(r.wall_s, 2) + " s; ";
  if (r.latency_s.empty())
    o += "latency not measured\n";
  else
    o += "latency p50 " + fixed(1e3 * percentile(r.latency_s, 0.50), 1) + " ms, p95 " +
         fixed(1e3 * percentile(r.latency_s, 0.95), 1) + " ms, p99 " + fixed(1e3 * percentile(r.latency_s, 0.99), 1) +
         " ms\n";
  const Calibration& c = r.calibration;
  if (c.images > 0) {
    o += "  calibration (" + std::to_string(c.images) + " images, rank 0, 1 thread), images/s per rank:";
    for (size_t i = 0; i < c.rates.size(); ++i) o += (i ? ", " : " ") + std::string(kStageKeys[i]) + " " + fixed(c.rates[i], 1);
    if (c.threads > 0) o += "; predict on " + plural(uint64_t(c.threads), "thread") + " " + fixed(c.predict_rate_threads, 1);
    o += "\n  bottleneck " + c.bottleneck + ": predicted " + fixed(c.predicted_images_per_s, 1) + " images/s, measured " +
         fixed(r.images_per_s(), 1) + "\n";
  }
  if (r.stages.empty()) return o;
  size_t sw = 5;
  for (const StageTime& s : r.stages) sw = std::max(sw, s.stage.size());
  o += "  " + pad_right("stage", sw) + "  " + pad_left("rank", 4) + "  " + pad_left("busy s", 9) + "  " +
       pad_left("cpu s", 9) + "  " + pad_left("util", 6) + "  " + pad_left("items", 8) + "\n";
  for (const StageTime& s : r.stages)
    o += "  " + pad_right(s.stage, sw) + "  " + pad_left(std::to_string(s.rank), 4) + "  " +
         pad_left(fixed(s.busy_s, 3), 9) + "  " + pad_left(fixed(s.cpu_s, 3), 9) + "  " +
         pad_left(pct(utilisation(s), 1), 6) + "  " +
         pad_left(std::to_string(s.items), 8) + "\n";
  return o;
}

std::string speedup_line(const Report& r) {
  if (!(r.sequential_images_per_s > 0))
    return r.mode == "sequential" ? "  speedup over sequential: not applicable (this is the sequential run)\n"
                                  : "  speedup over sequential: not measured (run with --compare)\n";
  std::string o = "  speedup over sequential: " + fixed(r.speedup(), 2) + "x (sequential " +
                  fixed(r.sequential_images_per_s, 1) + " images/s)";
  if (r.mismatches_vs_sequential == 0)
    o += "; predictions identical to sequential";
  else if (r.mismatches_vs_sequential > 0)
    o += "; " + std::to_string(r.mismatches_vs_sequential) + " of " + std::to_string(r.images()) +
         " predictions differ from sequential";
  return o + "\n";
}

// What the sequential baseline ran on, when one ran.
std::string baseline_line(const Baseline& b) {
  if (b.threads <= 0) return "";
  std::string o = "  sequential baseline: rank 0 alone with " + plural(uint64_t(b.threads), "thread") + " on ";
  if (b.cpus < b.node_cpus)
    return o + plural(uint64_t(b.cpus), "CPU") + ", its own binding (it could not widen it to the " +
           plural(uint64_t(b.node_cpus), "CPU") + " the job's ranks on its node may use)\n";
  o += "the " + plural(uint64_t(b.cpus), "CPU") + " the job's ranks on its node may use";
  if (b.own_cpus > 0 && b.own_cpus < b.threads)
    o += " (started bound to " + plural(uint64_t(b.own_cpus), "CPU") +
         ", so OpenMP's threads nap between loops; mpiexec --bind-to none gives a small model a faster baseline)";
  return o + "\n";
}

std::string speedup_section(const Report& r) {
  const std::string verdict = pipelining_verdict(r);
  return baseline_line(r.baseline) + speedup_line(r) + (verdict.empty() ? "" : "  " + verdict + "\n");
}

}  // namespace

namespace {

// Without a calibration: only what was measured, when more ranks than CPUs ran slower than the
// baseline.
std::string measured_verdict(const Report& r) {
  if (r.node_ranks <= r.node_cpus || !(r.images_per_s() < r.sequential_images_per_s)) return "";
  return "pipelining did not pay here: " + plural(uint64_t(r.node_ranks), "rank") + " took turns on " +
         plural(uint64_t(r.node_cpus), "CPU") + ", " + fixed(r.images_per_s(), 1) +
         " images/s against the sequential baseline's " + fixed(r.sequential_images_per_s, 1) +
         " (--stages auto on at most " + plural(uint64_t(r.node_cpus), "rank") +
         " spreads the stages from their costs)";
}

}  // namespace

std::string pipelining_verdict(const Report& r) {
  const Calibration& c = r.calibration;
  if (r.mode != "pipeline" || !(r.sequential_images_per_s > 0) || r.node_cpus <= 0) return "";
  if (c.images == 0) return measured_verdict(r);
  if (c.predicted_images_per_s > r.sequential_images_per_s) return "";
  return "pipelining cannot pay here: at most " + fixed(c.predicted_images_per_s, 1) + " images/s (bound by " +
         c.bottleneck + "), the sequential baseline at " + fixed(r.sequential_images_per_s, 1) + " images/s; " +
         plural(uint64_t(r.node_ranks), "rank") + " on " + plural(uint64_t(r.node_cpus), "CPU");
}

namespace {

// Per class precision and recall, then the confusion matrix or its most confused pairs.
std::string classify_body(const Report& r) {
  const size_t K = r.metrics.confusion.size();
  std::string o = per_class_section(r);
  if (K > 0 && K <= kFullMatrixClasses)
    o += confusion_matrix_section(r);
  else if (K > kFullMatrixClasses)
    o += confused_pairs_section(r);
  return o;
}

// The trainer's table (detect/map_eval.h), indented as the report's other sections.
std::string detection_body(const Report& r) {
  std::string table = "\n", line;
  std::istringstream in(detect::format_map_table(r.map, background_and(r.class_names)));
  while (std::getline(in, line)) table += "  " + line + "\n";
  return table;
}

}  // namespace

std::string format_report(const Report& r) {
  return header_section(r) + form_of(r).body(r) + skipped_section(r) + timing_section(r) +
         speedup_section(r);
}

// ---- JSON and CSV -----------------------------------------------------------------------------

namespace {

void classify_json(const Report& r, ojson& j, ojson& per_class) {
  const Metrics& m = r.metrics;
  j["top1"] = num_or_null(m.top1);
  j["top5"] = num_or_null(m.top5);
  j["confusion"] = m.confusion;
  for (size_t c = 0; c < m.confusion.size(); ++c)
    per_class.push_back({{"class", class_name(r, int(c))},
                         {"precision", num_or_null(c < m.precision.size() ? m.precision[c] : kNaN)},
                         {"recall", num_or_null(c < m.recall.size() ? m.recall[c] : kNaN)},
                         {"support", c < m.support.size() ? m.support[c] : 0}});
}

void detection_json(const Report& r, ojson& j, ojson& per_class) {
  j["resize"] = r.resize;
  j["boxes"] = box_count(r);
  j["map50"] = num_or_null(r.map.map50_voc);
  j["map"] = num_or_null(r.map.map_coco);
  j["map50_coco"] = num_or_null(r.map.map50_coco);
  j["map75_coco"] = num_or_null(r.map.map75_coco);
  j["classes_evaluated"] = r.map.classes_evaluated;
  for (const detect::ClassAp& c : r.map.classes) {
    if (c.label == 0) continue;  // the background: no boxes, no AP
    per_class.push_back({{"class", class_name(r, c.label - 1)},
                         {"gt", c.gt_count},
                         {"detections", c.det_count},
                         {"ap50", num_or_null(c.ap50_voc)},
                         {"ap", num_or_null(c.ap_coco)},
                         {"ap50_coco", num_or_null(c.ap50_coco)},
                         {"ap75_coco", num_or_null(c.ap75_coco)}});
  }
}

}  // namespace

std::string report_json(const Report& r) {
  ojson j;
  if (form_of(r).names_task) j["task"] = task_name(r.task);
  j["mode"] = r.mode;
  j["ranks"] = r.ranks;
  j["layout"] = r.layout;
  j["stage_ranks"] = r.stage_ranks.empty() ? ojson() : ojson(r.stage_ranks);
  j["model"] = r.model;
  j["weights"] = r.weights;
  j["dataset"] = r.dataset;
  j["batch_size"] = r.batch_size;
  j["threads"] = r.threads;
  j["device"] = r.device;
  j["execution"] = r.execution;
  j["node_cpus"] = r.node_cpus;
  j["node_ranks"] = r.node_ranks;
  j["classes"] = r.class_names;
  j["evaluated"] = r.images();
  ojson skipped = ojson::array();
  for (const Skipped& s : r.skipped)
    skipped.push_back({{"index", s.index}, {"source", source_of(r, s.index)}, {"reason", s.reason}});
  j["skipped"] = std::move(skipped);
  ojson per_class = ojson::array();
  form_of(r).json(r, j, per_class);
  j["per_class"] = std::move(per_class);
  j["wall_s"] = num_or_null(r.wall_s);
  j["images_per_s"] = num_or_null(r.images_per_s());
  j["latency_s"] = {{"p50", num_or_null(percentile(r.latency_s, 0.50))},
                    {"p95", num_or_null(percentile(r.latency_s, 0.95))},
                    {"p99", num_or_null(percentile(r.latency_s, 0.99))},
                    {"mean", num_or_null(mean_of(r.latency_s))},
                    {"max", num_or_null(max_of(r.latency_s))}};
  ojson stages = ojson::array();
  for (const StageTime& s : r.stages)
    stages.push_back({{"stage", s.stage},
                      {"rank", s.rank},
                      {"busy_s", num_or_null(s.busy_s)},
                      {"cpu_s", num_or_null(s.cpu_s)},
                      {"wall_s", num_or_null(s.wall_s)},
                      {"utilisation", num_or_null(utilisation(s))},
                      {"items", s.items}});
  j["stages"] = std::move(stages);
  if (r.calibration.images > 0) {
    ojson rates;
    for (size_t i = 0; i < r.calibration.rates.size(); ++i) rates[kStageKeys[i]] = num_or_null(r.calibration.rates[i]);
    j["calibration"] = {{"images", r.calibration.images},
                        {"rates", std::move(rates)},
                        {"predict_threads", r.calibration.threads},
                        {"predict_rate_threads", num_or_null(r.calibration.predict_rate_threads)},
                        {"bottleneck", r.calibration.bottleneck},
                        {"predicted_images_per_s", num_or_null(r.calibration.predicted_images_per_s)}};
  } else {
    j["calibration"] = nullptr;
  }
  j["baseline"] = r.baseline.threads > 0 ? ojson{{"threads", r.baseline.threads},
                                                  {"cpus", r.baseline.cpus},
                                                  {"node_cpus", r.baseline.node_cpus},
                                                  {"own_cpus", r.baseline.own_cpus}}
                                           : ojson(nullptr);
  j["sequential_images_per_s"] = r.sequential_images_per_s > 0 ? num_or_null(r.sequential_images_per_s) : ojson(nullptr);
  j["speedup"] = num_or_null(r.speedup());
  j["mismatches_vs_sequential"] = r.mismatches_vs_sequential >= 0 ? ojson(r.mismatches_vs_sequential) : ojson(nullptr);
  const std::string verdict = pipelining_verdict(r);
  j["verdict"] = verdict.empty() ? ojson(nullptr) : ojson(verdict);
  return j.dump(2) + "\n";
}

namespace {

// One row per box: the index and path of its image, class name, score, corners.
void write_detections_csv(const std::string& path, const Report& r) {
  std::string o = "index,path,label,score,x1,y1,x2,y2\n";
  char num[48];
  for (const ImageDetections& d : r.detections) {
    CHECK(d.boxes.size() == 4 * d.scores.size() && d.labels.size() == d.scores.size(), "report: image ",
          d.index, " has ", d.scores.size(), " scores, ", d.labels.size(), " labels and ", d.boxes.size(),
          " box coordinates");
    const std::string head = std::to_string(d.index) + "," + data::csv_field(source_of(r, d.index)) + ",";
    for (size_t k = 0; k < d.scores.size(); ++k) {
      o += head + data::csv_field(class_name(r, int(d.labels[k]) - 1));
      std::snprintf(num, sizeof num, ",%.6g", double(d.scores[k]));
      o += num;
      // Nine significant digits: the float itself, so the file holds exactly the predicted box.
      for (int c = 0; c < 4; ++c) {
        std::snprintf(num, sizeof num, ",%.9g", double(d.boxes[4 * k + size_t(c)]));
        o += num;
      }
      o += "\n";
    }
  }
  write_text(path, o);
}

// One row per image: index, path, label, predicted class, its score, the top-5 class ids.
void write_classify_csv(const std::string& path, const Report& r) {
  std::string o = "index,path,label,prediction,score,top5\n";
  char score[32];
  for (const Prediction& p : r.predictions) {
    std::snprintf(score, sizeof score, "%.6g", double(p.prob[0]));
    std::string top;
    for (int j = 0; j < 5 && p.top[j] >= 0; ++j) {
      if (j) top += ';';
      top += std::to_string(p.top[j]);
    }
    o += std::to_string(p.index) + "," + data::csv_field(source_of(r, p.index)) + "," +
         data::csv_field(class_name(r, p.label)) + "," + data::csv_field(class_name(r, p.top[0])) + "," + score +
         "," + top + "\n";
  }
  write_text(path, o);
}

const TaskForm kClassifyForm{false, classify_results, classify_body, classify_json,
                             write_classify_csv};
const TaskForm kDetectionForm{true, detection_results, detection_body, detection_json,
                              write_detections_csv};

const TaskForm& form_of(const Report& r) {
  return r.task == Task::Detection ? kDetectionForm : kClassifyForm;
}

}  // namespace

void write_predictions_csv(const std::string& path, const Report& r) { form_of(r).csv(path, r); }

void write_report_json(const std::string& path, const Report& r) { write_text(path, report_json(r)); }

}  // namespace mpicnn::eval
