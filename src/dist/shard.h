// Data sharding over ranks with equal steps: each epoch rank 0 shuffles the global order from
// (seed, epoch), pads it and hands every rank an equal, strided shard of the samples (or of
// the file list) with MPI_Scatterv. Not a loader: a rank then loads its shard in order (the
// shuffle already happened) with data::Loader.
//
// The tail: the epoch order (N indices) is padded by wrapping around to the next multiple of
// K, order[j] = perm[j mod N] for j in [N, K*ceil(N/K)), so no sample is dropped, at most K-1
// samples are seen twice in an epoch, and every rank holds per_rank = ceil(N/K) samples. Rank r
// holds positions r, r + K, r + 2K, ... (torch's DistributedSampler layout), so step s of the K
// ranks together covers positions [s*K*b, (s+1)*K*b): the same samples as step s of one rank
// with batch K*b, which makes K ranks an exact re-split of one large-batch run. Each
// rank then runs steps = ceil(per_rank / batch) steps; the last step of every rank has the same
// smaller batch, so all ranks reach every collective and each step's average over ranks is the
// mean over the global batch. Shards keep global indices as their ids, so augmentation draws,
// keyed on (seed, epoch, id), do not depend on K.
#pragma once
#include <cstdint>
#include <vector>

#include "data/dataset.h"
#include "dist/comm.h"

namespace mpicnn::dist {

struct EpochSteps {
  int64_t per_rank = 0;  // samples each rank holds this epoch: ceil(N / K)
  int64_t steps = 0;     // optimizer steps per epoch: ceil(per_rank / batch)
  int64_t padded = 0;    // samples added by wrapping around: K * per_rank - N (< K)
};
EpochSteps epoch_steps(int64_t num_samples, int ranks, int64_t batch);

// The padded global order of an epoch (K * ceil(N/K) dataset indices): shuffled_order(N,
// seed, epoch) when shuffle, else 0..N-1, wrapped around at the end.
std::vector<uint64_t> padded_epoch_order(size_t num_samples, int ranks, uint64_t seed,
                                         uint64_t epoch, bool shuffle = true);
// Rank r's shard of a padded order: order[r], order[r + K], ... (per_rank entries).
std::vector<uint64_t> rank_shard(const std::vector<uint64_t>& padded_order, int ranks, int rank);

// Rank r's order of an epoch over a split of N samples that every rank holds whole (synthetic
// data, a broadcast split, detection sets): its shard of the padded order; with `distribute`
// false, all N samples in the rank's own order (shuffled_order(N, seed, epoch * K + r)).
std::vector<uint64_t> local_epoch_order(size_t num_samples, int ranks, int rank, uint64_t seed,
                                        uint64_t epoch, bool distribute, bool shuffle = true);

// This rank's shard for the epoch: rank 0 passes the whole dataset (the others pass nullptr,
// which is ignored), builds the order, and scatters serialized shards (MPI_Scatterv).
// Collective. Sample i of the shard has id() = its global index.
data::InMemoryData scatter_in_memory(const Comm& comm, const data::InMemoryData* on_root,
                                     uint64_t seed, uint64_t epoch, bool shuffle = true);
data::FileListData scatter_file_list(const Comm& comm, const data::FileListData* on_root,
                                     uint64_t seed, uint64_t epoch, bool shuffle = true);

// --distribute-data off: every rank gets rank 0's whole dataset (one MPI_Bcast, once), and
// trains on all of it with shuffled_order(N, seed, epoch) locally. Collective.
data::InMemoryData broadcast_in_memory(const Comm& comm, const data::InMemoryData* on_root);
data::FileListData broadcast_file_list(const Comm& comm, const data::FileListData* on_root);

}  // namespace mpicnn::dist
