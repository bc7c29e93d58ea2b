// SplitData: one split (train or test) of the training data as seen by one rank, opened by rank
// 0 and handed out per epoch (scattered shards, or every sample everywhere). Not the sharding
// arithmetic (shard.h) and not loading or preprocessing (data/loader.h, data/transform.h).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "data/dataset.h"
#include "data/shards.h"
#include "dist/comm.h"
#include "dist/shard.h"

namespace mpicnn::dist {

// What every rank needs to know about a split that only rank 0 opened.
struct SplitInfo {
  std::string kind, description;
  std::vector<std::string> class_names;
  int channels = 0, height = 0, width = 0;  // 0: sizes vary (image files)
  uint64_t size = 0;
  uint64_t held_out = 0;  // with a Holdout: the samples of the whole dataset held out
};

// A dataset of one split cut in two by data::holdout_indices: the training side (everything
// but the held-out samples) or the validation side (those samples only). Sample ids stay the
// whole dataset's indices.
struct Holdout {
  double fraction = 0;
  uint64_t seed = 0;
  bool held_out_side = false;
};

// Where the samples live:
//  - Scatter: rank 0 holds the whole split (IDX and CIFAR samples, or an image file list) and
//    hands each rank its shard of every epoch with MPI_Scatterv;
//  - Local: every rank can produce every sample itself (synthetic data, or the whole split
//    broadcast once for --distribute-data=false) and picks its samples by index;
//  - Stream: tar shards (data/shards.h), which every rank reads itself: each epoch rank r
//    streams its shards (data::shard_plan: the shuffled list's r, r + K, ...) through the
//    shuffle buffer, ceil(N/K) samples (its shards re-read from the first when they hold fewer,
//    the rest left out when more), so every rank runs the same steps; evaluation reads each
//    shard once.
class SplitData {
 public:
  // Collective. Rank 0 opens the split; a failure there is a SharedError on every rank.
  // With `holdout`, the split is the given side of the opened dataset's hold-out.
  SplitData(const Comm& comm, const data::DatasetSpec& spec, bool distribute,
            const std::optional<Holdout>& holdout = std::nullopt);

  const SplitInfo& info() const { return info_; }

  // This rank's dataset for the epoch and the order to load it in (the epoch's shard, shuffled
  // when `shuffle`), less its first `skip` samples (a resumed epoch). Collective when the data
  // is scattered. The dataset stays valid until the next call.
  std::pair<const data::Dataset*, std::vector<uint64_t>> epoch(uint64_t seed, uint64_t epoch, bool shuffle,
                                                               uint64_t skip = 0);
  // Whether position `pos` of this rank's unshuffled epoch repeats a sample of another rank
  // (the wrap-around that evens out the ranks; an evaluation counts it once).
  bool repeated(uint64_t pos) const;

 private:
  void share_info();
  std::pair<const data::Dataset*, std::vector<uint64_t>> whole_epoch(uint64_t seed, uint64_t epoch, bool shuffle,
                                                                     uint64_t skip);

  const Comm& comm_;
  bool distribute_;
  SplitInfo info_;
  std::unique_ptr<data::Dataset> local_;
  std::optional<data::InMemoryData> mem_;     // rank 0, scattered splits
  std::optional<data::FileListData> files_;   // rank 0, scattered splits
  bool scatter_in_memory_ = false;
  std::unique_ptr<data::Dataset> shard_;      // this epoch's shard (or stream)
  std::optional<data::ShardSet> shards_;     // tar shards, on every rank
  size_t shuffle_buffer_ = 0;
};

}  // namespace mpicnn::dist
