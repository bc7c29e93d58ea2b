// Loader: bit-identical batches for any worker count, errors that reach the consumer without a
// hang, skip_bad replacement and counting, shutdown in the middle of an epoch, the queue
// bound, stats, no tensor allocation per batch, and a full Fashion-MNIST epoch.
// Every test that could hang runs under a watchdog that ends the binary with a message.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include "core/rng.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/synthetic.h"
#include "testing.h"

using namespace mpicnn;
using namespace mpicnn::data;
using mpicnn::testing::expect_error;
namespace fs = std::filesystem;

namespace {

// Ends the process if the guarded scope takes longer than `seconds` (a hang would otherwise
// stall the whole suite with no message).
class Watchdog {
 public:
  Watchdog(double seconds, std::string what) : what_(std::move(what)) {
    thread_ = std::thread([this, seconds] {
      std::unique_lock<std::mutex> lk(mu_);
      if (!cv_.wait_for(lk, std::chrono::duration<double>(seconds), [&] { return done_; })) {
        std::fprintf(stderr, "TIMEOUT: %s did not finish in %.0f s (hang)\n", what_.c_str(), seconds);
        std::fflush(stderr);
        std::_Exit(3);
      }
    });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::string what_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

// Wraps a dataset: chosen samples fail to read, every read can be slowed down, reads counted.
class Faulty : public Dataset {
 public:
  Faulty(const Dataset& base, std::set<uint64_t> bad, int sleep_us = 0)
      : base_(base), bad_(std::move(bad)), sleep_us_(sleep_us) {}
  size_t size() const override { return base_.size(); }
  int label(size_t i) const override { return base_.label(i); }
  const std::vector<std::string>& class_names() const override { return base_.class_names(); }
  std::string source(size_t i) const override { return "faulty/" + std::to_string(i) + ".png"; }
  int channels() const override { return base_.channels(); }
  int height() const override { return base_.height(); }
  int width() const override { return base_.width(); }
  std::vector<uint8_t> read(size_t i) const override {
    reads.fetch_add(1);
    if (sleep_us_) std::this_thread::sleep_for(std::chrono::microseconds(sleep_us_));
    if (bad_.count(i)) MPICNN_FAIL(source(i), ": cannot decode image (injected)");
    return base_.read(i);
  }
  Image decode(std::span<const uint8_t> b, size_t i, int c) const override { return base_.decode(b, i, c); }
  mutable std::atomic<int> reads{0};

 private:
  const Dataset& base_;
  std::set<uint64_t> bad_;
  int sleep_us_;
};

SyntheticSpec small_spec(size_t n = 50) {
  SyntheticSpec s;
  s.seed = 7;
  s.train_size = n;
  s.classes = 4;
  s.channels = 3;
  s.height = 6;
  s.width = 5;
  return s;
}

// A SampleFn that uses every argument: pixels, epoch and id (an epoch/id-keyed random offset),
// so any mix-up between workers shows in the output.
void jitter_fn(float* out, const Image& img, uint64_t epoch, uint64_t id) {
  const Rng rng(epoch, id);
  const size_t plane = size_t(img.height) * img.width;
  for (int c = 0; c < img.channels; ++c)
    for (size_t i = 0; i < plane; ++i)
      out[c * plane + i] = float(img.pixels[i * img.channels + c]) / 255.f + rng.uniform(uint64_t(c));
}

struct Epoch {
  std::vector<std::vector<float>> images;
  std::vector<std::vector<int32_t>> labels;
  std::vector<std::vector<uint64_t>> indices;
};

Epoch run_epoch(Loader& loader, uint64_t epoch, const std::vector<uint64_t>& order) {
  loader.start_epoch(epoch, order);
  Epoch e;
  Batch b;
  while (loader.next(b)) {
    REQUIRE(b.images.size(0) == b.size);
    REQUIRE(b.number == e.images.size());
    e.images.emplace_back(b.images.data(), b.images.data() + b.images.numel());
    e.labels.push_back(b.labels);
    e.indices.push_back(b.indices);
  }
  return e;
}

}  // namespace

TEST_CASE("loader shuffled_order is a deterministic permutation per (seed, epoch)") {
  const std::vector<uint64_t> a = shuffled_order(1000, 5, 0);
  std::vector<uint64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) REQUIRE(sorted[i] == i);
  CHECK(a == shuffled_order(1000, 5, 0));
  CHECK(a != shuffled_order(1000, 5, 1));
  CHECK(a != shuffled_order(1000, 6, 0));
  size_t fixed = 0;
  for (size_t i = 0; i < a.size(); ++i) fixed += a[i] == i;
  CHECK(fixed < 20);  // about 1 expected for a uniform shuffle
  CHECK(shuffled_order(0, 1, 1).empty());
}

TEST_CASE("loader batches are bit-identical for 0, 1 and 3 workers") {
  Watchdog dog(30, "loader determinism");
  const SyntheticDataset ds(small_spec(50), "train");
  std::vector<Epoch> runs;
  for (int workers : {0, 1, 3}) {
    CAPTURE(workers);
    LoaderOptions opt;
    opt.batch_size = 7;  // 50 = 7 x 7 + 1: the last batch has one sample
    opt.workers = workers;
    Loader loader(ds, Shape{3, 6, 5}, jitter_fn, opt);
    CHECK(loader.prefetch() == std::max(2, 2 * workers));
    for (uint64_t epoch : {0, 1}) {
      const Epoch e = run_epoch(loader, epoch, shuffled_order(ds.size(), 3, epoch));
      REQUIRE(e.images.size() == 8);
      CHECK(e.labels.back().size() == 1);
      runs.push_back(e);
    }
  }
  // The reference: each sample computed directly, in the epoch's order.
  for (uint64_t epoch : {0, 1}) {
    const std::vector<uint64_t> order = shuffled_order(ds.size(), 3, epoch);
    const Epoch& e = runs[epoch];
    std::vector<float> want(90);
    for (size_t p = 0; p < order.size(); ++p) {
      const size_t b = p / 7, r = p % 7;
      jitter_fn(want.data(), ds.load(order[p], 3), epoch, order[p]);
      CHECK(std::memcmp(want.data(), e.images[b].data() + r * 90, 90 * sizeof(float)) == 0);
      CHECK((e.indices[b][r] == order[p] && e.labels[b][r] == ds.label(order[p])));
    }
  }
  for (size_t k = 2; k < runs.size(); ++k) {
    CAPTURE(k);
    CHECK(runs[k].images == runs[k % 2].images);
    CHECK(runs[k].labels == runs[k % 2].labels);
    CHECK(runs[k].indices == runs[k % 2].indices);
  }
  CHECK(runs[0].images != runs[1].images);
}

TEST_CASE("loader 8-bit samples: pixels and flips in order, the same for 0 and 3 workers") {
  Watchdog dog(30, "loader 8-bit samples");
  const SyntheticDataset ds(small_spec(23), "train");
  // Pixels with an (epoch, id)-keyed offset, and a flip that depends on both too.
  auto bytes_fn = [](uint8_t* out, const Image& img, uint64_t epoch, uint64_t id) {
    const Rng rng(epoch, id);
    for (size_t i = 0; i < img.pixels.size(); ++i) out[i] = uint8_t(img.pixels[i] + rng.below(uint64_t(i), 7));
    return ((epoch + id) % 3) == 0;
  };
  const std::vector<uint64_t> order = shuffled_order(ds.size(), 4, 1);
  std::vector<std::vector<uint8_t>> first;
  for (int workers : {0, 3}) {
    CAPTURE(workers);
    LoaderOptions opt;
    opt.batch_size = 5;
    opt.workers = workers;
    // With 3 workers the ring's pixels come from the given allocator (the trainer's: pinned).
    std::vector<size_t> allocated;
    ByteSamples samples{bytes_fn, {}};
    if (workers > 0)
      samples.alloc = [&allocated](size_t bytes) {
        allocated.push_back(bytes);
        return std::shared_ptr<void>(new uint8_t[bytes], std::default_delete<uint8_t[]>());
      };
    Loader loader(ds, Shape{3, 6, 5}, samples, opt);
    CHECK(allocated == std::vector<size_t>(workers > 0 ? size_t(loader.prefetch() + 1) : 0, 5 * 90));
    loader.start_epoch(1, order);
    Batch b;
    std::vector<std::vector<uint8_t>> got;
    size_t p = 0, flips = 0;
    while (loader.next(b)) {
      CHECK_FALSE(b.images.defined());
      REQUIRE(b.pixels != nullptr);
      REQUIRE(b.flips.size() == size_t(b.size));
      got.emplace_back(b.pixels, b.pixels + size_t(b.size) * 90);
      for (int r = 0; r < b.size; ++r, ++p) {
        std::vector<uint8_t> want(90);
        const bool flip = bytes_fn(want.data(), ds.load(order[p], 3), 1, order[p]);
        CHECK(std::memcmp(want.data(), b.pixels + size_t(r) * 90, 90) == 0);
        CHECK(b.flips[size_t(r)] == uint8_t(flip));
        CHECK(b.indices[size_t(r)] == order[p]);
        flips += flip;
      }
    }
    CHECK(p == order.size());
    CHECK(flips > 0);
    if (first.empty()) first = got;
    CHECK(got == first);
  }
  LoaderOptions opt;
  expect_error([&] { Loader none(ds, Shape{3, 6, 5}, ByteSamples{}, opt); }, "ByteSamples holds no function");
  Loader floats(ds, Shape{3, 6, 5}, nullptr, opt);  // float loaders leave pixels unset
  floats.start_epoch(0, order);
  Batch b;
  REQUIRE(floats.next(b));
  CHECK(b.pixels == nullptr);
  CHECK(b.flips.empty());
}

TEST_CASE("loader: a failing sample reaches next() naming its file, after the batches before it") {
  Watchdog dog(30, "loader error propagation");
  const SyntheticDataset base(small_spec(40), "train");
  const std::vector<uint64_t> order = shuffled_order(40, 1, 0);
  // Two bad samples: the earlier one in the order is the one reported, at its batch.
  const uint64_t pos = 17, later = 30;
  const Faulty ds(base, {order[pos], order[later]});
  for (int workers : {0, 1, 3}) {
    CAPTURE(workers);
    LoaderOptions opt;
    opt.batch_size = 5;
    opt.workers = workers;
    Loader loader(ds, Shape{3, 6, 5}, nullptr, opt);
    loader.start_epoch(0, order);
    Batch b;
    for (int k = 0; k < 3; ++k) REQUIRE(loader.next(b));  // batches 0..2 hold positions 0..14
    const std::string name = "faulty/" + std::to_string(order[pos]) + ".png: cannot decode image (injected)";
    expect_error([&] { loader.next(b); }, name);
    expect_error([&] { loader.next(b); }, name);  // the epoch stays failed
    const size_t bad_count = loader.bad_samples().size();
    CHECK((bad_count == 1 || bad_count == 2));  // the later one only if a worker got that far
    // A new epoch over good samples works on the same loader.
    std::vector<uint64_t> good;
    for (uint64_t i = 0; good.size() < 7; ++i)
      if (i != order[pos] && i != order[later]) good.push_back(i);
    const Epoch e = run_epoch(loader, 1, good);
    CHECK((e.images.size() == 2 && e.labels[1].size() == 2));
  }
  // A real bad file: the error names the file the loader was reading.
  const std::string dir = (fs::temp_directory_path() / ("mpicnn_loader_" + std::to_string(::getpid()))).string();
  fs::create_directories(dir);
  Image img(6, 5, 3);
  write_png(dir + "/good.png", img);
  {
    std::FILE* f = std::fopen((dir + "/bad.png").c_str(), "wb");
    std::fputs("not a png", f);
    std::fclose(f);
  }
  FileListData fl;
  fl.name = dir;
  fl.paths = {dir + "/good.png", dir + "/bad.png", dir + "/good.png"};
  fl.labels = {0, 1, 0};
  fl.class_names = {"a", "b"};
  const FileListDataset files(fl);
  LoaderOptions opt;
  opt.batch_size = 1;
  opt.workers = 2;
  Loader loader(files, Shape{3, 6, 5}, nullptr, opt);
  loader.start_epoch(0, {0, 1, 2});
  Batch b;
  REQUIRE(loader.next(b));
  expect_error([&] { loader.next(b); }, dir + "/bad.png: ");
  // A sample of the wrong size with the default SampleFn names the sample too.
  Loader wrong(files, Shape{3, 7, 5}, nullptr, opt);
  wrong.start_epoch(0, {0});
  expect_error([&] { wrong.next(b); }, dir + "/good.png: image is 6x5x3 (HxWxC) but the loader's sample shape is (3, 7, 5)");
  fs::remove_all(dir);
}

TEST_CASE("loader skip_bad: deterministic replacement, counted, sources listed") {
  Watchdog dog(30, "loader skip_bad");
  const SyntheticDataset base(small_spec(30), "train");
  std::vector<uint64_t> order = shuffled_order(30, 2, 0);
  // Bad: two neighbours in the order (the replacement skips both) and the last position (wraps).
  const Faulty ds(base, {order[4], order[5], order[29]});
  std::vector<Epoch> runs;
  for (int workers : {0, 2, 3}) {
    CAPTURE(workers);
    LoaderOptions opt;
    opt.batch_size = 4;
    opt.workers = workers;
    opt.skip_bad = true;
    Loader loader(ds, Shape{3, 6, 5}, jitter_fn, opt);
    runs.push_back(run_epoch(loader, 0, order));
    CHECK(loader.skipped() == 3);
    const std::vector<BadSample> bad = loader.bad_samples();
    REQUIRE(bad.size() == 3);
    std::set<uint64_t> want = {order[4], order[5], order[29]}, got;
    for (const BadSample& s : bad) {
      got.insert(s.index);
      CHECK(s.reason.find(s.source + ": cannot decode image (injected)") != std::string::npos);
    }
    CHECK(got == want);
    // The next epoch counts again; the list of bad sources does not grow.
    run_epoch(loader, 1, order);
    CHECK((loader.skipped() == 3 && loader.bad_samples().size() == 3));
  }
  const Epoch& e = runs[0];
  CHECK((e.indices[1][0] == order[6] && e.indices[1][1] == order[6]));  // positions 4, 5 -> 6
  CHECK(e.indices[7][1] == order[0]);                                    // position 29 wraps
  CHECK(e.labels[7][1] == base.label(order[0]));
  for (size_t k = 1; k < runs.size(); ++k) {
    CHECK(runs[k].images == e.images);
    CHECK(runs[k].indices == e.indices);
  }
  // Nothing loads: an error, not an endless search.
  std::set<uint64_t> all;
  for (uint64_t i = 0; i < 30; ++i) all.insert(i);
  const Faulty none(base, all);
  LoaderOptions opt;
  opt.batch_size = 4;
  opt.workers = 2;
  opt.skip_bad = true;
  Loader loader(none, Shape{3, 6, 5}, nullptr, opt);
  loader.start_epoch(0, order);
  Batch b;
  expect_error([&] { loader.next(b); }, "every one of the 30 samples of epoch 0 failed to load");
}

TEST_CASE("loader stops cleanly mid-epoch and when a new epoch starts early") {
  Watchdog dog(30, "loader shutdown");
  const SyntheticDataset base(small_spec(200), "train");
  const Faulty slow(base, {}, 10000);  // 10 ms per sample: 200 take 0.67 s on 3 workers
  const std::vector<uint64_t> order = shuffled_order(200, 4, 0);
  LoaderOptions opt;
  opt.batch_size = 8;
  opt.workers = 3;
  {
    Loader idle(slow, Shape{3, 6, 5}, nullptr, opt);  // never started
  }
  {
    Loader just(slow, Shape{3, 6, 5}, nullptr, opt);
    just.start_epoch(0, order);  // destroyed while the first batches load
  }
  {
    auto mid = std::make_unique<Loader>(slow, Shape{3, 6, 5}, nullptr, opt);
    mid->start_epoch(0, order);
    Batch b;
    REQUIRE(mid->next(b));
    REQUIRE(mid->next(b));
    const auto t0 = std::chrono::steady_clock::now();
    mid.reset();
    // Shutdown waits for the samples in hand (10 ms), not for the prefetch window (6 batches,
    // 160 ms) or the rest of the epoch.
    CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 0.1);
    CHECK(slow.reads.load() < 100);
  }

  // start_epoch in the middle of an epoch discards it: the new epoch is what a fresh loader gives.
  Loader a(slow, Shape{3, 6, 5}, jitter_fn, opt);
  a.start_epoch(0, order);
  Batch b;
  REQUIRE(a.next(b));
  const std::vector<uint64_t> order1(order.begin(), order.begin() + 20);
  const Epoch got = run_epoch(a, 1, order1);
  opt.workers = 0;
  Loader fresh(base, Shape{3, 6, 5}, jitter_fn, opt);
  const Epoch want = run_epoch(fresh, 1, order1);
  CHECK(got.images == want.images);
  CHECK(got.indices == want.indices);
}

TEST_CASE("loader queue bound: a slow consumer never has more than prefetch batches ready") {
  Watchdog dog(30, "loader queue bound");
  const SyntheticDataset ds(small_spec(160), "train");
  constexpr int B = 4, P = 3;
  std::atomic<int> requested{0};  // batches the consumer has asked for, set before next()
  std::atomic<int> calls{0}, worst_ahead{-100};
  auto fn = [&](float* out, const Image& img, uint64_t, uint64_t id) {
    const int ahead = int(id) / B - requested.load();  // order is 0..n-1: id = position
    int w = worst_ahead.load();
    while (ahead > w && !worst_ahead.compare_exchange_weak(w, ahead)) {
    }
    calls.fetch_add(1);
    image_to_chw(out, img, 3, 6, 5);
  };
  LoaderOptions opt;
  opt.batch_size = B;
  opt.workers = 3;
  opt.prefetch = P;
  Loader loader(ds, Shape{3, 6, 5}, fn, opt);
  std::vector<uint64_t> order(160);
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  loader.start_epoch(0, order);
  Batch b;
  int seen = 0;
  for (;;) {
    requested.store(seen + 1);
    if (!loader.next(b)) break;
    ++seen;
    if (seen == 1) {
      // Holding batch 0: the workers fill batches 1..P and then stop.
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      CHECK(calls.load() == (1 + P) * B);
      CHECK(loader.ready() == P);
    }
    CHECK(loader.ready() <= P);
    if (seen % 10 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(seen == 40);
  // Work ran ahead of the consumer by exactly the bound, never more.
  CHECK(worst_ahead.load() == P - 1);
}

TEST_CASE("loader stats and no tensor allocation per batch") {
  Watchdog dog(30, "loader stats");
  const SyntheticDataset base(small_spec(48), "train");
  const Faulty slow(base, {}, 1000);
  LoaderOptions opt;
  opt.batch_size = 8;
  opt.workers = 2;
  Loader loader(slow, Shape{3, 6, 5}, nullptr, opt);
  std::vector<uint64_t> order = shuffled_order(48, 9, 0);
  const int64_t allocs = host_allocation_count();
  run_epoch(loader, 0, order);
  run_epoch(loader, 1, order);
  CHECK(host_allocation_count() == allocs);
  const LoaderStats s = loader.stats();  // of epoch 1 only
  CHECK(s.samples == 48);
  CHECK(s.worker_seconds >= 0.048);               // 48 samples x 1 ms of sleep
  CHECK(s.wait_seconds > 0.01);                   // a fast consumer waits for slow loading
  CHECK((s.samples_per_second() > 0 && s.samples_per_second() <= 1000));
  loader.reset_stats();
  CHECK((loader.stats().samples == 0 && loader.wait_seconds() == 0));
  // 0 workers: the time spent loading in next() is time the consumer waited.
  opt.workers = 0;
  Loader inline_loader(slow, Shape{3, 6, 5}, nullptr, opt);
  run_epoch(inline_loader, 0, order);
  CHECK(inline_loader.wait_seconds() >= 0.048);
  expect_error([&] { inline_loader.start_epoch(0, {48}); }, "the epoch order holds index 48 but the dataset has 48 samples");
  expect_error([&] { Loader bad(base, Shape{3, 6}, nullptr, opt); }, "sample shape must be (C, H, W)");
}

TEST_CASE("loader: a Fashion-MNIST epoch with 2 workers") {
  Watchdog dog(60, "loader fashion-mnist");
  DatasetSpec spec;
  spec.kind = "fashion-mnist";
  spec.split = "test";
  const auto ds = open_dataset(spec);
  LoaderOptions opt;
  opt.batch_size = 256;
  opt.workers = 2;
  Loader loader(*ds, Shape{1, 28, 28}, nullptr, opt);
  const std::vector<uint64_t> order = shuffled_order(ds->size(), 1, 0);
  loader.start_epoch(0, order);
  Batch b;
  std::vector<int> hist(10, 0);
  size_t n = 0, pos = 0;
  int mismatches = 0;
  while (loader.next(b)) {
    for (int r = 0; r < b.size; ++r, ++pos) {
      ++hist[size_t(b.labels[size_t(r)])];
      mismatches += b.indices[size_t(r)] != order[pos];
    }
    n += size_t(b.size);
    // Spot check one pixel per batch against the dataset.
    const Image img = ds->load(b.indices[0], 1);
    CHECK(b.images.data()[300] == float(img.pixels[300]) / 255.f);
  }
  CHECK(n == 10000);
  CHECK(mismatches == 0);
  for (int h : hist) CHECK(h == 1000);  // the test split is balanced
  MESSAGE("fashion-mnist test epoch: ", loader.stats().samples_per_second(), " samples/s per worker, consumer waited ",
          loader.wait_seconds(), " s");
}
