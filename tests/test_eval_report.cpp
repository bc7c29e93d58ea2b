// pipeline_eval's report: metrics on small hand-made prediction sets whose confusion matrix,
// precision and recall are worked out by hand, numpy-style percentiles, and the JSON, CSV and
// text forms of a Report (keys, nulls for unmeasured figures, quoting, the >20-classes listing).
#include <cmath>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/check.h"
#include "eval/report.h"
#include "testing.h"

using namespace mpicnn;
using namespace mpicnn::eval;
using mpicnn::testing::expect_error;
using mpicnn::testing::TempDir;
using nlohmann::json;

namespace {

Prediction pred(uint64_t index, int label, std::initializer_list<int> top, float prob0 = 0.5f) {
  Prediction p;
  p.index = index;
  p.label = label;
  int j = 0;
  for (int t : top) p.top[j++] = t;
  p.prob[0] = prob0;
  return p;
}

// Three classes, six samples. Confusion [label][predicted]:
//   label 0: 2 1 0      column sums 4 2 0 -> precision 2/4, 1/2, NaN (class 2 never predicted)
//   label 1: 1 1 0      row sums    3 2 1 -> recall    2/3, 1/2, 0/1
//   label 2: 1 0 0      top-1 3/6; every label is within the 3 valid slots -> top-5 6/6
std::vector<Prediction> small_set() {
  return {pred(0, 0, {0, 1, 2}, 0.9f), pred(1, 0, {1, 0, 2}, 0.123456789f), pred(2, 1, {1, 2, 0}, 1.0f),
          pred(3, 1, {0, 1, 2}), pred(4, 2, {0, 1, 2}), pred(5, 0, {0, 2, 1})};
}

Report small_report() {
  Report r;
  r.mode = "pipeline";
  r.ranks = 4;
  r.layout = "rank 0: read | rank 1: decode+resize | rank 2: normalize+batch | rank 3: predict";
  r.stage_ranks = "read=1,decode=1,batch=1,predict=1";
  r.model = "lenet";
  r.weights = "runs/a/checkpoint";
  r.dataset = "toy test";
  r.batch_size = 2;
  r.threads = 1;
  r.class_names = {"cat", "dog", "bird, small"};
  r.sources = {"/d/0.png", "/d/a,b.png", "/d/2.png", "/d/3.png", "/d/4.png", "/d/5.png", "/d/6.png"};
  r.predictions = small_set();
  r.skipped = {{6, "/d/6.png: not a PNG"}};
  r.metrics = compute_metrics(r.predictions, 3);
  r.wall_s = 2.0;
  r.latency_s = {0.040, 0.010, 0.030, 0.020};
  r.stages = {{"read", 0, 0.5, 0.25, 2.0, 7}, {"predict", 3, 1.0, 0.9, 0.0, 3}};
  return r;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot read ", path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("eval report: metrics of a hand-made set") {
  const Metrics m = compute_metrics(small_set(), 3);
  CHECK(m.evaluated == 6);
  CHECK(m.confusion == std::vector<std::vector<uint64_t>>{{2, 1, 0}, {1, 1, 0}, {1, 0, 0}});
  CHECK(m.support == std::vector<uint64_t>{3, 2, 1});
  CHECK(m.top1 == doctest::Approx(0.5));
  CHECK(m.top5 == doctest::Approx(1.0));
  REQUIRE(m.precision.size() == 3);
  REQUIRE(m.recall.size() == 3);
  CHECK(m.precision[0] == doctest::Approx(0.5));
  CHECK(m.precision[1] == doctest::Approx(0.5));
  CHECK(std::isnan(m.precision[2]));
  CHECK(m.recall[0] == doctest::Approx(2.0 / 3));
  CHECK(m.recall[1] == doctest::Approx(0.5));
  CHECK(m.recall[2] == 0.0);

  // Order does not matter.
  std::vector<Prediction> reversed = small_set();
  std::reverse(reversed.begin(), reversed.end());
  CHECK(compute_metrics(reversed, 3).confusion == m.confusion);

  // A class with no samples at all: recall and precision NaN, support 0.
  const Metrics m4 = compute_metrics(small_set(), 4);
  CHECK(m4.support[3] == 0);
  CHECK(std::isnan(m4.recall[3]));
  CHECK(std::isnan(m4.precision[3]));

  // Nothing evaluated: no accuracy to speak of.
  const Metrics none = compute_metrics({}, 3);
  CHECK(none.evaluated == 0);
  CHECK(none.confusion == std::vector<std::vector<uint64_t>>(3, std::vector<uint64_t>(3, 0)));
  CHECK(std::isnan(none.top1));
  CHECK(std::isnan(none.recall[0]));
}

TEST_CASE("eval report: top-5 counts only the valid slots") {
  // 7 classes: a hit in the fifth slot counts, a label outside the five does not.
  const Metrics m7 = compute_metrics({pred(0, 3, {0, 1, 2, 4, 3}), pred(1, 5, {0, 1, 2, 3, 4}),
                                      pred(2, 0, {0, 1, 2, 3, 4})},
                                     7);
  CHECK(m7.top1 == doctest::Approx(1.0 / 3));
  CHECK(m7.top5 == doctest::Approx(2.0 / 3));
  // 2 classes: k = 2, the unused slots are -1.
  const Metrics m2 = compute_metrics({pred(0, 1, {0, 1}), pred(1, 0, {0, 1}), pred(2, 1, {1, 0})}, 2);
  CHECK(m2.top1 == doctest::Approx(2.0 / 3));
  CHECK(m2.top5 == doctest::Approx(1.0));
  CHECK(m2.confusion == std::vector<std::vector<uint64_t>>{{1, 0}, {1, 1}});
}

TEST_CASE("eval report: labels and predictions outside the classes are errors") {
  std::vector<Prediction> p = small_set();
  p.push_back(pred(17, 3, {0, 1, 2}));
  expect_error([&] { compute_metrics(p, 3); }, "sample 17: label 3");
  p.back() = pred(18, -1, {0, 1, 2});
  expect_error([&] { compute_metrics(p, 3); }, "sample 18: label -1");
  p.back() = pred(19, 1, {-1, -1, -1});
  expect_error([&] { compute_metrics(p, 3); }, "sample 19: prediction -1");
  p.back() = pred(20, 1, {5, 0, 1});
  expect_error([&] { compute_metrics(p, 3); }, "sample 20: prediction 5");
  expect_error([&] { compute_metrics(small_set(), 0); }, "0 classes");
}

TEST_CASE("eval report: percentile interpolates like numpy") {
  // sorted 1 2 3 4: position q * 3
  const std::vector<double> v = {4, 1, 3, 2};
  CHECK(percentile(v, 0.0) == 1.0);
  CHECK(percentile(v, 1.0) == 4.0);
  CHECK(percentile(v, 0.5) == doctest::Approx(2.5));    // 1.5
  CHECK(percentile(v, 0.25) == doctest::Approx(1.75));  // 0.75
  CHECK(percentile(v, 0.95) == doctest::Approx(3.85));  // 2.85
  CHECK(percentile(v, 0.99) == doctest::Approx(3.97));  // 2.97
  CHECK(percentile({10, 20, 30}, 0.5) == 20.0);          // exact rank
  CHECK(percentile({10, 20, 30}, 0.75) == doctest::Approx(25.0));
  CHECK(percentile({7}, 0.0) == 7.0);
  CHECK(percentile({7}, 0.99) == 7.0);
  CHECK(std::isnan(percentile({}, 0.5)));
  expect_error([] { percentile({1, 2}, 1.5); }, "outside [0, 1]");
}

TEST_CASE("eval report: throughput and speedup") {
  Report r = small_report();
  CHECK(r.images_per_s() == doctest::Approx(3.0));  // 6 predictions in 2 s
  CHECK(std::isnan(r.speedup()));
  r.sequential_images_per_s = 1.5;
  CHECK(r.speedup() == doctest::Approx(2.0));
  r.wall_s = 0;
  CHECK(r.images_per_s() == 0.0);
}

TEST_CASE("eval report: --stages auto's calibration, text and JSON") {
  Report r = small_report();
  r.wall_s = 2;  // 6 images: 3 images/s
  r.calibration.images = 16;
  r.calibration.rates = {4000, 650, 9000, std::numeric_limits<double>::infinity()};
  r.calibration.bottleneck = "decode on 4 ranks";
  r.calibration.predicted_images_per_s = 2600;
  const std::string t = format_report(r);
  CHECK(has(t, "  calibration (16 images, rank 0, 1 thread), images/s per rank: read 4000.0, decode 650.0, "
               "batch 9000.0, predict -\n"));  // too fast to measure
  CHECK(has(t, "  bottleneck decode on 4 ranks: predicted 2600.0 images/s, measured 3.0\n"));
  const json j = json::parse(report_json(r));
  CHECK(j["calibration"]["images"] == 16);
  CHECK(j["calibration"]["rates"]["decode"] == 650.0);
  CHECK(j["calibration"]["rates"]["predict"].is_null());
  CHECK(j["calibration"]["bottleneck"] == "decode on 4 ranks");
  CHECK(j["calibration"]["predicted_images_per_s"] == 2600.0);
  CHECK(j["calibration"]["predict_threads"] == 0);
  // Predict measured again on the node's threads: its rate follows the per-rank ones.
  r.calibration.rates[3] = 12.5;
  r.calibration.threads = 2;
  r.calibration.predict_rate_threads = 22.5;
  CHECK(has(format_report(r), "batch 9000.0, predict 12.5; predict on 2 threads 22.5\n"));
  CHECK(json::parse(report_json(r))["calibration"]["predict_rate_threads"] == 22.5);
}

TEST_CASE("eval report: what the sequential baseline ran on, text and JSON") {
  Report r = small_report();
  r.sequential_images_per_s = 1.5;
  r.baseline = {16, 16, 16, 16};
  CHECK(has(format_report(r), "  sequential baseline: rank 0 alone with 16 threads on the 16 CPUs the job's ranks on "
                              "its node may use\n  speedup over sequential: 2.00x"));
  CHECK(json::parse(report_json(r))["baseline"] ==
        json{{"threads", 16}, {"cpus", 16}, {"node_cpus", 16}, {"own_cpus", 16}});
  r.baseline = {2, 2, 2, 1};  // widened from mpiexec's binding: GNU OpenMP still waits as on 1 CPU
  CHECK(has(format_report(r), "  sequential baseline: rank 0 alone with 2 threads on the 2 CPUs the job's ranks on "
                              "its node may use (started bound to 1 CPU, so OpenMP's threads nap between loops; "
                              "mpiexec --bind-to none gives a small model a faster baseline)\n"));
  r.baseline = {1, 1, 4, 1};  // its binding could not be widened: said, not hidden
  CHECK(has(format_report(r), "  sequential baseline: rank 0 alone with 1 thread on 1 CPU, its own binding (it could "
                              "not widen it to the 4 CPUs the job's ranks on its node may use)\n"));
}

// A pipeline with --stages auto and --compare: the calibration's rates, the bound of the chosen
// layout, the baseline's measured rate, the ranks and CPUs of rank 0's node.
Report judged(double predicted, double sequential, int ranks, int cpus) {
  Report r = small_report();
  r.calibration.images = 16;
  r.calibration.rates = {100000, 50000, 50000, 5000};  // 250 us per image in all, predict 200 of them
  r.calibration.bottleneck = "predict on 1 rank";
  r.calibration.predicted_images_per_s = predicted;
  r.sequential_images_per_s = sequential;
  r.node_ranks = ranks;
  r.node_cpus = cpus;
  return r;
}

TEST_CASE("eval report: the verdict says when pipelining cannot pay, with the numbers") {
  // The bound is below the baseline: it says so, in the text and the JSON.
  const Report slow = judged(5000, 6000, 2, 2);
  const std::string want = "pipelining cannot pay here: at most 5000.0 images/s (bound by predict on 1 rank), "
                           "the sequential baseline at 6000.0 images/s; 2 ranks on 2 CPUs";
  CHECK(pipelining_verdict(slow) == want);
  CHECK(has(format_report(slow), "x (sequential 6000.0 images/s)\n  " + want + "\n"));
  CHECK(json::parse(report_json(slow))["verdict"] == want);
  CHECK(has(pipelining_verdict(judged(6000, 6000, 2, 2)),  // equal: no gain
            "at most 6000.0 images/s (bound by predict on 1 rank), the sequential baseline at 6000.0"));
  // Faster than the baseline: nothing to say.
  CHECK(pipelining_verdict(judged(8000, 6000, 2, 2)).empty());
  // The CPUs bind (the calibration names them): said as the bound.
  Report shared = judged(8000, 9000, 4, 2);
  shared.calibration.bottleneck = "the node's 2 CPUs, shared by every stage";
  CHECK(pipelining_verdict(shared) == "pipelining cannot pay here: at most 8000.0 images/s (bound by the node's 2 CPUs, "
                                      "shared by every stage), the sequential baseline at 9000.0 images/s; 4 ranks on 2 CPUs");
  // No calibration: what was measured, only with more ranks than CPUs (3 images/s measured).
  Report none = judged(5000, 6000, 2, 2);
  none.calibration = {};
  CHECK(pipelining_verdict(none).empty());
  Report crowded = judged(5000, 6, 4, 2);
  crowded.calibration = {};
  CHECK(pipelining_verdict(crowded) == "pipelining did not pay here: 4 ranks took turns on 2 CPUs, 3.0 images/s "
                                       "against the sequential baseline's 6.0 (--stages auto on at most 2 ranks "
                                       "spreads the stages from their costs)");
  crowded.sequential_images_per_s = 2;
  CHECK(pipelining_verdict(crowded).empty());  // faster all the same
  // Nothing to judge: no baseline, or the sequential run itself.
  CHECK(pipelining_verdict(judged(5000, 0, 2, 2)).empty());
  Report seq = judged(5000, 6000, 2, 2);
  seq.mode = "sequential";
  CHECK(pipelining_verdict(seq).empty());
}

TEST_CASE("eval report: JSON keys and values") {
  Report r = small_report();
  const std::string text = report_json(r);
  CHECK(text.back() == '\n');
  CHECK(has(text, "\n  \"mode\": \"pipeline\""));  // pretty-printed with 2 spaces
  const json j = json::parse(text);
  std::set<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.insert(it.key());
  CHECK(keys == std::set<std::string>{"mode", "ranks", "layout", "stage_ranks", "model", "weights", "dataset", "batch_size",
                                      "threads", "device", "execution", "node_cpus", "node_ranks", "classes", "evaluated", "skipped",
                                      "top1", "top5", "confusion",
                                      "per_class", "wall_s", "images_per_s", "latency_s", "stages",
                                      "baseline", "sequential_images_per_s", "speedup", "mismatches_vs_sequential",
                                      "verdict", "calibration"});
  CHECK(j["calibration"].is_null());  // no --stages auto
  CHECK(j["baseline"].is_null());     // no --compare
  CHECK(j["verdict"].is_null());
  CHECK(j["mode"] == "pipeline");
  CHECK(j["ranks"] == 4);
  CHECK(j["layout"] == r.layout);
  CHECK(j["stage_ranks"] == "read=1,decode=1,batch=1,predict=1");
  CHECK(j["model"] == "lenet");
  CHECK(j["weights"] == "runs/a/checkpoint");
  CHECK(j["dataset"] == "toy test");
  CHECK(j["batch_size"] == 2);
  CHECK(j["threads"] == 1);
  CHECK(j["classes"] == json{"cat", "dog", "bird, small"});
  CHECK(j["evaluated"] == 6);
  REQUIRE(j["skipped"].size() == 1);
  CHECK(j["skipped"][0] == json{{"index", 6}, {"source", "/d/6.png"}, {"reason", "/d/6.png: not a PNG"}});
  CHECK(j["top1"].get<double>() == doctest::Approx(0.5));
  CHECK(j["top5"].get<double>() == doctest::Approx(1.0));
  CHECK(j["confusion"] == json{{2, 1, 0}, {1, 1, 0}, {1, 0, 0}});
  REQUIRE(j["per_class"].size() == 3);
  CHECK(j["per_class"][0]["class"] == "cat");
  CHECK(j["per_class"][0]["precision"].get<double>() == doctest::Approx(0.5));
  CHECK(j["per_class"][0]["recall"].get<double>() == doctest::Approx(2.0 / 3));
  CHECK(j["per_class"][0]["support"] == 3);
  CHECK(j["per_class"][2]["class"] == "bird, small");
  CHECK(j["per_class"][2]["precision"].is_null());  // NaN -> null
  CHECK(j["per_class"][2]["recall"] == 0.0);
  CHECK(j["per_class"][2]["support"] == 1);
  CHECK(j["wall_s"] == 2.0);
  CHECK(j["images_per_s"].get<double>() == doctest::Approx(3.0));
  const json& lat = j["latency_s"];
  CHECK(lat.size() == 5);
  CHECK(lat["p50"].get<double>() == doctest::Approx(0.025));
  CHECK(lat["p95"].get<double>() == doctest::Approx(0.0385));
  CHECK(lat["p99"].get<double>() == doctest::Approx(0.0397));
  CHECK(lat["mean"].get<double>() == doctest::Approx(0.025));
  CHECK(lat["max"].get<double>() == doctest::Approx(0.040));
  REQUIRE(j["stages"].size() == 2);
  CHECK(j["stages"][0] ==
        json{{"stage", "read"}, {"rank", 0}, {"busy_s", 0.5}, {"cpu_s", 0.25}, {"wall_s", 2.0}, {"utilisation", 0.25}, {"items", 7}});
  CHECK(j["stages"][1]["utilisation"].is_null());  // wall 0: no utilisation
  CHECK(j["sequential_images_per_s"].is_null());
  CHECK(j["speedup"].is_null());
  CHECK(j["mismatches_vs_sequential"].is_null());

  // With a baseline, and nothing measured at all.
  r.sequential_images_per_s = 1.5;
  r.mismatches_vs_sequential = 0;
  r.latency_s.clear();
  const json k = json::parse(report_json(r));
  CHECK(k["sequential_images_per_s"] == 1.5);
  CHECK(k["speedup"].get<double>() == doctest::Approx(2.0));
  CHECK(k["mismatches_vs_sequential"] == 0);
  for (const char* q : {"p50", "p95", "p99", "mean", "max"}) CHECK_MESSAGE(k["latency_s"][q].is_null(), q);

  TempDir dir;
  write_report_json(dir / "report.json", r);
  CHECK(slurp(dir / "report.json") == report_json(r));
}

TEST_CASE("eval report: predictions CSV") {
  TempDir dir;
  const Report r = small_report();
  write_predictions_csv(dir / "predictions.csv", r);
  std::vector<std::string> lines;
  std::istringstream in(slurp(dir / "predictions.csv"));
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  REQUIRE(lines.size() == 7);
  CHECK(lines[0] == "index,path,label,prediction,score,top5");
  CHECK(lines[1] == "0,/d/0.png,cat,cat,0.9,0;1;2");
  CHECK(lines[2] == "1,\"/d/a,b.png\",cat,dog,0.123457,1;0;2");
  CHECK(lines[3] == "2,/d/2.png,dog,dog,1,1;2;0");
  CHECK(lines[5] == "4,/d/4.png,\"bird, small\",cat,0.5,0;1;2");

  // Fewer slots than 5; no sources given: the path column is empty (quoted, as csv_field does).
  Report two;
  two.class_names = {"no", "yes"};
  two.predictions = {pred(3, 1, {1, 0}, 0.75f)};
  write_predictions_csv(dir / "two.csv", two);
  CHECK(slurp(dir / "two.csv") == "index,path,label,prediction,score,top5\n3,\"\",yes,yes,0.75,1;0\n");

  // Sources that do not cover an evaluated index: the caller's bug, not a silent blank.
  two.sources = {"/a.png"};
  expect_error([&] { write_predictions_csv(dir / "bad.csv", two); }, "sample 3 has no source");
  CHECK(!std::filesystem::exists(dir / "bad.csv"));
}

TEST_CASE("eval report: text report") {
  Report r = small_report();
  const std::string t = format_report(r);
  INFO(t);
  CHECK(t.back() == '\n');
  CHECK(has(t, "lenet"));
  CHECK(has(t, "toy test"));
  CHECK(has(t, "4 ranks (pipeline)"));
  CHECK(has(t, "batch 2"));
  CHECK(has(t, "layout: rank 0: read | rank 1: decode+resize"));
  CHECK(has(t, "rank 3: predict (--stages read=1,decode=1,batch=1,predict=1)\n"));
  CHECK(has(t, "top-1 50.00%"));
  CHECK(has(t, "top-5 100.00%"));
  CHECK(has(t, "(6 evaluated, 1 skipped)"));
  // per class rows: precision, recall, support; NaN precision as "-"
  CHECK(has(t, "  0  cat              50.0%    66.7%         3\n"));
  CHECK(has(t, "  2  bird, small          -     0.0%         1\n"));
  // the full matrix with class ids as headers and a legend
  CHECK(has(t, "confusion matrix (rows: label, columns: prediction)"));
  CHECK(has(t, "\n     0  1  2\n  0  2  1  0\n  1  1  1  0\n  2  1  0  0\n"));
  CHECK(has(t, "classes: 0 cat, 1 dog, 2 bird, small"));
  CHECK(has(t, "/d/6.png: not a PNG"));
  CHECK(has(t, "throughput 3.0 images/s, wall 2.00 s"));
  CHECK(has(t, "latency p50 25.0 ms, p95 38.5 ms, p99 39.7 ms"));
  CHECK(has(t, "read"));
  CHECK(has(t, "25.0%"));  // read: 0.5 s busy of 2 s
  CHECK(has(t, "speedup over sequential: not measured (run with --compare)"));

  r.sequential_images_per_s = 1.5;
  r.mismatches_vs_sequential = 0;
  CHECK(has(format_report(r), "speedup over sequential: 2.00x (sequential 1.5 images/s); predictions identical"));
  r.mismatches_vs_sequential = 2;
  CHECK(has(format_report(r), "2 of 6 predictions differ"));
}

TEST_CASE("eval report: more than 20 classes lists the most confused pairs") {
  // 25 classes: label l is right once and taken for (l + 1) % 25 l + 1 times. The 20 largest
  // off-diagonal cells are labels 24 down to 5.
  const int K = 25;
  Report r;
  r.mode = "pipeline";
  for (int c = 0; c < K; ++c) r.class_names.push_back(std::string("c") + std::to_string(c));
  uint64_t index = 0;
  for (int l = 0; l < K; ++l) {
    r.predictions.push_back(pred(index++, l, {l}));
    for (int j = 0; j <= l; ++j) r.predictions.push_back(pred(index++, l, {(l + 1) % K}));
  }
  r.metrics = compute_metrics(r.predictions, K);
  CHECK(r.metrics.confusion[24][0] == 25);
  const std::string t = format_report(r);
  CHECK(!has(t, "confusion matrix (rows"));
  CHECK(has(t, "20 largest of 25"));
  CHECK(has(t, "\n    24 c24 -> 0 c0: 25\n"));
  CHECK(has(t, "\n    5 c5 -> 6 c6: 6\n"));
  CHECK(!has(t, "\n    4 c4 -> 5 c5: 5\n"));
  CHECK(t.find("24 c24 -> 0 c0") < t.find("23 c23 -> 24 c24"));  // largest first
  CHECK(has(t, "c24"));  // per-class rows keep every class
}

TEST_CASE("eval report: detection report, JSON and one CSV row per box") {
  TempDir dir;
  Report r;
  r.task = Task::Detection;
  r.mode = "pipeline";
  r.ranks = 2;
  r.model = "fasterrcnn_resnet18_fpn";
  r.class_names = {"cat", "dog, small"};
  r.sources = {"/d/0.png", "/d/1.png"};
  r.resize = "min-size 64, max-size 96";
  ImageDetections a;
  a.index = 0;
  a.boxes = {1.5f, 2.f, 10.f, 20.25f, 0.f, 0.f, 3.f, 4.f};
  a.labels = {2, 1};
  a.scores = {0.987654321f, 0.5f};
  ImageDetections b;  // an image without boxes: no row
  b.index = 1;
  r.detections = {a, b};
  r.map.classes.resize(3);
  r.map.classes[1].label = 1, r.map.classes[1].gt_count = 2, r.map.classes[1].det_count = 1;
  r.map.classes[1].ap50_voc = 0.5, r.map.classes[1].ap_coco = 0.25;
  r.map.classes[2].label = 2, r.map.classes[2].det_count = 1;  // no ground truth: NaN APs
  r.map.classes_evaluated = 1;
  r.map.map50_voc = 0.5, r.map.map_coco = 0.25, r.map.map50_coco = 0.5, r.map.map75_coco = 0;
  r.wall_s = 0.5;
  CHECK(r.images() == 2);
  CHECK(r.images_per_s() == 4.0);

  write_predictions_csv(dir / "p.csv", r);
  CHECK(slurp(dir / "p.csv") ==
        "index,path,label,score,x1,y1,x2,y2\n"
        "0,/d/0.png,\"dog, small\",0.987654,1.5,2,10,20.25\n"
        "0,/d/0.png,cat,0.5,0,0,3,4\n");

  const json j = json::parse(report_json(r));
  CHECK(j["task"] == "detection");
  CHECK(j["evaluated"] == 2);
  CHECK(j["boxes"] == 2);
  CHECK(j["map50"] == 0.5);
  CHECK(j["map"] == 0.25);
  CHECK(j["classes_evaluated"] == 1);
  CHECK(!j.contains("top1"));
  CHECK(!j.contains("confusion"));
  REQUIRE(j["per_class"].size() == 2);  // no background entry
  CHECK(j["per_class"][0] == json{{"class", "cat"}, {"gt", 2}, {"detections", 1}, {"ap50", 0.5}, {"ap", 0.25},
                                  {"ap50_coco", nullptr}, {"ap75_coco", nullptr}});
  CHECK(j["per_class"][1]["class"] == "dog, small");
  CHECK(j["per_class"][1]["ap50"].is_null());
  CHECK(j["images_per_s"] == 4.0);

  const std::string text = format_report(r);
  CHECK(has(text, "  detector input: min-size 64, max-size 96\n"));
  CHECK(has(text, "  mAP@0.5 (VOC) 0.5000  mAP@[.5:.95] (COCO) 0.2500  (2 images, 2 boxes, 0 skipped)\n"));
  CHECK(has(text, "\n  cat "));
  CHECK(!has(text, "top-1"));
  CHECK(!has(text, "__background__"));
}
