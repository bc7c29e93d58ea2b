// The stage-to-rank layouts of ./pipeline_eval without MPI (src/eval/layout.*): the default for
// K ranks, the --stages form and its errors, the enumeration the MPI tests walk through.
#include <set>
#include <string>

#include "eval/layout.h"
#include "testing.h"

using namespace mpicnn::eval;

namespace {

// Groups cover the stages and the ranks in order, without gap or overlap.
void check_well_formed(const Layout& l) {
  REQUIRE(!l.groups.empty());
  CHECK(l.groups.front().lo == kRead);
  CHECK(l.groups.back().hi == kPredict);
  CHECK(l.groups.front().rank0 == 0);
  for (size_t i = 0; i < l.groups.size(); ++i) {
    const StageGroup& g = l.groups[i];
    CHECK(g.lo <= g.hi);
    CHECK(g.count >= 1);
    if (i > 0) {
      CHECK(g.lo == l.groups[i - 1].hi + 1);
      CHECK(g.rank0 == l.groups[i - 1].rank0 + l.groups[i - 1].count);
    }
  }
  CHECK(l.groups.back().rank0 + l.groups.back().count == l.ranks);
}

}  // namespace

TEST_CASE("eval layout: the default for K ranks is today's, and --stages writes it back") {
  CHECK(layout_for(1).spec() == "read+decode+batch+predict=1");
  CHECK(layout_for(2).spec() == "read+decode+batch=1,predict=1");
  CHECK(layout_for(3).spec() == "read=1,decode+batch=1,predict=1");
  CHECK(layout_for(4).spec() == "read=1,decode=1,batch=1,predict=1");
  CHECK(layout_for(7).spec() == "read=1,decode=1,batch=1,predict=4");
  for (int K = 1; K <= 9; ++K) {
    CAPTURE(K);
    const Layout l = layout_for(K);
    check_well_formed(l);
    CHECK(l.ranks == K);
    CHECK(parse_stages(l.spec(), K) == l);
  }
}

TEST_CASE("eval layout: ranks per stage, folded stages, describe") {
  const Layout l = parse_stages("read=2,decode=4,batch=1,predict=2", 9);
  check_well_formed(l);
  CHECK(l.ranks == 9);
  CHECK(l.describe() == "ranks 0-1: read | ranks 2-5: decode+resize | rank 6: normalize+batch | ranks 7-8: predict");
  CHECK(l.ranks_of(kDecode) == std::vector<int>{2, 3, 4, 5});
  CHECK(l.rank_of(kNormalize) == 6);
  CHECK(l.first(1) == kRead);
  CHECK(l.last(5) == kDecode);
  CHECK(l.group_index(8) == 3);
  CHECK(l.group(3).rank0 == 2);

  const Layout f = parse_stages("read+decode=3,normalize+predict=2");
  check_well_formed(f);
  CHECK(f.ranks == 5);
  CHECK(f.spec() == "read+decode=3,batch+predict=2");
  CHECK(f.describe() == "ranks 0-2: read+decode+resize | ranks 3-4: normalize+batch+predict");
  CHECK(f.first(4) == kNormalize);
  CHECK(f.last(4) == kPredict);
  CHECK(f.ranks_of(kRead) == std::vector<int>{0, 1, 2});
  CHECK(parse_stages("read+decode+batch+predict=3").describe() == "ranks 0-2: all stages");
}

TEST_CASE("eval layout: --stages errors are one line naming --stages") {
  using mpicnn::testing::expect_error;
  expect_error([] { parse_stages(""); }, "--stages: empty");
  expect_error([] { parse_stages("read=1,decode=1,batch=1"); }, "--stages: 'read=1,decode=1,batch=1' leaves out predict");
  expect_error([] { parse_stages("decode=1,read=1,batch=1,predict=1"); }, "--stages: 'decode=1' is out of order");
  expect_error([] { parse_stages("read=1,decode=1,batch=1,predict=1,predict=1"); }, "'predict=1' is out of order");
  expect_error([] { parse_stages("read+read=1,decode=1,batch=1,predict=1"); }, "'read+read=1' is out of order");
  expect_error([] { parse_stages("read=1,,decode=1,batch=1,predict=1"); }, "--stages: '' is not STAGES=N");
  expect_error([] { parse_stages("read=1,decode=-1,batch=1,predict=1"); }, "'decode=-1' needs a rank count >= 1");
  expect_error([] { parse_stages("read=1,decode=,batch=1,predict=1"); }, "'decode=' needs a rank count >= 1");
  expect_error([] { parse_stages("read=1,decode=1,batch=1,predict=1", 6); },
               "--stages read=1,decode=1,batch=1,predict=1: uses 4 ranks, the job has 6");
  expect_error([] { layout_for(0); }, "at least one rank");
}

TEST_CASE("eval layout: every assignment of K ranks, once each") {
  for (int K = 1; K <= 8; ++K) {
    CAPTURE(K);
    const std::vector<Layout> plain = all_layouts(K, false), folded = all_layouts(K, true);
    // Compositions of K into 4 parts: C(K-1, 3); with folding, the 8 ways to cut the stages
    // into g groups times C(K-1, g-1) each.
    auto choose = [](int n, int k) {
      if (k < 0 || n < k) return size_t(0);
      size_t c = 1;
      for (int i = 1; i <= k; ++i) c = c * size_t(n - k + i) / size_t(i);
      return c;
    };
    CHECK(plain.size() == choose(K - 1, 3));
    CHECK(folded.size() == choose(K - 1, 0) + 3 * choose(K - 1, 1) + 3 * choose(K - 1, 2) + choose(K - 1, 3));
    std::set<std::string> specs;
    for (const Layout& l : folded) {
      check_well_formed(l);
      CHECK(l.ranks == K);
      CHECK(parse_stages(l.spec(), K) == l);
      specs.insert(l.spec());
    }
    CHECK(specs.size() == folded.size());
    for (const Layout& l : plain) {
      CHECK(l.groups.size() == 4);
      CHECK(specs.count(l.spec()) == 1);
    }
    CHECK(specs.count(layout_for(K).spec()) == 1);
  }
  CHECK(all_layouts(5, false).front().spec() == "read=1,decode=1,batch=1,predict=2");
}

TEST_CASE("eval layout: balance gives the slowest stage the most ranks the job allows") {
  // Decode 4x the cost of predict, read and batch nearly free (a light model on JPEGs).
  const StageCosts jpeg = {0.0001, 0.004, 0.0001, 0.001};
  // One rank per stage costs the sum on one rank; 2 ranks: all stages on each (the pipeline
  // would leave a rank waiting on the other).
  CHECK(balance(jpeg, 1).spec() == "read+decode+batch+predict=1");
  CHECK(balance(jpeg, 2).spec() == "read+decode+batch+predict=2");
  int slow = -1;
  CHECK(layout_rate(balance(jpeg, 2), jpeg, &slow) == doctest::Approx(2 / 0.0052));
  CHECK(slow == 0);
  // A cheap stage split off only when it frees a rank for the expensive one: with decode and
  // predict on their own ranks, 4 : 1 is the ratio of their costs.
  const StageCosts pricey_read = {0.004, 0.004, 0.0001, 0.004};
  const Layout l = balance(pricey_read, 9);
  CHECK(layout_rate(l, pricey_read) >= layout_rate(parse_stages("read+decode+batch+predict=9"), pricey_read));
  for (const Layout& other : all_layouts(9, true))
    CHECK(layout_rate(l, pricey_read) >= layout_rate(other, pricey_read) * (1 - 1e-12));
  // The rate of a given layout: the slowest group's count / its cost.
  const Layout m = parse_stages("read=1,decode=5,batch=1,predict=1");
  CHECK(layout_rate(m, jpeg, &slow) == doctest::Approx(1 / 0.001));
  CHECK(slow == 3);  // predict
  CHECK(layout_rate(parse_stages("read=1,decode=2,batch=1,predict=2"), jpeg, &slow) == doctest::Approx(2 / 0.004));
  CHECK(slow == 1);  // decode
  // Best over every layout for every K up to 8, at a few cost profiles.
  for (const StageCosts& c : {jpeg, pricey_read, StageCosts{0.001, 0.001, 0.001, 0.001}, StageCosts{0, 0.002, 0, 0.01}})
    for (int K = 1; K <= 8; ++K) {
      CAPTURE(K);
      const Layout b = balance(c, K);
      CHECK(b.ranks == K);
      CHECK(parse_stages(b.spec(), K) == b);
      for (const Layout& other : all_layouts(K, true)) CHECK(layout_rate(b, c) >= layout_rate(other, c) * (1 - 1e-12));
    }
}

TEST_CASE("eval layout: on a node's CPUs, predict's threads and the CPUs shared by every stage") {
  // ResNet-18 on JPEGs on 2 CPUs: predict 80 ms on one thread, 1.8x faster on two.
  const StageCosts photos = {0.0001, 0.0015, 0.0001, 0.08};
  NodeModel two;
  two.cpus = 2;
  two.speedup_at_cpus = 1.8;
  two.predict_threads = [](int predictors) { return std::max(1, 2 / predictors); };
  CHECK(two.predict_speedup(1) == 1);
  CHECK(two.predict_speedup(2) == doctest::Approx(1.8));
  CHECK(two.predict_speedup(8) == doctest::Approx(1.8));  // no more than the node's CPUs
  NodeModel sixteen = two;
  sixteen.cpus = 16;
  sixteen.speedup_at_cpus = 11.5;  // linear between the measured ends
  CHECK(sixteen.predict_speedup(9) == doctest::Approx(1 + 10.5 * 8 / 15));
  // One rank, everything on two threads: its rank's time is 1.7 ms + 80 / 1.8 ms; its CPU
  // time (the threads hold both cores) 1.7 + 2 x 80 / 1.8 ms bounds it at 2 CPUs / that.
  int slow = 0;
  const double one_rank = 1 / (0.0017 + 0.08 / 1.8), cpus_two = 2 / (0.0017 + 2 * 0.08 / 1.8);
  CHECK(layout_rate(parse_stages("read+decode+batch+predict=1"), photos, &slow, two) ==
        doctest::Approx(std::min(one_rank, cpus_two)));
  CHECK(slow == 0);
  // Four ranks on two CPUs: per rank (one thread each) 4 / 81.7 ms, but the CPUs can do only
  // 2 / 81.7 ms, and they bind (-1).
  CHECK(layout_rate(parse_stages("read+decode+batch+predict=4"), photos, &slow, two) == doctest::Approx(2 / 0.0817));
  CHECK(slow == -1);
  // balance sees it: every layout of 4 ranks at most that; the chosen one reaches it.
  const Layout b = balance(photos, 4, two);
  CHECK(layout_rate(b, photos, nullptr, two) == doctest::Approx(2 / 0.0817));
  for (const Layout& other : all_layouts(4, true))
    CHECK(layout_rate(b, photos, nullptr, two) >= layout_rate(other, photos, nullptr, two) * (1 - 1e-12));
  // Without the node (one core per rank, one thread): 4 ranks would do twice that.
  CHECK(layout_rate(parse_stages("read+decode+batch+predict=4"), photos) == doctest::Approx(4 / 0.0817));
  // A GPU predicts at 0.1 ms per image and serves every predicting rank; the CPUs do the rest.
  NodeModel gpu;
  gpu.cpus = 16;
  gpu.predict_on_cpu = false;
  const StageCosts on_gpu = {0.00005, 0.0015, 0.0001, 0.0001};
  // Decode on 13 ranks: 8667 images/s, below the GPU's 10000 and the CPUs' 16 / 1.65 ms.
  CHECK(layout_rate(parse_stages("read=1,decode=13,batch=1,predict=1"), on_gpu, &slow, gpu) == doctest::Approx(13 / 0.0015));
  CHECK(slow == 1);
  // With CPUs to spare, 5 ranks that batch and predict share the one GPU's 10000.
  NodeModel big = gpu;
  big.cpus = 64;
  CHECK(layout_rate(parse_stages("read=1,decode=20,batch+predict=5"), on_gpu, &slow, big) == doctest::Approx(10000));
  CHECK(slow == 2);
  // One decode rank caps it at 667 images/s; balance spreads decode (8x that at least) and
  // stays under the CPUs' bound of 16 / 1.65 ms.
  CHECK(layout_rate(layout_for(16), on_gpu, &slow, gpu) == doctest::Approx(1 / 0.0015));
  const Layout spread = balance(on_gpu, 16, gpu);
  CHECK(layout_rate(spread, on_gpu, nullptr, gpu) >= 8 * layout_rate(layout_for(16), on_gpu, nullptr, gpu));
  for (const Layout& other : all_layouts(16, true))
    CHECK(layout_rate(spread, on_gpu, nullptr, gpu) >= layout_rate(other, on_gpu, nullptr, gpu) * (1 - 1e-12));
}
