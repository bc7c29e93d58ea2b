// MPI tests of sharding: padded epoch orders, MPI_Scatterv'd in-memory and file-list shards
// (every global index once per epoch plus the documented wrap-around padding, equal counts,
// determinism per (seed, epoch), content identical to rank 0's data), and the whole-dataset
// broadcast of --distribute-data off.
#include <algorithm>
#include <map>
#include <string>

#include "data/loader.h"
#include "dist/shard.h"
#include "testing.h"

using namespace mpicnn;

namespace {
dist::Comm& comm() {
  static dist::Comm c(nullptr, nullptr);
  return c;
}

// Every rank can build the same dataset, so shards are checked against the full copy locally.
data::InMemoryData make_data(size_t n) {
  data::InMemoryData d;
  d.name = "test";
  d.channels = 3, d.height = 3, d.width = 2;
  d.class_names = {"a", "b", "c", "d", "e"};
  d.files = {"f0.idx", "f1.idx"};
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < d.sample_bytes(); ++j) d.pixels.push_back(uint8_t((i * 31 + j * 7) % 251));
    d.labels.push_back(int32_t(i % 5));
    d.file_index.push_back(uint32_t(i % 2));
    d.record.push_back(1000 + i);
  }
  return d;
}

data::FileListData make_files(size_t n) {
  data::FileListData d;
  d.name = "list.csv";
  d.class_names = {"x", "y", "z"};
  for (size_t i = 0; i < n; ++i) {
    d.paths.push_back("img/" + std::to_string(i) + ".png");
    d.labels.push_back(int32_t((i * 7) % 3));
  }
  return d;
}

// All ranks' shard ids, rank order (equal counts, so Allgather).
// The shards of all ranks put back into epoch positions: rank r's i-th sample is position
// r + i*K (strided shards), so this is the padded epoch order the ranks were cut from.
std::vector<uint64_t> gather_ids(const std::vector<uint64_t>& mine, int K) {
  std::vector<uint64_t> blocks(mine.size() * size_t(K)), all(blocks.size());
  MPI_Allgather(mine.data(), int(mine.size()), MPI_UINT64_T, blocks.data(), int(mine.size()),
                MPI_UINT64_T, MPI_COMM_WORLD);
  for (int r = 0; r < K; ++r)
    for (size_t i = 0; i < mine.size(); ++i) all[i * size_t(K) + size_t(r)] = blocks[size_t(r) * mine.size() + i];
  return all;
}

// Every index 0..n-1 appears; the order is the permutation followed by its first `padded`
// entries again.
void check_cover(const std::vector<uint64_t>& order, size_t n, int K) {
  const dist::EpochSteps p = dist::epoch_steps(int64_t(n), K, 1);
  REQUIRE(order.size() == size_t(p.per_rank) * size_t(K));
  std::vector<int> seen(n, 0);
  for (size_t j = 0; j < n; ++j) {
    REQUIRE(order[j] < n);
    seen[order[j]]++;
  }
  CHECK(std::count(seen.begin(), seen.end(), 1) == int64_t(n));
  for (size_t j = n; j < order.size(); ++j) CHECK(order[j] == order[j - n]);
}
}  // namespace

TEST_CASE("dist shard: epoch steps and padded order") {
  const dist::EpochSteps p = dist::epoch_steps(10, 3, 2);
  CHECK(p.per_rank == 4);
  CHECK(p.steps == 2);
  CHECK(p.padded == 2);
  CHECK(dist::epoch_steps(12, 3, 4).padded == 0);
  CHECK(dist::epoch_steps(12, 3, 4).steps == 1);
  CHECK(dist::epoch_steps(1, 3, 8).per_rank == 1);
  CHECK_THROWS_AS(dist::epoch_steps(0, 2, 1), Error);

  for (size_t n : {1, 5, 10, 13}) {
    for (int K : {1, 2, 3, 4}) {
      const auto o = dist::padded_epoch_order(n, K, 7, 3);
      check_cover(o, n, K);
      CHECK(o == dist::padded_epoch_order(n, K, 7, 3));  // deterministic
      const auto base = data::shuffled_order(n, 7, 3);
      CHECK(std::equal(base.begin(), base.end(), o.begin()));
    }
  }
  CHECK(dist::padded_epoch_order(50, 2, 7, 3) != dist::padded_epoch_order(50, 2, 7, 4));
  const auto plain = dist::padded_epoch_order(5, 2, 7, 3, /*shuffle=*/false);
  CHECK(plain == std::vector<uint64_t>{0, 1, 2, 3, 4, 0});
}

TEST_CASE("dist shard: in-memory shards by MPI_Scatterv") {
  const dist::Comm& c = comm();
  const int K = c.size();
  for (size_t n : {1, 10, 13, 64}) {
    const data::InMemoryData full = make_data(n);
    const data::InMemoryData* root = c.root() ? &full : nullptr;
    const data::InMemoryData e1 = dist::scatter_in_memory(c, root, 42, 1);
    const data::InMemoryData e1b = dist::scatter_in_memory(c, root, 42, 1);
    const data::InMemoryData e2 = dist::scatter_in_memory(c, root, 42, 2);
    const std::vector<uint64_t> all1 = gather_ids(e1.ids, K);
    const std::vector<uint64_t> all2 = gather_ids(e2.ids, K);

    const dist::EpochSteps p = dist::epoch_steps(int64_t(n), K, 4);
    CAPTURE(n);
    CHECK(int64_t(e1.size()) == p.per_rank);
    CHECK(e1.ids.size() == e1.size());
    check_cover(all1, n, K);
    check_cover(all2, n, K);
    CHECK(all1 == dist::padded_epoch_order(n, K, 42, 1));  // rank r holds r, r+K, ...
    CHECK(e1.ids == e1b.ids);                              // deterministic per (seed, epoch)
    CHECK(e1.pixels == e1b.pixels);
    if (n >= 10) CHECK(all1 != all2);                     // reshuffled per epoch
    // Content: sample i of the shard is global sample ids[i] of the full data.
    CHECK(e1.channels == full.channels);
    CHECK(e1.height == full.height);
    CHECK(e1.width == full.width);
    CHECK(e1.class_names == full.class_names);
    const data::InMemoryDataset ds(e1);
    const data::InMemoryDataset whole(full);
    for (size_t i = 0; i < e1.size(); ++i) {
      const uint64_t g = ds.id(i);
      CHECK(ds.read(i) == whole.read(g));
      CHECK(ds.label(int(i)) == whole.label(g));
      CHECK(ds.source(i) == whole.source(g));
    }
  }
}

TEST_CASE("dist shard: file-list shards and whole-dataset broadcast") {
  const dist::Comm& c = comm();
  const int K = c.size();
  const size_t n = 11;
  const data::FileListData full = make_files(n);
  const data::FileListData* root = c.root() ? &full : nullptr;
  const data::FileListData shard = dist::scatter_file_list(c, root, 9, 0);
  const std::vector<uint64_t> all = gather_ids(shard.ids, K);
  const data::FileListData everything = dist::broadcast_file_list(c, root);
  const data::InMemoryData mem = make_data(7);
  const data::InMemoryData mem_all = dist::broadcast_in_memory(c, c.root() ? &mem : nullptr);

  CHECK(int64_t(shard.size()) == dist::epoch_steps(int64_t(n), K, 1).per_rank);
  check_cover(all, n, K);
  for (size_t i = 0; i < shard.size(); ++i) {
    CHECK(shard.paths[i] == full.paths[shard.ids[i]]);
    CHECK(shard.labels[i] == full.labels[shard.ids[i]]);
  }
  CHECK(everything.paths == full.paths);
  CHECK(everything.labels == full.labels);
  CHECK(mem_all.pixels == mem.pixels);
  CHECK(mem_all.labels == mem.labels);
  CHECK(mem_all.record == mem.record);
}

TEST_CASE("dist shard: an error on rank 0 reaches every rank") {
  const dist::Comm& c = comm();
  // Rank 0 has no dataset: all ranks throw the same message instead of waiting in Scatterv.
  std::string msg;
  try {
    dist::scatter_in_memory(c, nullptr, 1, 0);
  } catch (const Error& e) {
    msg = e.message();
  }
  c.barrier();
  CHECK(msg.find("rank 0 has no dataset") != std::string::npos);
}
