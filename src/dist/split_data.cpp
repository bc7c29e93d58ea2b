// SplitData: rank 0 opens a split and shares what it holds; each epoch hands every rank its
// samples.
#include "dist/split_data.h"

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/rng.h"
#include "data/holdout.h"
#include "data/loader.h"
#include "data/registry.h"
#include "data/shard_stream.h"

namespace mpicnn::dist {

namespace {
std::vector<uint64_t> identity(size_t n) {
  std::vector<uint64_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = i;
  return v;
}
}  // namespace

SplitData::SplitData(const Comm& comm, const data::DatasetSpec& spec, bool distribute,
                     const std::optional<Holdout>& holdout)
    : comm_(comm), distribute_(distribute), shuffle_buffer_(spec.shuffle_buffer) {
  std::unique_ptr<data::Dataset> opened;
  comm.on_root([&] {
    info_.kind = spec.kind == "auto" ? data::detect_dataset_kind(spec.path) : spec.kind;
    if (const data::DatasetKind* k = data::find_dataset_kind(info_.kind); k && k->streamed) {
      CHECK(!holdout, spec.path, ": no validation split is held out of tar shards (--test-data names one)");
      shards_ = data::open_shard_set(spec.path, spec.split);
      info_.description = shards_->describe();
      info_.class_names = shards_->class_names;
      info_.size = shards_->size();
      return;
    }
    opened = data::open_dataset(spec);
    if (holdout) {
      const std::vector<uint64_t> held = data::holdout_indices(*opened, holdout->fraction, holdout->seed);
      info_.held_out = held.size();
      CHECK(!held.empty(), opened->describe(), ": too few samples per class to hold out a validation split");
      opened = data::subset_dataset(*opened, holdout->held_out_side
                                                 ? std::vector<uint64_t>(held)
                                                 : data::complement(opened->size(), held));
    }
    CHECK(opened->size() > 0, opened->describe(), ": no samples");
    info_.description = opened->describe();
    info_.class_names = opened->class_names();
    info_.channels = opened->channels();
    info_.height = opened->height();
    info_.width = opened->width();
    info_.size = opened->size();
  });
  share_info();
  if (const data::DatasetKind* k = data::find_dataset_kind(info_.kind); k && k->streamed) {
    std::string text = comm.root() ? data::to_json(*shards_).dump() : std::string();
    comm.broadcast(text);
    shards_ = data::shard_set_from_json(nlohmann::json::parse(text));
    // Training reads whole shards on every rank (an evaluation may leave ranks idle). The same
    // on every rank, before the run directory is made.
    const size_t n = shards_->shards.size();
    if (distribute && spec.split == "train" && n < size_t(comm.size()))
      throw SharedError(detail::concat(shards_->name, ": ", n, n == 1 ? " shard" : " shards", " cannot be split over ",
                                       comm.size(), " ranks (each reads whole shards): pack smaller shards (shards "
                                       "pack --shard-mb) or run at most ", n, n == 1 ? " rank" : " ranks"));
    return;
  }
  if (info_.kind == "synthetic") {
    // every rank generates samples itself: nothing to send
    CHECK(!holdout, "SplitData: no hold-out of synthetic data");
    local_ = comm.root() ? std::move(opened) : data::open_dataset(spec);
    return;
  }
  if (comm.root()) {
    if (auto* m = dynamic_cast<data::InMemoryDataset*>(opened.get())) mem_ = m->data();
    else if (auto* f = dynamic_cast<data::FileListDataset*>(opened.get())) files_ = f->data();
  }
  bool in_memory = mem_.has_value();
  comm.broadcast(in_memory);
  if (!distribute) {  // the whole split on every rank, once
    if (in_memory)
      local_ = std::make_unique<data::InMemoryDataset>(
          broadcast_in_memory(comm, mem_ ? &*mem_ : nullptr));
    else
      local_ = std::make_unique<data::FileListDataset>(
          broadcast_file_list(comm, files_ ? &*files_ : nullptr));
    mem_.reset();
    files_.reset();
  } else {
    scatter_in_memory_ = in_memory;
  }
}

std::pair<const data::Dataset*, std::vector<uint64_t>> SplitData::epoch(uint64_t seed, uint64_t epoch,
                                                                        bool shuffle, uint64_t skip) {
  auto [ds, order] = whole_epoch(seed, epoch, shuffle, skip);
  order.erase(order.begin(), order.begin() + std::min<uint64_t>(order.size(), skip));
  return {ds, std::move(order)};
}

bool SplitData::repeated(uint64_t pos) const {
  return !shards_ && uint64_t(comm_.rank()) + pos * uint64_t(comm_.size()) >= info_.size;
}

std::pair<const data::Dataset*, std::vector<uint64_t>> SplitData::whole_epoch(uint64_t seed, uint64_t epoch,
                                                                              bool shuffle, uint64_t skip) {
  const int K = comm_.size(), r = comm_.rank();
  if (local_) return {local_.get(), local_epoch_order(info_.size, K, r, seed, epoch, distribute_, shuffle)};
  if (shards_) {
    shard_.reset();  // the last epoch's reader stops before the next starts
    data::StreamOptions so;
    so.shards = data::shard_plan(shards_->shards.size(), K, r, seed, epoch, shuffle, distribute_);
    if (shuffle) {
      so.samples = distribute_ ? uint64_t(epoch_steps(int64_t(info_.size), K, 1).per_rank) : info_.size;
    } else {
      for (size_t s : so.shards) so.samples += shards_->shards[s].samples;
    }
    so.skip = skip;
    so.buffer = shuffle ? shuffle_buffer_ : 0;
    so.seed = seed;
    so.stream = stream_id("shards.buffer.epoch" + std::to_string(epoch) + ".rank" + std::to_string(r));
    shard_ = std::make_unique<data::ShardStream>(*shards_, std::move(so));
    return {shard_.get(), identity(shard_->size())};
  }
  if (scatter_in_memory_)
    shard_ = std::make_unique<data::InMemoryDataset>(
        scatter_in_memory(comm_, mem_ ? &*mem_ : nullptr, seed, epoch, shuffle));
  else
    shard_ = std::make_unique<data::FileListDataset>(
        scatter_file_list(comm_, files_ ? &*files_ : nullptr, seed, epoch, shuffle));
  return {shard_.get(), identity(shard_->size())};
}


void SplitData::share_info() {
  using json = nlohmann::json;
  std::string text;
  if (comm_.root())
    text = json{{"kind", info_.kind}, {"description", info_.description},
                {"classes", info_.class_names}, {"c", info_.channels}, {"h", info_.height},
                {"w", info_.width}, {"n", info_.size}, {"held_out", info_.held_out}}.dump();
  comm_.broadcast(text);
  const json j = json::parse(text);
  info_.kind = j["kind"];
  info_.description = j["description"];
  info_.class_names = j["classes"].get<std::vector<std::string>>();
  info_.channels = j["c"];
  info_.height = j["h"];
  info_.width = j["w"];
  info_.size = j["n"];
  info_.held_out = j["held_out"];
}

}  // namespace mpicnn::dist
