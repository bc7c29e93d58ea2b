// The automatic validation split: a stratified, seeded hold-out of a dataset that has no test
// split of its own, and the helpers that cut it out (./train holds it out, ./pipeline_eval
// re-derives the same samples from the run's recorded seed and fraction). Not the sharding of
// the training data over ranks (dist/shard.h).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace mpicnn::data {

// How many of a class's n samples are held out at `fraction` (in [0, 1)): round(fraction * n),
// at least 1 when n >= 2 and fraction > 0, and never all of them (a class keeps >= 1 training
// sample); a class of one sample is never held out.
uint64_t holdout_count(uint64_t n, double fraction);

// The held-out sample indices (ascending) of a dataset with these labels: per class,
// holdout_count(n_class, fraction) samples chosen by a Fisher-Yates shuffle of the class's
// indices keyed on (seed, class). A pure function of (labels, fraction, seed).
std::vector<uint64_t> holdout_indices(std::span<const int32_t> labels, double fraction, uint64_t seed);
std::vector<uint64_t> holdout_indices(const Dataset& d, double fraction, uint64_t seed);

// 0 .. n-1 without `held` (ascending, as holdout_indices returns them).
std::vector<uint64_t> complement(uint64_t n, std::span<const uint64_t> held);

// The samples at `indices` of an in-memory or file-list dataset (ids keep the full dataset's
// indices); an Error for other datasets.
std::unique_ptr<Dataset> subset_dataset(const Dataset& d, std::span<const uint64_t> indices);

// The samples of `classes` only (indices into d's classes, each once, in any order), relabelled
// 0 .. k-1 in that order and named after them; ids keep the full dataset's indices. The class
// split of a transfer experiment (create_dataset --classes). In-memory and file-list datasets.
std::unique_ptr<Dataset> class_subset(const Dataset& d, std::span<const int> classes);

// True when the data at spec.path holds one split only (an image folder without train/, test/
// and val/ folders; a CSV without a split column and without a test.csv beside it), so that
// asking for its test split would fail. Reads a CSV's header line only.
bool holds_one_split(const DatasetSpec& spec);

// "10% held out, 600 images, stratified" for headers and reports.
std::string describe_holdout(double fraction, uint64_t held);

}  // namespace mpicnn::data
