// Which ranks run which stages of ./pipeline_eval: the four stages in order, each run by a
// contiguous range of ranks; consecutive stages may share their ranks (folded: each of those
// ranks runs all of them, one call chain, as one rank runs everything when K = 1). The default
// for K ranks (layout_for) and the --stages form ("read=1,decode=4,batch=1,predict=2",
// "read+decode+batch=1,predict=3"). Pure arithmetic: no MPI, no data (the stage loop is
// eval/pipeline.h's).
#pragma once
#include <array>
#include <functional>
#include <string>
#include <vector>

namespace mpicnn::eval {

enum Stage : int { kRead = 0, kDecode = 1, kNormalize = 2, kPredict = 3 };
constexpr int kStageCount = 4;
const char* stage_name(int stage);  // "read", "decode+resize", "normalize+batch", "predict"
const char* stage_key(int stage);   // --stages' names: "read", "decode", "batch", "predict"

// Stages [lo, hi] run by each of `count` ranks from `rank0` on.
struct StageGroup {
  int lo = kRead, hi = kPredict, rank0 = 0, count = 1;
  bool operator==(const StageGroup&) const = default;
};

// Groups in stage order: their stages cover read..predict and their ranks 0..ranks-1, each
// without gap or overlap. Rank 0 (in the first group) reads and collects the predictions.
// Items between two groups: samples go to a rank of the next group by block (the next group's
// rank rank0 + (index / batch size) % count), so that every block of batch-size samples stays
// together and in order and becomes the sequential run's batch; batches go to whichever
// predicting rank has the most room.
struct Layout {
  int ranks = 1;
  std::vector<StageGroup> groups{StageGroup{}};
  bool operator==(const Layout&) const = default;

  int group_index(int rank) const;             // the group rank belongs to
  const StageGroup& group(int rank) const { return groups[size_t(group_index(rank))]; }
  int first(int rank) const { return group(rank).lo; }  // the first stage rank runs
  int last(int rank) const { return group(rank).hi; }   // the last (== first unless folded)
  std::vector<int> ranks_of(int stage) const;
  int rank_of(int stage) const { return ranks_of(stage).front(); }  // the first rank running it
  std::string describe() const;  // "rank 0: read | ranks 1-4: decode+resize | ... | ranks 6-7: predict"
  std::string spec() const;      // the --stages form: "read=1,decode=4,batch=1,predict=2"
};

// Today's default for K ranks: K >= 4: read=1,decode=1,batch=1,predict=K-3; K = 3:
// read=1,decode+batch=1,predict=1; K = 2: read+decode+batch=1,predict=1; K = 1: everything.
Layout layout_for(int ranks);

// The groups of a --stages value, each item STAGES=N with STAGES one stage name or several
// consecutive ones joined by '+' (read, decode, batch or normalize, predict), items in stage
// order covering every stage once, N >= 1. Throws Error "--stages: ..." otherwise. The ranks are
// the sum of the counts.
Layout parse_stages(const std::string& spec);
// parse_stages(spec), which must use exactly `ranks` ranks ("--stages ... uses 8 ranks, the job has 6").
Layout parse_stages(const std::string& spec, int ranks);

// Seconds per image of each stage on one rank (a calibration's measure, eval/evaluate.cpp).
using StageCosts = std::array<double, kStageCount>;

// What the ranks of one node share, for layout_rate: the CPUs, and how predicting scales with
// threads or runs on a GPU. The default (cpus 0) is the pure per-rank model: every rank a core of
// its own, predicting on one thread.
struct NodeModel {
  int cpus = 0;                 // CPUs the node's ranks share; 0: as many as ranks
  bool predict_on_cpu = true;   // false: a GPU predicts; its time is not the CPUs' and one GPU
                                // serves every predicting rank of the node
  // The threads each predicting rank runs when `predictors` ranks predict (evaluate.cpp passes
  // its threads rule); unset: one.
  std::function<int(int predictors)> predict_threads;
  double speedup_at_cpus = 1;   // predict's measured speedup on `cpus` threads over one thread
  // Predict's speedup on `threads` threads: linear between 1 (one thread) and speedup_at_cpus
  // (cpus threads), the measured end points.
  double predict_speedup(int threads) const;
};

// The images/s the layout sustains at those costs (seconds per image on one rank, one thread),
// ignoring the cost of sending: the lowest of each group's count / (its ranks' time per image:
// the sum of its stages' costs, predict's divided by its threads' speedup) and, with node.cpus,
// of what the node's CPUs can do (cpus / the CPU time one image costs in all: the stages share
// the cores whatever the layout). `bottleneck`: the slowest group's index (the first of equals),
// or -1 when the CPUs bind.
double layout_rate(const Layout& l, const StageCosts& cost_s, int* bottleneck = nullptr, const NodeModel& node = {});

// The layout of `ranks` ranks with the highest layout_rate at those costs: for each way to cut
// the stages into groups, each spare rank to the group with the lowest rate; of equal rates the
// one with fewer groups (less to send between ranks).
Layout balance(const StageCosts& cost_s, int ranks, const NodeModel& node = {});

// Every layout of `ranks` ranks with the four stages unfolded (each composition of ranks into
// 4 counts >= 1; none for ranks < 4), or with `folded` every layout (each way to cut the stages
// into 1..4 consecutive groups, times each composition of ranks into that many counts).
std::vector<Layout> all_layouts(int ranks, bool folded);

}  // namespace mpicnn::eval
