// Region proposals and their training targets. The head's outputs stay in its (N, A, H, W)
// layout; locate() maps torchvision's flat anchor order (image, level, y, x, anchor) onto it,
// so nothing is permuted or copied: the top-n selection reads objectness in place and only the
// chosen anchors are decoded (torchvision decodes every anchor, then selects; decoding is per
// anchor, so the boxes are the same).
#include "detect/rpn.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/check.h"

namespace mpicnn::detect {

Rpn::Rpn(const RpnOptions& options, AnchorGenerator anchors)
    : opt_(options), generator_(std::move(anchors)) {}

const std::vector<float>& Rpn::anchors(const std::vector<RpnLevel>& levels, Size2 padded) {
  CHECK(int64_t(levels.size()) == generator_.num_levels(), "Rpn: ", levels.size(),
        " feature levels for an anchor generator of ", generator_.num_levels());
  std::vector<std::array<int64_t, 2>> grids;
  for (const RpnLevel& l : levels) grids.push_back({l.H, l.W});
  if (grids != anchor_grids_ || padded.h != anchor_padded_.h || padded.w != anchor_padded_.w) {
    const std::vector<int64_t> per_cell = generator_.num_anchors_per_location();
    level_begin_.assign(1, 0);
    for (size_t l = 0; l < levels.size(); ++l) {
      CHECK(levels[l].A == per_cell[l], "Rpn: level ", l, " has ", levels[l].A,
            " anchors per position, the generator ", per_cell[l]);
      level_begin_.push_back(level_begin_.back() + levels[l].A * levels[l].H * levels[l].W);
    }
    anchors_ = generator_.grid_anchors(grids, padded.h, padded.w);
    anchor_grids_ = grids;
    anchor_padded_ = padded;
  }
  return anchors_;
}

Rpn::Where Rpn::locate(const std::vector<RpnLevel>& levels, int64_t n, int64_t i) const {
  const int l = int(std::upper_bound(level_begin_.begin(), level_begin_.end(), i) -
                    level_begin_.begin()) - 1;
  const RpnLevel& v = levels[size_t(l)];
  const int64_t k = i - level_begin_[size_t(l)];  // (y * W + x) * A + a
  const int64_t a = k % v.A, pix = k / v.A, plane = v.H * v.W;
  return {l, (n * v.A + a) * plane + pix, (n * 4 * v.A + 4 * a) * plane + pix, plane};
}

void Rpn::propose(std::vector<std::vector<float>>& proposals, const std::vector<RpnLevel>& levels,
                  int64_t N, const std::vector<Size2>& image_sizes, Size2 padded, bool training) {
  CHECK(int64_t(image_sizes.size()) == N, "Rpn: ", image_sizes.size(), " image sizes for ", N,
        " images");
  const std::vector<float>& anchors = this->anchors(levels, padded);
  const int64_t pre = training ? opt_.pre_nms_top_n_train : opt_.pre_nms_top_n_test;
  const int64_t post = training ? opt_.post_nms_top_n_train : opt_.post_nms_top_n_test;
  proposals.assign(size_t(N), {});
  std::vector<int64_t> order, keep, small_keep;
  std::vector<float> boxes, scores, kept_boxes, kept_scores;
  std::vector<int64_t> lvl, kept_lvl;
  for (int64_t n = 0; n < N; ++n) {
    boxes.clear(), scores.clear(), lvl.clear();
    for (size_t l = 0; l < levels.size(); ++l) {
      // torch.topk(sorted=True) of the level's objectness: by decreasing logit, ties by index.
      const int64_t begin = level_begin_[l], count = level_begin_[l + 1] - begin;
      const int64_t k = std::min(pre, count);
      std::vector<float> logit(static_cast<size_t>(count));
      for (int64_t i = 0; i < count; ++i)
        logit[size_t(i)] = levels[l].objectness[locate(levels, n, begin + i).obj];
      order.resize(size_t(count));
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t a, int64_t b) {
        return logit[size_t(a)] > logit[size_t(b)] || (logit[size_t(a)] == logit[size_t(b)] && a < b);
      });
      for (int64_t j = 0; j < k; ++j) {
        const int64_t i = begin + order[size_t(j)];
        const Where w = locate(levels, n, i);
        const float* d = levels[l].deltas + w.delta;
        const float delta[4] = {d[0], d[w.plane], d[2 * w.plane], d[3 * w.plane]};
        float box[4];
        coder_.decode(box, delta, anchors.data() + 4 * i, 1, 1);
        boxes.insert(boxes.end(), box, box + 4);
        scores.push_back(1.f / (1.f + std::exp(-logit[size_t(order[size_t(j)])])));
        lvl.push_back(int64_t(l));
      }
    }
    const int64_t m = int64_t(scores.size());
    clip_boxes_to_image(boxes.data(), m, image_sizes[size_t(n)].h, image_sizes[size_t(n)].w);
    remove_small_boxes(small_keep, boxes.data(), m, opt_.min_size);
    kept_boxes.clear(), kept_scores.clear(), kept_lvl.clear();
    for (int64_t i : small_keep)
      if (scores[size_t(i)] >= opt_.score_thresh) {
        kept_boxes.insert(kept_boxes.end(), boxes.begin() + 4 * i, boxes.begin() + 4 * i + 4);
        kept_scores.push_back(scores[size_t(i)]);
        kept_lvl.push_back(lvl[size_t(i)]);
      }
    batched_nms(keep, kept_boxes.data(), kept_scores.data(), kept_lvl.data(),
                int64_t(kept_scores.size()), opt_.nms_thresh);
    if (int64_t(keep.size()) > post) keep.resize(size_t(post));
    std::vector<float>& out = proposals[size_t(n)];
    for (int64_t i : keep) out.insert(out.end(), kept_boxes.begin() + 4 * i, kept_boxes.begin() + 4 * i + 4);
  }
}

RpnLosses Rpn::loss(std::vector<float*>& dobjectness, std::vector<float*>& ddeltas,
                    const std::vector<RpnLevel>& levels, int64_t N,
                    const std::vector<std::vector<float>>& gt, Size2 padded, float w_objectness,
                    float w_box, SampleRule rule, uint64_t seed, uint64_t stream_base) {
  CHECK(int64_t(gt.size()) == N, "Rpn::loss: ", gt.size(), " target lists for ", N, " images");
  CHECK(dobjectness.size() == levels.size() && ddeltas.size() == levels.size(),
        "Rpn::loss: one gradient buffer per level expected");
  const std::vector<float>& anchors = this->anchors(levels, padded);
  const int64_t total = level_begin_.back();
  for (size_t l = 0; l < levels.size(); ++l) {
    const int64_t size = N * levels[l].A * levels[l].H * levels[l].W;
    std::fill(dobjectness[l], dobjectness[l] + size, 0.f);
    std::fill(ddeltas[l], ddeltas[l] + 4 * size, 0.f);
  }
  const Matcher matcher{opt_.fg_iou_thresh, opt_.bg_iou_thresh, true};
  const Sampler sampler{opt_.batch_size_per_image, opt_.positive_fraction};
  // Per image: the sampled anchors and, for positives, their regression targets.
  std::vector<std::vector<int64_t>> pos(static_cast<size_t>(N)), neg(static_cast<size_t>(N));
  std::vector<std::vector<float>> targets(static_cast<size_t>(N));
  std::vector<float> iou;
  std::vector<int64_t> matches, labels(static_cast<size_t>(total));
  int64_t sampled = 0;
  for (int64_t n = 0; n < N; ++n) {
    const std::vector<float>& g = gt[size_t(n)];
    const int64_t m = int64_t(g.size() / 4);
    if (m == 0) {
      std::fill(labels.begin(), labels.end(), 0);  // every anchor is background
    } else {
      iou.resize(size_t(m * total));
      box_iou(iou.data(), g.data(), m, anchors.data(), total);
      matcher.match(matches, iou.data(), m, total);
      for (int64_t i = 0; i < total; ++i)
        labels[size_t(i)] = matches[size_t(i)] >= 0 ? 1 : matches[size_t(i)] == Matcher::kBelowLow ? 0 : -1;
    }
    sampler.sample(pos[size_t(n)], neg[size_t(n)], labels.data(), total, rule,
                   Rng(seed, stream_base + uint64_t(n)));
    sampled += int64_t(pos[size_t(n)].size() + neg[size_t(n)].size());
    std::vector<float>& t = targets[size_t(n)];
    t.resize(4 * pos[size_t(n)].size());
    for (size_t j = 0; j < pos[size_t(n)].size(); ++j) {
      const int64_t i = pos[size_t(n)][j];
      coder_.encode(t.data() + 4 * j, g.data() + 4 * matches[size_t(i)], anchors.data() + 4 * i, 1);
    }
  }
  RpnLosses losses;
  if (sampled == 0) return losses;
  const float inv = 1.f / float(sampled);
  for (int64_t n = 0; n < N; ++n) {
    for (int positive = 1; positive >= 0; --positive)
      for (int64_t i : positive ? pos[size_t(n)] : neg[size_t(n)]) {
        const Where w = locate(levels, n, i);
        const float x = levels[size_t(w.level)].objectness[w.obj], y = float(positive);
        losses.objectness += bce_with_logits(dobjectness[size_t(w.level)] + w.obj, &x, &y, 1,
                                             w_objectness * inv);
      }
    for (size_t j = 0; j < pos[size_t(n)].size(); ++j) {
      const Where w = locate(levels, n, pos[size_t(n)][j]);
      const float* d = levels[size_t(w.level)].deltas + w.delta;
      float* dd = ddeltas[size_t(w.level)] + w.delta;
      for (int c = 0; c < 4; ++c)
        losses.box_reg += smooth_l1(dd + c * w.plane, d + c * w.plane,
                                    targets[size_t(n)].data() + 4 * j + c, 1, 1.f / 9.f, w_box * inv);
    }
  }
  losses.objectness *= double(inv);
  losses.box_reg *= double(inv);
  return losses;
}

}  // namespace mpicnn::detect
