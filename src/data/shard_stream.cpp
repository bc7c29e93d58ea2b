// The per-epoch stream over a rank's tar shards (shard_stream.h).
#include "data/shard_stream.h"

#include <algorithm>

#include "core/check.h"
#include "core/rng.h"
#include "data/loader.h"

namespace mpicnn::data {

std::vector<size_t> shard_plan(size_t num_shards, int ranks, int rank, uint64_t seed, uint64_t epoch,
                               bool shuffle, bool distribute) {
  CHECK(ranks >= 1 && rank >= 0 && rank < ranks, "shard_plan: rank ", rank, " of ", ranks);
  CHECK(!distribute || !shuffle || num_shards >= size_t(ranks), "shard_plan: ", num_shards, " shards for ", ranks,
        " training ranks (SplitData refuses fewer)");
  std::vector<uint64_t> order(num_shards);
  for (size_t i = 0; i < num_shards; ++i) order[i] = i;
  if (shuffle)
    order = shuffled_order(num_shards, seed,
                           distribute ? epoch : epoch * uint64_t(ranks) + uint64_t(rank));
  std::vector<size_t> mine;
  for (size_t p = distribute ? size_t(rank) : 0; p < num_shards; p += distribute ? size_t(ranks) : 1)
    mine.push_back(size_t(order[p]));
  return mine;
}

ShardStream::ShardStream(const ShardSet& set, StreamOptions opt) : set_(set), opt_(std::move(opt)) {
  CHECK(!opt_.shards.empty() || opt_.samples == 0, set_.name, ": a stream without shards");
  CHECK(opt_.window >= 1, "ShardStream: window must be >= 1");
  kept_.reserve(size_t(opt_.samples));
  thread_ = std::thread([this] { run(); });
}

ShardStream::~ShardStream() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

// The reader hands out the next position: it waits while the window of positions read ahead
// is full and nobody has asked for this one (positions a resumed epoch skips are not kept).
void ShardStream::emit(Item&& item) {
  std::unique_lock<std::mutex> lk(mu_);
  const uint64_t pos = kept_.size();
  const bool dropped = pos < opt_.skip;
  if (!dropped)
    cv_.wait(lk, [&] { return stop_ || pos < wanted_ || ready_.size() < opt_.window; });
  if (stop_) return;
  kept_.push_back({std::move(item.key), item.label, item.shard, item.id});
  if (!dropped) ready_.emplace(pos, std::move(item.bytes));
  lk.unlock();
  cv_.notify_all();
}

void ShardStream::run() {
  try {
    const Rng rng(opt_.seed, opt_.stream);
    uint64_t draws = 0, read = 0;  // buffer draws; samples taken from the shards
    const size_t B = opt_.buffer > 1 ? opt_.buffer : 0;
    std::vector<Item> buf;
    buf.reserve(B);
    uint64_t held = 0;  // what one pass over the shards gives (each shard's count is checked as it ends)
    for (size_t s : opt_.shards) held += set_.shards[s].samples;
    CHECK(held > 0 || opt_.samples == 0, set_.name, ": this rank's shards hold no samples");
    auto stopped = [&] {
      std::lock_guard<std::mutex> lk(mu_);
      return stop_;
    };
    for (size_t k = 0; read < opt_.samples; k = (k + 1) % opt_.shards.size()) {
      const uint32_t s = uint32_t(opt_.shards[k]);
      const ShardFile& file = set_.shards[s];
      ShardReader reader(file.path, int(set_.class_names.size()));
      uint64_t place = 0;
      for (ShardSample sample; read < opt_.samples && reader.next(sample); ++place) {
        if (stopped()) return;
        CHECK(place < file.samples, file.path, ": holds more samples than the ", file.samples,
              " its index gives (rewrite shards.json, or remove it to count the shards)");
        Item item{std::move(sample.image), std::move(sample.key), sample.label, s, file.first_id + place};
        ++read;
        if (B == 0) {
          emit(std::move(item));
        } else if (buf.size() < B) {
          buf.push_back(std::move(item));
        } else {
          const size_t j = size_t(rng.below(draws++, B));
          emit(std::move(buf[j]));
          buf[j] = std::move(item);
        }
      }
      CHECK(read == opt_.samples || place == file.samples, file.path, ": holds ", place,
            " samples, its index gives ", file.samples, " (a truncated shard? rewrite shards.json, or remove it to "
            "count the shards)");
    }
    while (!buf.empty()) {  // the buffer's rest, in draw order
      if (stopped()) return;
      const size_t j = size_t(rng.below(draws++, buf.size()));
      emit(std::move(buf[j]));
      buf[j] = std::move(buf.back());
      buf.pop_back();
    }
  } catch (...) {
    std::lock_guard<std::mutex> lk(mu_);
    error_ = std::current_exception();
  }
  cv_.notify_all();
}

const ShardStream::Kept& ShardStream::wait_for(size_t i, std::unique_lock<std::mutex>& lk) const {
  CHECK(i < opt_.samples, set_.name, ": stream position ", i, " of ", opt_.samples);
  if (i >= wanted_) {
    wanted_ = i + 1;
    cv_.notify_all();  // the reader may be waiting for a request
  }
  cv_.wait(lk, [&] { return i < kept_.size() || error_; });
  if (i >= kept_.size()) std::rethrow_exception(error_);
  return kept_[i];
}

std::vector<uint8_t> ShardStream::read(size_t i) const {
  std::unique_lock<std::mutex> lk(mu_);
  wait_for(i, lk);
  const auto it = ready_.find(i);
  CHECK(it != ready_.end(), source_locked(i), ": stream position ", i, " read twice (a stream hands each sample out once)");
  std::vector<uint8_t> bytes = std::move(it->second);
  ready_.erase(it);
  lk.unlock();
  cv_.notify_all();  // room in the window
  return bytes;
}

Image ShardStream::decode(std::span<const uint8_t> bytes, size_t i, int channels) const {
  return decode_image(bytes, channels, source(i));
}

int ShardStream::label(size_t i) const {
  std::unique_lock<std::mutex> lk(mu_);
  return wait_for(i, lk).label;
}

uint64_t ShardStream::id(size_t i) const {
  std::unique_lock<std::mutex> lk(mu_);
  return wait_for(i, lk).id;
}

std::string ShardStream::source(size_t i) const {
  std::lock_guard<std::mutex> lk(mu_);
  return source_locked(i);
}

std::string ShardStream::source_locked(size_t i) const {
  if (i >= kept_.size()) return set_.name;  // not read yet (a shard error names its shard)
  const Kept& k = kept_[i];
  return set_.shards[k.shard].path + "#" + k.key;
}

}  // namespace mpicnn::data
