// Threaded batch loader: worker threads load samples of a Dataset, run a per-sample function
// (decode -> float (C, H, W), usually a transform) and fill a bounded ring of batch buffers,
// delivered in order. Not a shuffler or sharder: the caller gives each epoch's sample order
// (shuffled_order() helps); not a transform library: SampleFn is whatever the caller passes.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/tensor.h"
#include "data/dataset.h"

namespace mpicnn::data {

// Writes one sample into `out` (C, H, W) from its decoded image. `sample_id` is Dataset::id()
// of the sample, so that random draws keyed on (seed, epoch, sample_id) give the same sample
// whichever worker, rank or batch handles it. Called concurrently from worker threads.
using SampleFn = std::function<void(float* out, const Image& img, uint64_t epoch, uint64_t sample_id)>;

// The 8-bit alternative, for consumers that normalise (and mirror) batches themselves, e.g. on
// the GPU: writes one sample's pixels into `out` as (H, W, C) bytes, not normalised and not
// mirrored, and returns whether the sample is to be mirrored left-right. Passed to the loader
// wrapped in ByteSamples; same threading and determinism rules as SampleFn.
using ByteSampleFn = std::function<bool(uint8_t* out, const Image& img, uint64_t epoch, uint64_t sample_id)>;
struct ByteSamples {
  ByteSampleFn fn;
  // Host memory for the ring's pixels, e.g. page-locked so that the copy to a GPU is one DMA;
  // empty: ordinary memory.
  std::function<std::shared_ptr<void>(size_t bytes)> alloc;
};

// The SampleFn used when none is given: the image must already have the sample shape; pixels
// become x / 255 in (C, H, W) order (torchvision's ToTensor, bit for bit).
void image_to_chw(float* out, const Image& img, int channels, int height, int width);

struct LoaderOptions {
  int batch_size = 32;
  int workers = 0;        // 0: samples are loaded in the consumer's thread, inside next()
  int prefetch = 0;       // most batches ready ahead of the consumer; 0: 2 x workers, at least 2
  bool skip_bad = false;  // replace samples that fail to load instead of failing the epoch
  int channels = 0;       // channels the images are decoded to; 0: the sample shape's C
};

struct Batch {
  Tensor images;                  // (size, C, H, W): a view into the loader's ring, valid until
                                  // the next call of next() or start_epoch(); undefined with
                                  // ByteSamples, whose loaders fill pixels and flips instead
  const uint8_t* pixels = nullptr;  // (size, H, W, C) bytes in the ring, valid as `images` is
  std::vector<uint8_t> flips;       // (size) 1: mirror left-right
  std::vector<int32_t> labels;    // (size)
  std::vector<uint64_t> indices;  // (size) dataset indices loaded (a replacement's, with skip_bad)
  int size = 0;
  uint64_t number = 0;            // batch number in the epoch
};

struct BadSample {
  uint64_t index = 0;  // dataset index
  std::string source;
  std::string reason;  // the error's message
};

struct LoaderStats {
  uint64_t samples = 0;       // samples prepared (load + SampleFn) since the last reset
  double worker_seconds = 0;  // time spent preparing them, summed over workers
  double wait_seconds = 0;    // time the consumer spent blocked in next() waiting for data
  uint64_t skipped = 0;       // positions filled by a replacement (skip_bad)
  // Samples per second of one worker's time; multiply by the workers for the loader's rate.
  double samples_per_second() const { return worker_seconds > 0 ? double(samples) / worker_seconds : 0.0; }
};

class Loader {
 public:
  // `ds` must outlive the loader. sample_shape is (C, H, W). fn may be empty (image_to_chw).
  Loader(const Dataset& ds, const Shape& sample_shape, SampleFn fn, const LoaderOptions& opt);
  // 8-bit batches: Batch::pixels and Batch::flips instead of Batch::images. fn may not be empty.
  Loader(const Dataset& ds, const Shape& sample_shape, ByteSamples fn, const LoaderOptions& opt);
  ~Loader();  // stops and joins the workers, also in the middle of an epoch
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Begins an epoch over `order` (dataset indices, already shuffled and sharded by the
  // caller); batches are consecutive runs of batch_size, the last one possibly smaller. An
  // epoch still in flight is discarded: its workers finish the sample in hand, nothing of it
  // is delivered. Resets the stats.
  void start_epoch(uint64_t epoch, std::vector<uint64_t> order);

  // The next batch of the epoch, waiting for it if needed; false once the epoch is over (or
  // before any epoch). A sample that fails to load (without skip_bad) makes this throw its
  // Error, naming the sample's source, at the batch that holds it: earlier batches come first,
  // exactly as with 0 workers. The epoch is then over; next() throws again until start_epoch.
  bool next(Batch& out);

  size_t batches_in_epoch() const;
  int prefetch() const { return prefetch_; }
  int workers() const { return int(threads_.size()); }
  int ready() const;  // batches finished and not yet delivered (never more than prefetch())

  LoaderStats stats() const;
  double wait_seconds() const { return stats().wait_seconds; }
  uint64_t skipped() const { return stats().skipped; }
  void reset_stats();
  // Samples that failed to load so far (over all epochs, each once, ordered by index).
  std::vector<BadSample> bad_samples() const;

 private:
  struct Slot {
    Tensor images;                                           // (B, C, H, W), float samples
    std::shared_ptr<void> pixel_memory;                      // 8-bit samples: (B, H, W, C)
    uint8_t* pixels = nullptr;                               //   bytes at pixel_memory
    std::vector<uint8_t> flips;                              //   and (B) flip flags
    std::vector<int32_t> labels;                             // (B)
    std::vector<uint64_t> indices;                           // (B)
    uint64_t batch = std::numeric_limits<uint64_t>::max();  // which batch it is filling
    int size = 0, done = 0;                                  // samples in it, samples finished
  };
  struct Unit {  // positions [begin, end) of the epoch, claimed by one worker
    uint64_t begin = 0, end = 0, gen = 0;
  };

  Loader(const Dataset& ds, const Shape& sample_shape, SampleFn fn, ByteSamples byte_samples,
         const LoaderOptions& opt);
  void worker_loop();
  bool claim(Unit& u, bool bounded);               // under mu_
  void run_unit(const Unit& u);                    // without the lock
  void finish_unit(const Unit& u, int ok, uint64_t skipped, double secs, uint64_t err_pos,
                   std::exception_ptr err);        // under mu_
  // Loads position p into its slot row; false (with err set) when it and, with skip_bad,
  // every replacement failed.
  bool load_position(uint64_t p, const Unit& u, bool& replaced, std::exception_ptr& err);
  bool try_load(uint64_t index, Slot& s, size_t row, std::exception_ptr* err);
  bool slot_complete(uint64_t b) const;            // under mu_
  bool abandoned(const Unit& u) const {            // without the lock: stop or a newer epoch
    return stop_flag_.load(std::memory_order_relaxed) || gen_flag_.load(std::memory_order_relaxed) != u.gen;
  }
  Slot& slot_of(uint64_t b) { return slots_[b % slots_.size()]; }

  const Dataset& ds_;
  int C_, H_, W_;
  SampleFn fn_;
  ByteSampleFn byte_fn_;  // set: 8-bit samples (fn_ unused)
  LoaderOptions opt_;
  int prefetch_ = 2, chunk_ = 1;
  std::vector<Slot> slots_;  // prefetch + 1: the ready ones plus the one the consumer holds

  mutable std::mutex mu_;
  std::condition_variable cv_work_, cv_ready_;
  bool stop_ = false, active_ = false, failed_ = false;
  uint64_t gen_ = 0;  // increases with every start_epoch; units of an older epoch are dropped
  uint64_t epoch_ = 0;
  std::vector<uint64_t> order_;
  uint64_t batches_ = 0, claim_ = 0, consumed_ = 0;
  int in_flight_ = 0;
  uint64_t err_pos_ = std::numeric_limits<uint64_t>::max();
  std::exception_ptr err_;
  LoaderStats stats_;
  // Copies of stop_ and gen_ that workers poll between samples without taking the lock.
  std::atomic<bool> stop_flag_{false};
  std::atomic<uint64_t> gen_flag_{0};

  mutable std::mutex bad_mu_;  // the bad-sample record, shared by workers
  std::vector<BadSample> bad_;
  std::set<uint64_t> bad_index_;

  std::vector<std::thread> threads_;
};

// 0 .. n-1 shuffled by Fisher-Yates with draws keyed on (seed, epoch): the same on every rank
// and for every worker count.
std::vector<uint64_t> shuffled_order(size_t n, uint64_t seed, uint64_t epoch);

}  // namespace mpicnn::data
