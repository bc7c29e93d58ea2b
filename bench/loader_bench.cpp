// Throughput of the training loader (data::Loader) with the preprocessing ./train uses for
// `--augment imagenet --image-size 224` (decode, RandomResizedCrop(224), flip, normalize to
// float (C, H, W)) and the evaluation one of the same data (Resize(256), CenterCrop(224)), over
// any dataset data::open_dataset opens or tar shards (read as ./train streams them: one rank's
// stream over every shard, through the shuffle buffer); plus where one thread's time per image
// goes. Not a test,
// and not a model of ./train's step: nothing consumes the batches but a checksum.
// bench/torchvision_loader_bench.py is its peer, bench/compare_loader.sh runs both.
//
// Usage: loader_bench PATH [--dataset KIND] [--split SPLIT] [--passes N] [--workers 0,1,2]
//                    [--transforms train,eval] [--batch B] [--seed S] [--time-split] [--label L]
//   PATH, KIND (default auto), SPLIT (default train): as ./train's -d, --dataset and its split
//   (PATH may be left out for a kind with a default path or none, e.g. --dataset synthetic).
//   Prints one line per transform and worker count, from the best of N passes (default 3):
//     TRANSFORM[/L] WORKERS IMG/S IMG/S_PER_CORE (details)
//   where per core divides by the worker threads (0 workers: the consumer thread loads, 1 core).
//   --time-split then times one thread on every sample, once per transform, piece by piece
//   (time_split below): Dataset::read, Dataset::decode, Transform::apply, and apply's halves
//   (geometry: placement + resample; normalize: the float (C, H, W) write), one "split ..." line
//   each; and how much of each decoded image the output shows and how far it is shrunk ("crop
//   ..." lines: what decoding at a reduced scale or only the crop could save). OpenMP/BLAS run
//   on 1 thread.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/threads.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/registry.h"
#include "data/resample.h"
#include "data/shard_stream.h"
#include "data/transform.h"

using namespace mpicnn;
using namespace mpicnn::data;
using Clock = std::chrono::steady_clock;

namespace {

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

struct Options {
  std::string path, kind = "auto", split = "train", label;
  int passes = 3, batch = 64;
  uint64_t seed = 0;
  std::vector<int> workers{1, 2};
  std::vector<std::string> transforms{"train", "eval"};
  bool time_split = false;
};

Options parse(int argc, char** argv) {
  Options o;
  const char* usage =
      "usage: loader_bench PATH [--dataset KIND] [--split SPLIT] [--passes N] [--workers 0,1,2] "
      "[--transforms train,eval] [--batch B] [--seed S] [--time-split] [--label L]";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      CHECK(i + 1 < argc, a, " needs a value; ", usage);
      return argv[++i];
    };
    if (a == "--dataset") o.kind = value();
    else if (a == "--split") o.split = value();
    else if (a == "--passes") o.passes = std::stoi(value());
    else if (a == "--batch") o.batch = std::stoi(value());
    else if (a == "--seed") o.seed = std::stoull(value());
    else if (a == "--time-split") o.time_split = true;
    else if (a == "--label") o.label = value();
    else if (a == "--transforms") o.transforms = split_list(value());
    else if (a == "--workers") {
      o.workers.clear();
      for (const std::string& w : split_list(value())) o.workers.push_back(std::stoi(w));
    } else {
      CHECK(a.rfind("--", 0) != 0 && o.path.empty(), "unknown or repeated argument '", a, "'; ", usage);
      o.path = a;
    }
  }
  CHECK(!o.path.empty() || o.kind != "auto", usage);  // kinds that read no files need no PATH
  CHECK(o.passes >= 1 && o.batch >= 1, "--passes and --batch must be at least 1");
  for (int w : o.workers) CHECK(w >= 0, "--workers: ", w, " is negative");
  for (const std::string& t : o.transforms)
    CHECK(t == "train" || t == "eval", "--transforms: train or eval, not '", t, "'");
  return o;
}

// The data of a pass: an indexed dataset, the same every pass, or (tar shards) a new stream of
// every shard, as one rank of ./train reads them (data/shard_stream.h).
class Source {
 public:
  explicit Source(const Options& o) : kind_(o.kind == "auto" ? detect_dataset_kind(o.path) : o.kind) {
    const DatasetKind* k = find_dataset_kind(kind_);
    if (k && k->streamed) {
      shards_.emplace(open_shard_set(o.path, o.split));
      return;
    }
    DatasetSpec spec;
    spec.kind = o.kind;
    spec.path = o.path;
    spec.split = o.split;
    indexed_ = open_dataset(spec);
  }
  const std::string& kind() const { return kind_; }
  size_t size() const { return shards_ ? size_t(shards_->size()) : indexed_->size(); }
  std::string describe() const { return shards_ ? shards_->describe() : indexed_->describe(); }
  const Dataset& indexed() const { return *indexed_; }  // the first pass's, for the sizes
  // Pass p's dataset and its order: a shuffled order (shuffle) or the dataset's.
  std::pair<const Dataset*, std::vector<uint64_t>> pass(uint64_t seed, uint64_t p, bool shuffle) {
    if (!shards_) {
      std::vector<uint64_t> order = shuffled_order(indexed_->size(), seed, p);
      if (!shuffle) std::sort(order.begin(), order.end());
      return {indexed_.get(), std::move(order)};
    }
    stream_.reset();
    StreamOptions so;
    so.shards = shard_plan(shards_->shards.size(), 1, 0, seed, p, shuffle, true);
    so.samples = shards_->size();
    so.buffer = shuffle ? kDefaultShuffleBuffer : 0;  // ./train's default
    so.seed = seed;
    so.stream = p;
    stream_ = std::make_unique<ShardStream>(*shards_, std::move(so));
    std::vector<uint64_t> order(stream_->size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    return {stream_.get(), std::move(order)};
  }

 private:
  std::string kind_;
  std::unique_ptr<Dataset> indexed_;
  std::optional<ShardSet> shards_;
  std::unique_ptr<ShardStream> stream_;
};

// Best pass of `passes` over the whole dataset, each a new epoch in a new shuffled order (as
// ./train's), through a Loader with `workers` threads. Returns images per second.
double loader_rate(Source& src, const Transform& tf, int workers, const Options& o, double& checksum) {
  LoaderOptions lopt;
  lopt.batch_size = o.batch;
  lopt.workers = workers;
  lopt.channels = tf.channels();
  // The float batches ./train builds for a CPU model (classify_task.cpp's make_loader).
  const SampleFn fn = [&tf](float* out, const Image& im, uint64_t e, uint64_t id) {
    tf.apply(out, im, e, id);
  };
  double best = 1e300;
  for (int p = 0; p < o.passes; ++p) {
    const auto t0 = Clock::now();
    auto [ds, order] = src.pass(o.seed, uint64_t(p), true);
    Loader loader(*ds, Shape{tf.channels(), tf.height(), tf.width()}, fn, lopt);
    loader.start_epoch(uint64_t(p), std::move(order));
    Batch b;
    while (loader.next(b)) checksum += b.images.data()[b.images.numel() / 2];
    best = std::min(best, seconds(t0, Clock::now()));
  }
  return double(src.size()) / best;
}

// One thread, every sample once (epoch 0, dataset order), with the library's calls. First the
// loader's own sequence per sample, each call timed: Dataset::read, Dataset::decode,
// Transform::apply. Then apply's two halves, each right after an (untimed) decode, as apply
// was: the placement and resample() (resample.h) into a sink that keeps nothing, and
// Transform::normalize (the LUT write of a (C, H, W) float output, flip included) of the
// window Transform::window made. Transform::window itself is not the geometry figure: it also
// interleaves the resampler's rows into (H, W, C) bytes for the GPU, which apply never does.
void time_split(Source& src, const Transform& tf, const std::string& name, double& checksum) {
  const int H = tf.height(), W = tf.width(), C = tf.channels();
  Image window(H, W, C);
  std::vector<float> out(tf.output_numel());
  double t_read = 0, t_decode = 0, t_apply = 0, t_geometry = 0, t_norm = 0, bytes = 0, pixels = 0;
  double used = 0, shrink = 0;           // share of the image's pixels in the output; downscale factor
  size_t halvable = 0, quarterable = 0;  // samples downscaled at least 2x (4x) in both directions
  const size_t n = src.size();
  const Dataset& ds = *src.pass(0, 0, false).first;
  for (size_t i = 0; i < n; ++i) {
    const auto a = Clock::now();
    const std::vector<uint8_t> raw = ds.read(i);
    const uint64_t id = ds.id(i);
    const auto b = Clock::now();
    const Image img = ds.decode(raw, i, C);
    const auto c = Clock::now();
    tf.apply(out.data(), img, 0, id);
    const auto d = Clock::now();
    t_read += seconds(a, b), t_decode += seconds(b, c), t_apply += seconds(c, d);
    checksum += out[out.size() / 3];
    bytes += double(raw.size()), pixels += double(img.height) * img.width;
    // The part of the decoded image the output shows, and how much the placement shrinks it:
    // what decoding at a reduced scale, or only the crop's rows and columns, could leave out.
    const Placement p = tf.place(img.height, img.width, 0, id);
    const double sh = double(p.src_height) / p.resized_height, sw = double(p.src_width) / p.resized_width;
    used += double(p.src_height) * p.src_width / (double(img.height) * img.width) *
            std::min(1.0, double(H) / p.resized_height) * std::min(1.0, double(W) / p.resized_width);
    shrink += std::min(sh, sw);
    if (std::min(sh, sw) >= 2) ++halvable;
    if (std::min(sh, sw) >= 4) ++quarterable;
  }
  unsigned sink_sum = 0;
  const Dataset& again = *src.pass(0, 0, false).first;  // a stream hands each sample out once
  for (size_t i = 0; i < n; ++i) {
    const Image img = again.decode(again.read(i), i, C);
    const uint64_t id = again.id(i);
    const auto a = Clock::now();
    resample(img, tf.place(img.height, img.width, 0, id), H, W,
             [&](int, int, int nc, const uint8_t* line, bool) { sink_sum += line[nc - 1]; });
    const auto b = Clock::now();
    t_geometry += seconds(a, b);
    tf.window(window.pixels.data(), img, 0, id);
    const auto c = Clock::now();
    tf.normalize(out.data(), window);
    t_norm += seconds(c, Clock::now());
    checksum += out[out.size() / 3];
  }
  checksum += sink_sum;
  const double total = t_read + t_decode + t_apply;  // what a loader thread does per sample
  auto row = [&](const char* what, double t) {
    std::printf("split %s %s %.3f ms %.1f%%\n", name.c_str(), what, 1e3 * t / double(n), 100.0 * t / total);
  };
  row("read", t_read);
  row("decode", t_decode);
  row("apply", t_apply);
  row("apply.geometry", t_geometry);
  row("apply.normalize", t_norm);
  std::printf("split %s total %.3f ms = %.1f img/s (read + decode + apply; %zu images, %.1f KB, "
              "%.0f pixels avg)\n",
              name.c_str(), 1e3 * total / double(n), double(n) / total, n, bytes / double(n) / 1e3,
              pixels / double(n));
  std::printf("crop %s shows %.1f%% of the decoded pixels, downscaled %.2fx on average; >= 2x: %.1f%% of "
              "samples, >= 4x: %.1f%%\n",
              name.c_str(), 100.0 * used / double(n), shrink / double(n),
              100.0 * double(halvable) / double(n), 100.0 * double(quarterable) / double(n));
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse(argc, argv);
  set_num_threads(1);
  Source src(o);
  CHECK(src.size() > 0, o.path, ": no samples");
  std::fprintf(stderr, "%s\n", src.describe().c_str());
  const bool files = src.kind() == "shards" || src.indexed().height() == 0;  // images of varying size

  // ./train's preprocessing for this data (classify_task.cpp's input_preprocess) with
  // --augment imagenet --image-size 224, for a model of the data's channels (3 for files).
  PreprocessQuery q;
  q.kind = src.kind();
  q.channels = files ? 3 : src.indexed().channels();
  q.data_height = files ? 0 : src.indexed().height();
  q.data_width = files ? 0 : src.indexed().width();
  q.image_size = 224;
  q.augment = "imagenet";
  q.seed = o.seed;
  const InputPreprocess input = default_preprocess(q);

  double checksum = 0;
  for (const std::string& name : o.transforms) {
    const Transform tf(name == "train" ? input.train : input.eval);
    for (int w : o.workers) {
      const double rate = loader_rate(src, tf, w, o, checksum);
      std::printf("%s%s %d %.1f %.1f (%s, %zu images, batch %d, best of %d passes)\n", name.c_str(),
                  o.label.empty() ? "" : ("/" + o.label).c_str(), w, rate, rate / std::max(1, w),
                  geometry_name(tf.spec().geometry), src.size(), o.batch, o.passes);
      std::fflush(stdout);
    }
  }
  if (o.time_split)
    for (const std::string& name : o.transforms)
      time_split(src, Transform(name == "train" ? input.train : input.eval), name, checksum);
  std::fprintf(stderr, "checksum %g\n", checksum);
  return 0;
} catch (const Error& e) {
  std::fprintf(stderr, "loader_bench: %s\n", e.message().c_str());
  return 1;
}
