// The stage-to-rank layouts of ./pipeline_eval (see layout.h): the default, the --stages form,
// the enumeration the tests walk through.
#include "eval/layout.h"

#include <algorithm>
#include <cstdlib>
#include <limits>

#include "core/check.h"

namespace mpicnn::eval {

namespace {

// groups from their stage ranges and counts, ranks numbered in order.
Layout from_counts(const std::vector<std::pair<int, int>>& ranges, const std::vector<int>& counts) {
  Layout l;
  l.groups.clear();
  int rank = 0;
  for (size_t i = 0; i < ranges.size(); ++i) {
    l.groups.push_back({ranges[i].first, ranges[i].second, rank, counts[i]});
    rank += counts[i];
  }
  l.ranks = rank;
  return l;
}

// The stage --stages calls `name`, or -1.
int stage_named(const std::string& name) {
  for (int s = kRead; s <= kPredict; ++s)
    if (name == stage_key(s)) return s;
  return name == "normalize" ? kNormalize : -1;
}

// One item of --stages: "read+decode=2" -> its stages [lo, hi] and count, after stage `prev`.
StageGroup parse_item(const std::string& item, int prev) {
  const std::string head = "--stages: '" + item + "' ";
  const size_t eq = item.find('=');
  CHECK(eq != std::string::npos, head, "is not STAGES=N (e.g. decode=4)");
  const std::string names = item.substr(0, eq), n = item.substr(eq + 1);
  StageGroup g;
  g.lo = -1;
  for (size_t a = 0; a <= names.size();) {
    const size_t b = std::min(names.find('+', a), names.size());
    const int s = stage_named(names.substr(a, b - a));
    CHECK(s >= 0, head, "names no stage (read, decode, batch or normalize, predict)");
    CHECK(s == (g.lo < 0 ? prev + 1 : g.hi + 1), head, "is out of order: the stages are read, decode, "
          "batch, predict, each once, in that order (folded ones joined by '+')");
    if (g.lo < 0) g.lo = s;
    g.hi = s;
    a = b + 1;
  }
  char* end = nullptr;
  const long count = std::strtol(n.c_str(), &end, 10);
  CHECK(!n.empty() && *end == '\0' && count >= 1 && count <= 100000, head, "needs a rank count >= 1 after '='");
  g.count = int(count);
  return g;
}

// Appends the group's stage names joined by '+' ("decode+batch").
void append_stages(std::string& s, const StageGroup& g, const char* (*name)(int)) {
  for (int st = g.lo; st <= g.hi; ++st) {
    if (st > g.lo) s += '+';
    s += name(st);
  }
}

}  // namespace

const char* stage_name(int stage) {
  static const char* const names[] = {"read", "decode+resize", "normalize+batch", "predict"};
  CHECK(stage >= kRead && stage <= kPredict, "no stage ", stage);
  return names[stage];
}

const char* stage_key(int stage) {
  static const char* const keys[] = {"read", "decode", "batch", "predict"};
  CHECK(stage >= kRead && stage <= kPredict, "no stage ", stage);
  return keys[stage];
}

int Layout::group_index(int rank) const {
  for (size_t i = 0; i < groups.size(); ++i)
    if (rank >= groups[i].rank0 && rank < groups[i].rank0 + groups[i].count) return int(i);
  FAIL("pipeline: rank ", rank, " is not in the layout ", spec());
}

std::vector<int> Layout::ranks_of(int stage) const {
  std::vector<int> out;
  for (const StageGroup& g : groups)
    if (g.lo <= stage && stage <= g.hi)
      for (int r = g.rank0; r < g.rank0 + g.count; ++r) out.push_back(r);
  return out;
}

std::string Layout::describe() const {
  std::string s;
  for (const StageGroup& g : groups) {
    if (!s.empty()) s += " | ";
    const int r1 = g.rank0 + g.count - 1;
    s += g.count > 1 ? "ranks " : "rank ";
    s += std::to_string(g.rank0);
    if (g.count > 1) s += '-' + std::to_string(r1);
    s += ": ";
    if (g.lo == kRead && g.hi == kPredict) {
      s += "all stages";
      continue;
    }
    append_stages(s, g, stage_name);
  }
  return s;
}

std::string Layout::spec() const {
  std::string s;
  for (const StageGroup& g : groups) {
    if (!s.empty()) s += ",";
    append_stages(s, g, stage_key);
    s += '=';
    s += std::to_string(g.count);
  }
  return s;
}

Layout layout_for(int ranks) {
  CHECK(ranks >= 1, "a pipeline needs at least one rank, not ", ranks);
  if (ranks == 1) return from_counts({{kRead, kPredict}}, {1});
  if (ranks == 2) return from_counts({{kRead, kNormalize}, {kPredict, kPredict}}, {1, 1});
  if (ranks == 3) return from_counts({{kRead, kRead}, {kDecode, kNormalize}, {kPredict, kPredict}}, {1, 1, 1});
  return from_counts({{kRead, kRead}, {kDecode, kDecode}, {kNormalize, kNormalize}, {kPredict, kPredict}},
                     {1, 1, 1, ranks - 3});
}

Layout parse_stages(const std::string& spec) {
  CHECK(!spec.empty(), "--stages: empty (give e.g. read=1,decode=4,batch=1,predict=2)");
  Layout l;
  l.groups.clear();
  l.ranks = 0;
  int prev = kRead - 1;
  for (size_t a = 0; a <= spec.size();) {
    const size_t b = std::min(spec.find(',', a), spec.size());
    StageGroup g = parse_item(spec.substr(a, b - a), prev);
    g.rank0 = l.ranks;
    l.ranks += g.count;
    prev = g.hi;
    l.groups.push_back(g);
    a = b + 1;
  }
  CHECK(prev == kPredict, "--stages: '", spec, "' leaves out ", stage_key(prev + 1),
        " (every stage needs ranks: read, decode, batch, predict)");
  return l;
}

Layout parse_stages(const std::string& spec, int ranks) {
  const Layout l = parse_stages(spec);
  CHECK(l.ranks == ranks, "--stages ", spec, ": uses ", l.ranks, " ranks, the job has ", ranks,
        " (mpiexec -n); the counts must add up to the job's ranks");
  return l;
}

double NodeModel::predict_speedup(int threads) const {
  if (cpus <= 1 || threads <= 1) return 1;
  return 1 + (speedup_at_cpus - 1) * double(std::min(threads, cpus) - 1) / double(cpus - 1);
}

namespace {

// layout_rate without the CPUs' bound, and that bound (infinite without node.cpus).
double group_rate(const Layout& l, const StageCosts& cost_s, const NodeModel& node, int* slowest_group,
                  double* cpu_bound) {
  const int predictors = l.groups.back().count;  // the last group predicts
  int threads = node.predict_threads ? std::max(1, node.predict_threads(predictors)) : 1;
  if (node.cpus > 0) threads = std::min(threads, node.cpus);
  const double speedup = node.predict_on_cpu ? node.predict_speedup(threads) : 1;
  const double predict_s = std::max(cost_s[kPredict], 1e-12);
  double slowest = 0, cpu_s = 0;  // cpu_s: the CPU seconds one image costs, all stages
  for (size_t i = 0; i < l.groups.size(); ++i) {
    const StageGroup& g = l.groups[i];
    double rank_s = 0;  // one rank's time per image
    for (int s = g.lo; s <= g.hi; ++s) {
      const double c = cost_s[size_t(s)];
      if (s != kPredict) {
        rank_s += c, cpu_s += c;
      } else if (node.predict_on_cpu) {
        rank_s += c / speedup, cpu_s += c * threads / speedup;  // its threads hold their cores
      } else {
        rank_s += c;
      }
    }
    double rate = double(g.count) / std::max(rank_s, 1e-12);  // an unmeasurably cheap stage: any rate
    if (g.hi == kPredict && !node.predict_on_cpu) rate = std::min(rate, 1 / predict_s);  // one GPU
    if (i == 0 || rate < slowest) slowest = rate, *slowest_group = int(i);
  }
  *cpu_bound = node.cpus > 0 && cpu_s > 0 ? node.cpus / cpu_s : std::numeric_limits<double>::infinity();
  return slowest;
}

}  // namespace

double layout_rate(const Layout& l, const StageCosts& cost_s, int* bottleneck, const NodeModel& node) {
  int slow = 0;
  double cpu_bound = 0;
  const double rate = group_rate(l, cost_s, node, &slow, &cpu_bound);
  if (bottleneck) *bottleneck = cpu_bound < rate ? -1 : slow;
  return std::min(rate, cpu_bound);
}

Layout balance(const StageCosts& cost_s, int ranks, const NodeModel& node) {
  CHECK(ranks >= 1, "a pipeline needs at least one rank, not ", ranks);
  Layout best;
  double best_rate = -1;
  for (size_t groups = 1; groups <= size_t(kStageCount); ++groups) {
    for (const Layout& start : all_layouts(int(groups), true)) {
      if (start.groups.size() != groups) continue;  // one per cut: every count 1
      if (ranks < int(groups)) continue;
      Layout l = start;
      l.ranks = ranks;
      for (int spare = ranks - int(groups); spare > 0; --spare) {
        int slow = 0;
        double cpu_bound = 0;
        group_rate(l, cost_s, node, &slow, &cpu_bound);
        ++l.groups[size_t(slow)].count;
      }
      for (size_t i = 1; i < l.groups.size(); ++i) l.groups[i].rank0 = l.groups[i - 1].rank0 + l.groups[i - 1].count;
      const double rate = layout_rate(l, cost_s, nullptr, node);
      if (rate > best_rate * (1 + 1e-9)) best = l, best_rate = rate;  // equal (the CPUs bind): fewer groups
    }
  }
  return best;
}

std::vector<Layout> all_layouts(int ranks, bool folded) {
  std::vector<Layout> out;
  // cut: bit i set = a group ends after stage i (stage 3 always ends one).
  for (int cut = 0; cut < 8; ++cut) {
    std::vector<std::pair<int, int>> ranges;
    for (int s = kRead, lo = kRead; s <= kPredict; ++s)
      if (s == kPredict || (cut >> s & 1)) ranges.push_back({lo, s}), lo = s + 1;
    if (!folded && ranges.size() != size_t(kStageCount)) continue;
    // Every composition of `ranks` into ranges.size() counts >= 1, in lexicographic order.
    std::vector<int> counts(ranges.size(), 1);
    const int spare = ranks - int(ranges.size());
    if (spare < 0) continue;
    counts.back() += spare;
    for (;;) {
      out.push_back(from_counts(ranges, counts));
      // next composition: move one from the last count to the rightmost earlier one that can
      // take it, resetting those after it.
      int i = int(counts.size()) - 2;
      while (i >= 0 && counts.back() == 1) {
        // gather the tail back into the last count and step left
        counts.back() += counts[size_t(i)] - 1, counts[size_t(i)] = 1, --i;
      }
      if (i < 0) break;
      ++counts[size_t(i)], --counts.back();
    }
  }
  return out;
}

}  // namespace mpicnn::eval
