// One rank's samples of one epoch from tar shards (shards.h): its shards read in order by a
// background thread, whole, through a bounded shuffle buffer (WebDataset's shuffle(N)), handed
// to the loader as a Dataset whose positions arrive in order. Every draw is keyed on (seed,
// epoch, rank), so an epoch's stream is the same for any number of loader threads. Not a loader
// (loader.h batches and transforms) and not the split over ranks (shard_plan below is the rule;
// dist/split_data.h applies it).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "data/dataset.h"
#include "data/shards.h"

namespace mpicnn::data {

// Rank `rank`'s shards of an epoch, as indices into the set: with `shuffle` the set's order
// shuffled with (seed, epoch), else the set's order; rank r takes positions r, r + K, ... of it.
// distribute false: every shard, in the rank's own order ((seed, epoch * K + r) when shuffled).
// A shuffled (training) plan needs at least `ranks` shards when distributing (an Error
// otherwise); an unshuffled one (evaluation) leaves ranks past the last shard without any.
std::vector<size_t> shard_plan(size_t num_shards, int ranks, int rank, uint64_t seed, uint64_t epoch,
                               bool shuffle, bool distribute);

struct StreamOptions {
  std::vector<size_t> shards;  // indices into the set, in reading order
  // Positions of the stream. Fewer than the shards hold: the rest is left out; more: the shards
  // are read again from the first (training keeps every rank at ceil(N/K) samples).
  uint64_t samples = 0;
  uint64_t skip = 0;           // positions below it are read and dropped (a resumed epoch)
  size_t buffer = 0;           // shuffle buffer in samples; 0 or 1: the shards' order
  uint64_t seed = 0, stream = 0;  // the buffer's draws
  size_t window = 512;         // positions read ahead of the loader's requests, at most
};

class ShardStream : public Dataset {
 public:
  // `set` must outlive the stream. Starts reading at once.
  ShardStream(const ShardSet& set, StreamOptions opt);
  ~ShardStream() override;  // stops the reader (also mid-shard)

  size_t size() const override { return size_t(opt_.samples); }
  const std::vector<std::string>& class_names() const override { return set_.class_names; }
  // Position i, once: waits until the reader has reached it. A shard error (damaged tar,
  // missing label, a count that differs from the index) is thrown by the first position it
  // kept from being read.
  std::vector<uint8_t> read(size_t i) const override;
  Image decode(std::span<const uint8_t> bytes, size_t i, int channels) const override;
  int label(size_t i) const override;
  uint64_t id(size_t i) const override;   // the sample's index in the set: the shard's first id + its place
  std::string source(size_t i) const override;  // "SHARD.tar#KEY"
  std::string describe() const override { return set_.describe(); }

 private:
  struct Item {
    std::vector<uint8_t> bytes;
    std::string key;
    int32_t label = 0;
    uint32_t shard = 0;  // index into set_.shards
    uint64_t id = 0;
  };
  struct Kept {  // what a position keeps after its bytes are read
    std::string key;
    int32_t label = 0;
    uint32_t shard = 0;
    uint64_t id = 0;
  };
  void run();
  void emit(Item&& item);
  const Kept& wait_for(size_t i, std::unique_lock<std::mutex>& lk) const;  // under mu_
  std::string source_locked(size_t i) const;                                // under mu_

  const ShardSet& set_;
  StreamOptions opt_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  mutable std::unordered_map<uint64_t, std::vector<uint8_t>> ready_;  // emitted, not yet read
  std::vector<Kept> kept_;  // (emitted positions)
  mutable uint64_t wanted_ = 0;  // one past the highest position asked for
  bool stop_ = false;
  std::exception_ptr error_;  // the reader's failure, at position kept_.size()
  std::thread thread_;
};

}  // namespace mpicnn::data
