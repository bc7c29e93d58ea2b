// Training-target pieces that Faster R-CNN's RPN and box head share, torchvision 0.14
// semantics: the IoU matcher, the balanced positive/negative sampler (random from our counter
// RNG, or a deterministic rule for parity tests) and the two losses with their gradients.
// Not box geometry (boxes.h).
#pragma once
#include <cstdint>
#include <vector>

#include "core/rng.h"

namespace mpicnn::detect {

// torchvision.models.detection._utils.Matcher.
struct Matcher {
  static constexpr int64_t kBelowLow = -1;
  static constexpr int64_t kBetween = -2;
  float high = 0.7f, low = 0.3f;
  bool allow_low_quality_matches = true;
  // matches (n) = for each prediction, the ground truth (0..m-1) of highest IoU when that IoU
  // >= high, else kBelowLow (< low) or kBetween; with allow_low_quality_matches, each ground
  // truth's best predictions (all ties) keep their match whatever the IoU. iou: (m, n), m >= 1.
  // Of equal IoUs the first ground truth wins, as torch.max(dim=0) on the CPU.
  void match(std::vector<int64_t>& matches, const float* iou, int64_t m, int64_t n) const;
};

// How the sampler picks among the candidates: kRandom as torchvision (a random subset; ours
// draws from Rng), kFirst the lowest indices (deterministic, for parity tests: the reference's
// torch.randperm is replaced by the same rule).
enum class SampleRule { kRandom, kFirst };

// torchvision's BalancedPositiveNegativeSampler.
struct Sampler {
  int64_t batch_per_image = 256;
  float positive_fraction = 0.5f;
  // labels (n): >= 1 positive, 0 negative, -1 ignored. pos, neg = the chosen indices of each,
  // increasing (torchvision returns masks, which its callers turn into increasing indices).
  // kRandom draws from rng, a stream for this image of this step.
  void sample(std::vector<int64_t>& pos, std::vector<int64_t>& neg, const int64_t* labels,
              int64_t n, SampleRule rule, const Rng& rng) const;
};

// F.smooth_l1_loss(pred, target, beta, reduction="sum") over n values, and its gradient
// d(scale * loss)/d pred written (=) into dpred (skipped when null).
double smooth_l1(float* dpred, const float* pred, const float* target, int64_t n, float beta,
                 float scale);
// F.binary_cross_entropy_with_logits(x, y, reduction="sum") over n values, and
// d(scale * loss)/dx written (=) into dx (skipped when null).
double bce_with_logits(float* dx, const float* x, const float* y, int64_t n, float scale);

}  // namespace mpicnn::detect
