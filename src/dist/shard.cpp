// Sharding: padded epoch order, serialized shards scattered from rank 0, or a whole-dataset
// broadcast.
#include "dist/shard.h"

#include <climits>

#include "core/fault.h"
#include "data/loader.h"
#include "dist/watchdog.h"

namespace mpicnn::dist {

EpochSteps epoch_steps(int64_t num_samples, int ranks, int64_t batch) {
  CHECK(num_samples >= 1, "epoch steps: the dataset is empty");
  CHECK(ranks >= 1 && batch >= 1, "epoch steps: ranks and batch must be >= 1");
  EpochSteps p;
  p.per_rank = (num_samples + ranks - 1) / ranks;
  p.steps = (p.per_rank + batch - 1) / batch;
  p.padded = p.per_rank * ranks - num_samples;
  return p;
}

std::vector<uint64_t> padded_epoch_order(size_t num_samples, int ranks, uint64_t seed,
                                         uint64_t epoch, bool shuffle) {
  CHECK(num_samples >= 1, "epoch order: the dataset is empty");
  std::vector<uint64_t> order;
  if (shuffle) {
    order = data::shuffled_order(num_samples, seed, epoch);
  } else {
    order.resize(num_samples);
    for (size_t i = 0; i < num_samples; ++i) order[i] = i;
  }
  const EpochSteps p = epoch_steps(int64_t(num_samples), ranks, 1);
  for (int64_t j = 0; j < p.padded; ++j) order.push_back(order[size_t(j) % num_samples]);
  return order;
}

std::vector<uint64_t> rank_shard(const std::vector<uint64_t>& padded_order, int ranks, int rank) {
  CHECK(ranks >= 1 && rank >= 0 && rank < ranks && padded_order.size() % size_t(ranks) == 0,
        "rank shard: rank ", rank, " of ", ranks, " over an order of ", padded_order.size());
  std::vector<uint64_t> shard;
  shard.reserve(padded_order.size() / size_t(ranks));
  for (size_t j = size_t(rank); j < padded_order.size(); j += size_t(ranks)) shard.push_back(padded_order[j]);
  return shard;
}

std::vector<uint64_t> local_epoch_order(size_t num_samples, int ranks, int rank, uint64_t seed,
                                        uint64_t epoch, bool distribute, bool shuffle) {
  if (distribute) return rank_shard(padded_epoch_order(num_samples, ranks, seed, epoch, shuffle), ranks, rank);
  if (shuffle) return data::shuffled_order(num_samples, seed, epoch * uint64_t(ranks) + uint64_t(rank));
  std::vector<uint64_t> order(num_samples);
  for (size_t i = 0; i < num_samples; ++i) order[i] = i;
  return order;
}

namespace {

// Rank 0: serialize each rank's shard; everyone: receive its own bytes by Scatterv. Errors on
// rank 0 (an empty dataset, a shard over 2 GiB) are agreed on first (Comm::on_root), so no rank
// is left waiting in the Scatterv: every rank throws the same SharedError.
template <class Data>
std::vector<uint8_t> scatter_shards(const Comm& comm, const Data* on_root, uint64_t seed,
                                    uint64_t epoch, bool shuffle) {
  const int K = comm.size();
  std::vector<uint8_t> send;
  std::vector<int> counts(size_t(K), 0), displs(size_t(K), 0);
  comm.on_root([&] {
    CHECK(on_root != nullptr, "scatter: rank 0 has no dataset");
    const std::vector<uint64_t> order = padded_epoch_order(on_root->size(), K, seed, epoch, shuffle);
    for (int r = 0; r < K; ++r) {
      const std::vector<uint8_t> bytes = data::serialize(on_root->subset(rank_shard(order, K, r)));
      CHECK(bytes.size() < size_t(INT_MAX) && send.size() + bytes.size() < size_t(INT_MAX),
            "scatter: shards of ", on_root->name, " exceed MPI's 2 GiB count; use more ranks "
            "or --distribute-data with a file-list dataset");
      displs[size_t(r)] = int(send.size());
      counts[size_t(r)] = int(bytes.size());
      send.insert(send.end(), bytes.begin(), bytes.end());
    }
  });
  fault::point("scatter");
  WaitGuard wait("MPI_Scatterv", "epoch shards from rank 0");
  int mine = 0;
  MPI_CHECK(MPI_Scatter(counts.data(), 1, MPI_INT, &mine, 1, MPI_INT, 0, comm.world()));
  std::vector<uint8_t> got(static_cast<size_t>(mine));
  MPI_CHECK(MPI_Scatterv(send.data(), counts.data(), displs.data(), MPI_BYTE, got.data(), mine,
                         MPI_BYTE, 0, comm.world()));
  return got;
}

template <class Data>
std::vector<uint8_t> broadcast_whole(const Comm& comm, const Data* on_root) {
  std::vector<uint8_t> bytes;
  comm.on_root([&] {
    CHECK(on_root != nullptr, "broadcast: rank 0 has no dataset");
    bytes = data::serialize(*on_root);
  });
  comm.broadcast(bytes);
  return bytes;
}

}  // namespace

data::InMemoryData scatter_in_memory(const Comm& comm, const data::InMemoryData* on_root,
                                     uint64_t seed, uint64_t epoch, bool shuffle) {
  return data::deserialize_in_memory(scatter_shards(comm, on_root, seed, epoch, shuffle));
}

data::FileListData scatter_file_list(const Comm& comm, const data::FileListData* on_root,
                                     uint64_t seed, uint64_t epoch, bool shuffle) {
  return data::deserialize_file_list(scatter_shards(comm, on_root, seed, epoch, shuffle));
}

data::InMemoryData broadcast_in_memory(const Comm& comm, const data::InMemoryData* on_root) {
  return data::deserialize_in_memory(broadcast_whole(comm, on_root));
}

data::FileListData broadcast_file_list(const Comm& comm, const data::FileListData* on_root) {
  return data::deserialize_file_list(broadcast_whole(comm, on_root));
}

}  // namespace mpicnn::dist
