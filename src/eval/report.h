// What ./pipeline_eval reports: accuracy metrics from the predictions (top-1, top-5, confusion
// matrix, per-class precision and recall), timing figures (per-stage busy time and utilisation,
// throughput, per-image latency percentiles, speedup over the sequential baseline), and their
// text, JSON and predictions-CSV forms. Pure functions of the collected numbers: no MPI, no
// model, no files other than the ones the write_* functions are told to write.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/task.h"
#include "detect/map_eval.h"

namespace mpicnn::eval {

// One evaluated sample. top[0..k) are class ids by decreasing probability (ties: lower id
// first), prob[j] the softmax probability of top[j]; k = min(5, number of classes), the unused
// slots are -1 / 0.
struct Prediction {
  uint64_t index = 0;  // position in the evaluated dataset
  int label = 0;
  int top[5] = {-1, -1, -1, -1, -1};
  float prob[5] = {0, 0, 0, 0, 0};
};

// One evaluated image of a detection run: the detector's boxes in the original image's pixels
// (x1 y1 x2 y2), labels 1..classes (class_names[label - 1]; 0 is the background and never
// predicted), scores by decreasing value as torchvision's postprocess leaves them.
struct ImageDetections {
  uint64_t index = 0;              // position in the evaluated dataset
  int64_t height = 0, width = 0;   // the original image's size
  std::vector<float> boxes;        // (n, 4)
  std::vector<int64_t> labels;     // (n)
  std::vector<float> scores;       // (n)
};

// A sample that could not be decoded and was skipped (--skip-bad).
struct Skipped {
  uint64_t index = 0;
  std::string reason;  // the decoder's one-line error, naming the file
};

// Busy time of one stage on one rank: time spent inside the stage's work (reading, decoding,
// normalising, predicting), not waiting for messages.
struct StageTime {
  std::string stage;  // "read", "decode+resize", "normalize+batch", "predict"
  int rank = 0;
  double busy_s = 0;  // seconds of work (wall clock: includes time the OS gave the core to others)
  double cpu_s = 0;   // CPU seconds of that work, all threads of the rank (busy_s - cpu_s / threads
                      // is time spent descheduled, e.g. with more ranks than cores)
  double wall_s = 0;  // seconds the rank ran the pipeline (utilisation = busy_s / wall_s)
  uint64_t items = 0;  // samples (read, decode, normalize) or batches (predict) processed
};

// --stages auto: what the calibration measured before the run and what it chose from that.
struct Calibration {
  uint64_t images = 0;           // the first images, every stage on rank 0 with one thread; 0: none ran
  std::vector<double> rates;     // per stage (read, decode, batch, predict): images/s on one rank
  int threads = 0;               // predict measured again on this many threads (0: not)
  double predict_rate_threads = 0;  // its images/s then
  std::string bottleneck;        // what bounds the chosen layout: "predict on 3 ranks", or the
                                 // node's CPUs, shared by every stage
  double predicted_images_per_s = 0;  // that bound on the measured throughput
};

// The sequential baseline (--compare, --sequential): rank 0 alone, on the CPUs of its node that the
// job's ranks may use (the cores the pipeline runs on).
struct Baseline {
  int threads = 0;    // 0: no baseline ran
  int cpus = 0;       // CPUs rank 0 could run on during it
  int node_cpus = 0;  // CPUs the job's ranks on rank 0's node may use (cpus is less only when
                      // rank 0 could not widen its binding to them)
  int own_cpus = 0;   // rank 0's own binding, as the job started it: GNU OpenMP sizes its thread
                      // waits for that count once, at start, so more threads than that nap
                      // between parallel regions (slow for small models) even once widened
};

struct Metrics {
  uint64_t evaluated = 0;  // predictions counted (skipped samples are not)
  double top1 = 0, top5 = 0;  // fractions in [0, 1]; top5 counts a hit in top[0..k)
  std::vector<std::vector<uint64_t>> confusion;  // [label][predicted], classes x classes
  std::vector<double> precision, recall;  // per class; NaN when the denominator is 0
  std::vector<uint64_t> support;  // samples per true label
};

// predictions in any order; labels and top[0] must be in [0, num_classes) (Error otherwise).
Metrics compute_metrics(const std::vector<Prediction>& predictions, int num_classes);

// The q-quantile (q in [0, 1]) of the values by linear interpolation between closest ranks
// (numpy's default); NaN for an empty vector. Does not need sorted input.
double percentile(std::vector<double> values, double q);

struct Report {
  // what ran
  Task task = Task::Classify;  // Detection: a Faster R-CNN checkpoint
  std::string mode;    // "pipeline" or "sequential"
  int ranks = 1;
  std::string layout;  // "rank 0: read | rank 1: decode+resize | ..." (Layout::describe)
  std::string stage_ranks;  // the same as --stages takes it: "read=1,decode=1,batch=1,predict=1"; empty: sequential
  std::string model, weights;  // model name; the checkpoint directory or weights file
  std::string dataset;         // Dataset::describe()
  int batch_size = 0, threads = 0;  // threads per predicting rank
  std::string device;               // where and in what math the predicting ranks computed
  std::string execution;            // their execution config (describe_exec)
  std::string plan;                 // with --explain-plan: their model's plan per layer
                                    // (describe_device: "cpu", "cuda: NVIDIA H100..., tf32")
  int node_cpus = 0, node_ranks = 0;  // on rank 0's node: CPUs the job's ranks may use, and those ranks
  std::vector<std::string> class_names;  // detection: without the background (label k: [k - 1])
  std::vector<std::string> sources;  // Dataset::source(i) for every evaluated index (path column)
  // results
  std::vector<Prediction> predictions;  // sorted by index by the caller
  std::vector<Skipped> skipped;
  Metrics metrics;
  // detection results (task "detection"; predictions and metrics stay empty)
  std::vector<ImageDetections> detections;  // sorted by index by the caller
  detect::MapResult map;                    // of `detections` against the set's boxes
  std::string resize;                       // "min-size 800, max-size 1333": the detector's transform
  // timing
  double wall_s = 0;                  // first read to last prediction
  std::vector<double> latency_s;      // per predicted image: read started -> prediction received
  std::vector<StageTime> stages;
  Calibration calibration;
  Baseline baseline;
  double sequential_images_per_s = 0;  // 0 when no sequential baseline ran (--compare)
  int64_t mismatches_vs_sequential = -1;  // predictions differing from the baseline; -1 = not compared

  uint64_t images() const;       // predictions (or, detection, detections) counted
  double images_per_s() const;  // images() / wall_s
  double speedup() const;       // images_per_s() / sequential_images_per_s; NaN without baseline
};

// One line when the pipeline ran with a calibration (--stages auto) and a baseline (--compare)
// and what the calibration measured says that no layout of these ranks can beat the baseline on
// these CPUs: the calibration's bound (eval/layout.h layout_rate: the slowest group's rate, or
// what the node's CPUs can do, shared by every stage's work) is at or below the sequential rate. Without a calibration, one line when more ranks than CPUs on rank 0's
// node measured a lower rate than the baseline. Empty otherwise. No newline.
std::string pipelining_verdict(const Report& r);

// The human-readable report printed at the end: what ran, top-1/top-5, per-class precision and
// recall with class names, the confusion matrix (classes x classes; for more than 20 classes
// only the 20 most confused pairs are listed), skipped samples, throughput, latency p50/p95/p99,
// per-stage busy time and utilisation, what the sequential baseline ran on, speedup, and the
// verdict when pipelining cannot pay (pipelining_verdict). Ends with a newline. A detection report has,
// instead of top-1/top-5 and the class tables, the images and boxes counted, VOC mAP@0.5, COCO
// mAP@[.5:.95] and the per-class table of detect::format_map_table.
std::string format_report(const Report& r);

// The same content as one JSON object (pretty-printed, 2-space indent): keys "mode", "ranks",
// "layout", "stage_ranks" (null when empty), "model", "weights", "dataset", "batch_size", "threads", "device",
// "node_cpus", "node_ranks", "classes", "evaluated",
// "skipped" (array of {"index","source","reason"}), "top1", "top5", "confusion" (array of
// arrays), "per_class" (array of {"class","precision","recall","support"}; NaN -> null),
// "wall_s", "images_per_s", "latency_s" ({"p50","p95","p99","mean","max"}), "stages" (array
// of {"stage","rank","busy_s","cpu_s","wall_s","utilisation","items"}), "baseline" ({"threads","cpus",
// "node_cpus","own_cpus"}; null when none ran), "sequential_images_per_s" (null when 0), "speedup" (null when
// NaN), "mismatches_vs_sequential" (null when -1), "verdict" (pipelining_verdict; null when empty),
// "calibration" ({"images","rates":{"read",...,"predict"},"predict_threads","predict_rate_threads","bottleneck","predicted_images_per_s"};
// null when none ran).
// Detection: "task": "detection" (first), and instead of "top1", "top5", "confusion" and the classifier's
// "per_class": "resize", "boxes" (detections counted), "map50" (VOC mAP@0.5), "map" (COCO
// mAP@[.5:.95]), "map50_coco", "map75_coco", "classes_evaluated", "per_class" (array of
// {"class","gt","detections","ap50","ap","ap50_coco","ap75_coco"}, NaN -> null); classes
// have no background. Classifier reports have no "task" key.
std::string report_json(const Report& r);

// The predictions CSV: header "index,path,label,prediction,score,top5" then one row per
// prediction in r.predictions order: index, sources[index] (CSV-quoted when needed), the label's
// class name, the predicted class name, the predicted probability with 6 significant digits, and
// the top-k class ids joined by ';'. Written atomically (io/atomic_file.h).
// Detection: header "index,path,label,score,x1,y1,x2,y2", one row per box (images by index,
// boxes in the detector's order): the class name, the score with 6 significant digits, the
// corners in original-image pixels (9 significant digits: the float exactly).
void write_predictions_csv(const std::string& path, const Report& r);
// report_json(r) written atomically.
void write_report_json(const std::string& path, const Report& r);

}  // namespace mpicnn::eval
