// Matcher, sampler and losses for Faster R-CNN training targets (torchvision 0.14 semantics).
#include "detect/matcher.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/check.h"

namespace mpicnn::detect {

void Matcher::match(std::vector<int64_t>& matches, const float* iou, int64_t m, int64_t n) const {
  CHECK(m >= 1, "Matcher: no ground truth to match");
  matches.assign(size_t(n), 0);
  std::vector<float> best(iou, iou + n);  // ground truth 0's row
  for (int64_t g = 1; g < m; ++g)
    for (int64_t j = 0; j < n; ++j)
      if (iou[g * n + j] > best[size_t(j)]) best[size_t(j)] = iou[g * n + j], matches[size_t(j)] = g;
  const std::vector<int64_t> all = matches;
  for (int64_t j = 0; j < n; ++j) {
    if (best[size_t(j)] < low) matches[size_t(j)] = kBelowLow;
    else if (best[size_t(j)] < high) matches[size_t(j)] = kBetween;
  }
  if (!allow_low_quality_matches) return;
  for (int64_t g = 0; g < m; ++g) {
    const float* row = iou + g * n;
    const float top = *std::max_element(row, row + n);
    for (int64_t j = 0; j < n; ++j)
      if (row[j] == top) matches[size_t(j)] = all[size_t(j)];
  }
}

namespace {

// The first k of a random permutation of `idx` (a partial Fisher-Yates shuffle), sorted.
void choose(std::vector<int64_t>& out, std::vector<int64_t> idx, int64_t k, SampleRule rule,
            const Rng& rng, uint64_t offset) {
  if (rule == SampleRule::kRandom)
    for (int64_t i = 0; i < k; ++i) {
      const int64_t j = i + int64_t(rng.below(offset + uint64_t(i), uint64_t(int64_t(idx.size()) - i)));
      std::swap(idx[size_t(i)], idx[size_t(j)]);
    }
  out.assign(idx.begin(), idx.begin() + k);
  std::sort(out.begin(), out.end());
}

}  // namespace

void Sampler::sample(std::vector<int64_t>& pos, std::vector<int64_t>& neg, const int64_t* labels,
                     int64_t n, SampleRule rule, const Rng& rng) const {
  std::vector<int64_t> p, q;
  for (int64_t i = 0; i < n; ++i) {
    if (labels[i] >= 1) p.push_back(i);
    else if (labels[i] == 0) q.push_back(i);
  }
  const int64_t num_pos = std::min<int64_t>(int64_t(p.size()),
                                            int64_t(float(batch_per_image) * positive_fraction));
  const int64_t num_neg = std::min<int64_t>(int64_t(q.size()), batch_per_image - num_pos);
  // Positives draw from indices [0, num_pos), negatives from [2^32, ...): disjoint counters.
  choose(pos, std::move(p), num_pos, rule, rng, 0);
  choose(neg, std::move(q), num_neg, rule, rng, uint64_t(1) << 32);
}

double smooth_l1(float* dpred, const float* pred, const float* target, int64_t n, float beta,
                 float scale) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float d = pred[i] - target[i], z = std::fabs(d);
    sum += z < beta ? 0.5f * z * z / beta : z - 0.5f * beta;
    if (dpred) dpred[i] = scale * (z < beta ? d / beta : (d > 0 ? 1.f : d < 0 ? -1.f : 0.f));
  }
  return sum;
}

double bce_with_logits(float* dx, const float* x, const float* y, int64_t n, float scale) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    // PyTorch's stable form: (1 - y) x + max(-x, 0) + log(exp(-max) + exp(-x - max)).
    const float mx = std::max(-x[i], 0.f);
    sum += (1.f - y[i]) * x[i] + mx + std::log(std::exp(-mx) + std::exp(-x[i] - mx));
    if (dx) dx[i] = scale * (1.f / (1.f + std::exp(-x[i])) - y[i]);
  }
  return sum;
}

}  // namespace mpicnn::detect
