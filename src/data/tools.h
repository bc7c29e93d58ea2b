// The data tools' logic (create_dataset, export_images, dataset_stats), kept in the library so
// that tests call it directly and the mains in data_tools/ only parse flags and print.
// Not a dataset format: what these write is read back by csv_dataset.h and image_folder.h.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <iostream>
#include <span>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/shards.h"
#include "data/image.h"

namespace mpicnn::data {

// ---- stratified sampling ----------------------------------------------------------------------

// Splits `total` into integer shares proportional to `weights` with lo[k] <= share[k] <= hi[k]
// (largest remainders; ties go to the lower index), summing exactly to `total`. Needs
// sum(lo) <= total <= sum(hi) and lo[k] <= hi[k]; an Error otherwise.
std::vector<size_t> apportion(std::span<const size_t> weights, size_t total, std::span<const size_t> lo,
                              std::span<const size_t> hi);

// Samples per class (labels must be in [0, num_classes)).
std::vector<size_t> count_labels(std::span<const int32_t> labels, int num_classes);

// Per-class sample sizes for a stratified sample of `size` out of class counts `counts`:
// proportional, exact total, and at least one sample of every non-empty class when size allows.
std::vector<size_t> stratified_quotas(std::span<const size_t> counts, size_t size);

struct StratifiedSplit {
  std::vector<uint64_t> train, test;  // dataset indices, ascending; disjoint
};

// A stratified random sample of `size` indices (stratified_quotas per class, drawn without
// replacement with Philox keyed on (seed, class, draw)), split stratified into test (exactly
// round(size * test_fraction) in total, shared over classes as apportion() does; every class
// with two or more sampled keeps at least one in each part when the total allows) and train.
// Serial and a pure function of its arguments.
StratifiedSplit stratified_split(std::span<const int32_t> labels, int num_classes, size_t size,
                                 double test_fraction, uint64_t seed);

// The labels of a dataset, in index order.
std::vector<int32_t> dataset_labels(const Dataset& ds);

// ---- small shared pieces ----------------------------------------------------------------------

// --resize: "S" (shorter side to S, aspect kept: resize_shorter) or "HxW" (exactly H x W).
struct ResizeSpec {
  int shorter = 0;            // > 0: shorter side
  int height = 0, width = 0;  // > 0: fixed size
  bool active() const { return shorter > 0 || height > 0; }
  Image apply(const Image& img) const;  // img itself when not active
  std::string str() const;              // "64", "32x48" or "none"
};
ResizeSpec parse_resize(const std::string& text, const std::string& flag);

// Flag values given as text (boost's unsigned parsing wraps "-1" round): errors name `flag`.
uint64_t parse_u64(const std::string& text, const std::string& flag);
// A comma list of class indices ("3"), ranges ("0-4") and class names ("Sandal"; a name is
// matched first, so "T-shirt/top" is a name), into indices of `class_names` in the order given.
// Errors name `flag`: an unknown item, an index out of range, a class listed twice.
std::vector<int> parse_class_list(const std::string& text, const std::vector<std::string>& class_names,
                                  const std::string& flag);
double parse_double(const std::string& text, const std::string& flag);

// One folder name per class, the folders sorting in label order, so an image folder written
// with them reads back with the same labels: the class names themselves when they are valid,
// distinct and already sorted (CIFAR-10, MNIST digits), else "<k>_<name>" with k zero-padded
// (Fashion-MNIST: "0_T-shirt_top"). '/', control characters and leading dots become '_'.
std::vector<std::string> class_folder_names(const std::vector<std::string>& class_names);

// Creates `dir` (and parents) for `tool`, whose outputs there are `outputs` (files and folders,
// relative). A non-empty folder is refused unless `force`; with it, the outputs of an earlier
// run of the same tool (a hidden marker file says so) are removed first, in the order given,
// and in anyone else's folder an existing non-empty folder among them is refused (the new
// files would be read back mixed with the old). Then writes the marker.
void prepare_output_folder(const std::string& dir, bool force, const std::string& tool,
                           const std::vector<std::string>& outputs);

// Runs fn(i, thread) for i in [0, n) on `threads` OpenMP threads (0: default_num_threads()).
// When several i fail, the error of the lowest one is rethrown: which error a run reports does
// not depend on the thread count.
void parallel_for(size_t n, int threads, const std::function<void(size_t i, int thread)>& fn);

// `threads` itself when > 0, else default_num_threads().
int resolve_threads(int threads);
// Threads for writing image files: `threads` when > 0, else 4 per core within [16, 64]. Each
// PNG is written atomically (fsync of the file and its folder), so writers mostly wait on the
// disk: 16 threads wrote 10000 Fashion-MNIST PNGs in 3.3 s on 2 cores, 1 thread per core in 19 s.
int writer_threads(int threads);

// Flag checks for the mains: `value` must be one of `choices` ("--split: 'x' is not one of ...").
void check_choice(const std::string& value, std::initializer_list<const char*> choices, const std::string& flag);

// Newlines to spaces: an error is reported on one line.
std::string one_line(std::string s);

// The data tools' mains in one place: runs `body` and returns its exit code; an exception
// becomes one line "TOOL: message" on `err` and exit code 1. A Boost flag error (unknown
// option, missing value) adds " (see --help)"; mpicnn::Error prints its message() alone.
int run_tool(const std::string& tool, const std::function<int()>& body, std::ostream& err = std::cerr);

// RFC-4180 quoting for one CSV field (what parse_csv reads back).
std::string csv_field(const std::string& s);

// "0.2860,0.3530": the form of the trainer's --mean/--std flags.
std::string format_flag_values(std::span<const double> values);

// ---- create_dataset ---------------------------------------------------------------------------

struct CreateOptions {
  std::string output;         // folder for train.csv / test.csv (or data.csv), classes.txt, images/
  size_t size = 0;            // samples in total; 0: round(fraction * dataset size)
  double fraction = 1.0;      // used when size is 0; in (0, 1]
  double test_fraction = 0.2; // in [0, 1]
  uint64_t seed = 0;
  bool single_csv = false;    // one data.csv with a split column instead of train.csv + test.csv
  ResizeSpec resize;          // resized PNG copies (file sources); always PNGs for in-memory sources
  bool absolute_paths = false;
  bool force = false;
  bool skip_bad = false;      // leave unreadable images out (when images are written) and count them
  int threads = 0;            // image writers; 0: writer_threads()
};

// An image that could not be read, with why (the error's message).
struct SkippedImage {
  std::string source, reason;
};

struct CreateReport {
  std::string source;                      // ds.describe()
  std::string output;
  std::vector<std::string> class_names;
  std::vector<size_t> available, train, test;  // per class
  size_t images_written = 0;               // PNGs under output/images
  std::vector<SkippedImage> skipped;       // skip_bad: left out, in dataset order
  std::vector<std::string> files;          // CSV files and classes.txt written
};

// Samples, splits and writes the dataframes (and images). Images first, CSVs last, each file
// atomically: an interrupted run leaves no CSV that names a missing image.
CreateReport create_dataset(const Dataset& ds, const CreateOptions& opt);
std::string format_report(const CreateReport& r);  // the summary table create_dataset prints

// ---- export_images ----------------------------------------------------------------------------

struct ExportOptions {
  std::string output;     // OUT/<split>/<class folder>/<index>.png
  size_t limit = 0;       // first N samples of each split; 0: all
  bool force = false;
  int threads = 0;        // image writers; 0: writer_threads()
};

struct ExportedSplit {
  std::string split, folder, source;
  std::vector<size_t> per_class;
  size_t images = 0;
};

// Writes fixed-size (in-memory) datasets, one per split name, as PNG image folders that
// scan_image_folder reads back with the same labels and, within a class, the same order.
std::vector<ExportedSplit> export_images(const std::vector<std::pair<std::string, const Dataset*>>& splits,
                                         const ExportOptions& opt);
std::string format_export(const std::vector<ExportedSplit>& r, const std::vector<std::string>& class_names);

// ---- shards (tools_shards.cpp; the format is shards.h) -------------------------------------

struct PackOptions {
  std::string output;                     // OUT/<split>-NNNNNN.tar and OUT/shards.json
  uint64_t shard_bytes = uint64_t(256) << 20;  // a shard closes before it would pass this
  uint64_t shard_samples = 0;             // or once it holds this many samples (0: no limit)
  uint64_t seed = 0;                      // the training split's order in the shards
  bool force = false;
  int threads = 0;                        // readers and encoders; 0: resolve_threads
};

struct PackedSplit {
  std::string split, source;
  std::vector<std::string> files;  // the shards written, in order
  uint64_t samples = 0, bytes = 0;
};

// Writes each split (all with the same classes) as tar shards in the WebDataset layout, keys
// the zero-padded position in the split (the training split shuffled with `seed`), image files
// as they are, fixed-size samples as PNG; then shards.json (format, classes, each split's files
// and counts). Every file is written atomically, the index last.
std::vector<PackedSplit> pack_shards(const std::vector<std::pair<std::string, const Dataset*>>& splits,
                                     const PackOptions& opt);
std::string format_packed(const std::vector<PackedSplit>& r);

struct UnpackOptions {
  std::string output;  // OUT/<split>/<class folder>/<key>.<ext>
  bool force = false;
};
// Writes the shards' images as an image folder that reads back with the same labels; returns
// the images written per split.
std::vector<size_t> unpack_shards(const std::vector<std::pair<std::string, const ShardSet*>>& splits,
                                  const UnpackOptions& opt);

// One shard read whole: what it holds against what the index says.
struct ShardCheck {
  std::string path, first_key;
  uint64_t samples = 0, indexed = 0, bytes = 0;  // bytes: the images'
  std::vector<size_t> per_class;
};
// Reads every shard of the set (an Error at the first damaged one, naming it and the sample).
std::vector<ShardCheck> inspect_shards(const ShardSet& set);

// ---- dataset_stats ----------------------------------------------------------------------------

struct StatsOptions {
  size_t limit = 0;     // stratified random sample of this many images (seeded); 0: all
  uint64_t seed = 0;
  ResizeSpec resize;    // images are resized before counting
  int channels = 0;     // 1 or 3 converts; 0: the dataset's, or the first used image's
  bool skip_bad = false;  // leave unreadable images out of the statistics and count them
  int threads = 0;
};

struct DatasetStats {
  std::string source;
  size_t samples = 0, used = 0;
  int channels = 0;
  uint64_t pixels = 0;                 // per channel, over the used images
  std::vector<double> mean, stddev;    // per channel, values in [0, 1], population std
  std::vector<std::string> class_names;
  std::vector<size_t> counts, used_counts;  // per class: whole dataset, used images
  std::vector<SkippedImage> skipped;   // skip_bad: unreadable images left out, in dataset order
  ResizeSpec resize;
  uint64_t seed = 0;
};

// Exact per-channel byte histograms (integer sums, so no dependence on thread count or order),
// turned into mean and std in double.
DatasetStats dataset_stats(const Dataset& ds, const StatsOptions& opt);
std::string format_stats(const DatasetStats& s);
std::string stats_json(const DatasetStats& s);

}  // namespace mpicnn::data
