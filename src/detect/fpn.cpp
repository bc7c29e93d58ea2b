// ResNet + FPN backbone (torchvision's BackboneWithFPN over IntermediateLayerGetter). Top-down:
//   inner_3 = lateral_3(c_3);  inner_i = lateral_i(c_i) + nearest_up(inner_{i+1})
//   level_i = output_i(inner_i);  level "pool" = max_pool2d(level_3, 1, 2)
// so the gradient of inner_i collects output_i's and (through the upsampling's adjoint) the
// gradient of inner_{i-1}: backward walks the levels from the finest up, then the body down.
#include "detect/fpn.h"

#include <cmath>

#include "core/check.h"
#include "layers/add.h"
#include "layers/batchnorm.h"
#include "layers/relu.h"
#include "models/init.h"
#include "models/resnet.h"

namespace mpicnn::detect {

namespace {

// PyTorch's nearest source index (aten/src/ATen/native/UpSample.h, nearest_idx): exact halving
// for a 2x size, else floor(out_index * (float)in / out), clamped.
int64_t nearest_source(int64_t o, int64_t in_size, int64_t out_size) {
  if (out_size == in_size) return o;
  if (out_size == 2 * in_size) return o >> 1;
  const float scale = float(in_size) / float(out_size);
  return std::min(int64_t(std::floor(float(o) * scale)), in_size - 1);
}

std::vector<int64_t> source_index(int64_t in_size, int64_t out_size) {
  std::vector<int64_t> idx(static_cast<size_t>(out_size));
  for (int64_t o = 0; o < out_size; ++o) idx[size_t(o)] = nearest_source(o, in_size, out_size);
  return idx;
}

}  // namespace

void upsample_nearest(Tensor& out, const Tensor& in, bool accumulate) {
  CHECK(out.dim() == 4 && in.dim() == 4 && out.size(0) == in.size(0) && out.size(1) == in.size(1),
        "upsample_nearest: ", in.shape().str(), " -> ", out.shape().str());
  const int64_t planes = in.size(0) * in.size(1), H = in.size(2), W = in.size(3);
  const int64_t OH = out.size(2), OW = out.size(3);
  const std::vector<int64_t> sy = source_index(H, OH), sx = source_index(W, OW);
  const real* x = in.data();
  real* y = out.data();
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t oh = 0; oh < OH; ++oh) {
      const real* src = x + (p * H + sy[size_t(oh)]) * W;
      real* dst = y + (p * OH + oh) * OW;
      if (accumulate)
        for (int64_t ow = 0; ow < OW; ++ow) dst[ow] += src[sx[size_t(ow)]];
      else
        for (int64_t ow = 0; ow < OW; ++ow) dst[ow] = src[sx[size_t(ow)]];
    }
}

void upsample_nearest_backward(Tensor& din, const Tensor& dout) {
  CHECK(din.dim() == 4 && dout.dim() == 4 && din.size(0) == dout.size(0) &&
            din.size(1) == dout.size(1),
        "upsample_nearest_backward: ", dout.shape().str(), " -> ", din.shape().str());
  const int64_t planes = din.size(0) * din.size(1), H = din.size(2), W = din.size(3);
  const int64_t OH = dout.size(2), OW = dout.size(3);
  const std::vector<int64_t> sy = source_index(H, OH), sx = source_index(W, OW);
  const real* g = dout.data();
  real* d = din.data();
  // Each plane is one thread's: the sums run in output order, the same for any thread count.
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t oh = 0; oh < OH; ++oh) {
      real* dst = d + (p * H + sy[size_t(oh)]) * W;
      const real* src = g + (p * OH + oh) * OW;
      for (int64_t ow = 0; ow < OW; ++ow) dst[sx[size_t(ow)]] += src[ow];
    }
}

ResNetFpn::ResNetFpn(const std::string& body, int trainable_layers, int out_channels, bool frozen_batchnorm)
    : trainable_layers_(trainable_layers), frozen_batchnorm_(frozen_batchnorm), out_channels_(out_channels) {
  CHECK(trainable_layers >= 0 && trainable_layers <= 5, "trainable_layers must be 0..5, got ",
        trainable_layers);
  std::vector<int> channels;
  stem_ = std::make_unique<Sequential>();
  for (auto& [name, module] : make_resnet_trunk(body, 3, &channels)) {
    if (name.starts_with("layer")) {
      stages_.emplace_back(static_cast<Sequential*>(module.release()));
      continue;
    }
    stem_->add(name, std::move(module));
  }
  for (int c : channels) {
    inner_.push_back(leaf<Conv2d>(
        Conv2dOptions{.in_channels = c, .out_channels = out_channels, .kernel = 1}));
    outer_.push_back(leaf<Conv2d>(Conv2dOptions{.in_channels = out_channels,
                                                .out_channels = out_channels, .kernel = 3,
                                                .padding = 1}));
  }
  pool_ = leaf<MaxPool2d>(1, 2, 0);
  if (frozen_batchnorm)
    for_each_layer([](Layer& l, const std::string&) {
      if (auto* bn = dynamic_cast<BatchNorm2d*>(&l)) bn->set_frozen_batchnorm();
    });
}

void ResNetFpn::register_state(ParamStore& store, const std::string& prefix) {
  prefix_ = prefix;
  stem_->register_state(store, prefix + "body.");
  for (size_t s = 0; s < stages_.size(); ++s)
    stages_[s]->register_state(store, prefix + "body.layer" + std::to_string(s + 1) + ".");
  for (size_t s = 0; s < inner_.size(); ++s)
    inner_[s]->register_state(store, prefix + "fpn.inner_blocks." + std::to_string(s) + ".0.");
  for (size_t s = 0; s < outer_.size(); ++s)
    outer_[s]->register_state(store, prefix + "fpn.layer_blocks." + std::to_string(s) + ".0.");
}

void ResNetFpn::for_each_layer(const std::function<void(Layer&, const std::string&)>& fn) {
  stem_->for_each_layer(fn);
  for (auto& s : stages_) s->for_each_layer(fn);
  for (auto& c : inner_) c->for_each_layer(fn);
  for (auto& c : outer_) c->for_each_layer(fn);
  pool_->for_each_layer(fn);
}

void ResNetFpn::freeze(ParamStore& store) {
  // torchvision: layers_to_train = ["layer4", "layer3", "layer2", "layer1", "conv1"][:n]; bn1
  // trains only with all five, and FrozenBatchNorm2d's affine parameters never do.
  std::vector<std::string> trained;
  const char* order[] = {"layer4.", "layer3.", "layer2.", "layer1.", "conv1."};
  for (int i = 0; i < trainable_layers_; ++i) trained.push_back(prefix_ + "body." + order[i]);
  if (trainable_layers_ == 5) trained.push_back(prefix_ + "body.bn1.");
  std::vector<std::string> frozen_layers;
  for_each_layer([&](Layer& l, const std::string& name) {
    bool frozen = frozen_batchnorm_ && dynamic_cast<BatchNorm2d*>(&l) != nullptr;
    if (name.rfind(prefix_ + "body.", 0) == 0) {
      bool train = false;
      for (const std::string& t : trained) train = train || name.rfind(t, 0) == 0;
      frozen = frozen || !train;
    }
    if (frozen) frozen_layers.push_back(name);
  });
  const std::vector<StateEntry>& entries = store.entries();
  for (size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].kind != StateKind::Param) continue;
    const std::string& n = entries[i].name;
    for (const std::string& f : frozen_layers)
      if (n.rfind(f, 0) == 0 && n.find('.', f.size()) == std::string::npos) store.set_frozen(i, true);
  }
  for_each_layer([&](Layer& l, const std::string& name) {
    bool frozen = false;
    for (const std::string& f : frozen_layers) frozen = frozen || f == name;
    l.set_param_state(true, frozen);
  });
}

void ResNetFpn::init(uint64_t seed) {
  auto body = [seed](Layer& l, const std::string& name) {
    if (auto* c = dynamic_cast<Conv2d*>(&l))
      init::kaiming_normal_relu(c->weight, seed, name + "weight", /*fan_out_mode=*/true);
    else
      l.reset_parameters(seed);
  };
  stem_->for_each_layer(body);
  for (auto& s : stages_) s->for_each_layer(body);
  auto fpn = [seed](Layer& l, const std::string& name) {
    auto& c = dynamic_cast<Conv2d&>(l);
    const real bound = real(std::sqrt(3.0 / double(init::fan_in(c.weight))));  // kaiming a=1
    init::uniform(c.weight, seed, name + "weight", -bound, bound);
    init::constant(c.bias, 0);
  };
  for (auto& c : inner_) c->for_each_layer(fpn);
  for (auto& c : outer_) c->for_each_layer(fpn);
}

void ResNetFpn::set_training(bool training) {
  stem_->set_training(training);
  for (auto& s : stages_) s->set_training(training);
  for (auto& c : inner_) c->set_training(training);
  for (auto& c : outer_) c->set_training(training);
  pool_->set_training(training);
}

std::vector<Shape> ResNetFpn::plan(const Shape& in, const ExecConfig& cfg) {
  CHECK(in.ndim == 4 && in[1] == 3, "ResNetFpn: input must be (N, 3, H, W), got ", in.str());
  Shape s = stem_->plan(in, cfg);
  std::vector<Shape> levels;
  dmerged_.clear();
  dc_.clear();
  dx_.clear();
  for (size_t i = 0; i < stages_.size(); ++i) {
    dx_.push_back(Tensor::empty(s));
    s = stages_[i]->plan(s, cfg);
    dc_.push_back(Tensor::empty(s));
    const Shape lateral = inner_[i]->plan(s, cfg);
    dmerged_.push_back(Tensor::empty(lateral));
    levels.push_back(outer_[i]->plan(lateral, cfg));
  }
  dlast_ = Tensor::empty(levels.back());
  levels.push_back(pool_->plan(levels.back(), cfg));
  return levels;
}

const std::vector<Tensor>& ResNetFpn::forward(const Tensor& in) {
  in_ = in;
  c_.clear();
  const Tensor* x = &stem_->forward(in);
  for (auto& s : stages_) {
    x = &s->forward(*x);
    c_.push_back(*x);
  }
  const size_t L = stages_.size();
  levels_.assign(kLevels, Tensor());
  // Each lateral conv's output becomes its merged map in place (a convolution's backward reads
  // only its input), coarsest first, as torchvision.
  inner_[L - 1]->forward(c_[L - 1]);
  levels_[L - 1] = outer_[L - 1]->forward(inner_[L - 1]->output());
  for (size_t i = L - 1; i-- > 0;) {
    inner_[i]->forward(c_[i]);
    upsample_nearest(inner_[i]->output(), inner_[i + 1]->output(), /*accumulate=*/true);
    levels_[i] = outer_[i]->forward(inner_[i]->output());
  }
  levels_[L] = pool_->forward(levels_[L - 1]);
  return levels_;
}

void ResNetFpn::backward(Tensor& din, const std::vector<Tensor>& dlevels) {
  CHECK(dlevels.size() == size_t(kLevels), "ResNetFpn::backward: ", dlevels.size(),
        " level gradients, expected ", int(kLevels));
  const size_t L = stages_.size();
  const int64_t n = in_.size(0);
  // Level "3" gets the pool's gradient too.
  Tensor dlast = dlast_.slice0(0, n);
  pool_->backward(dlast, dlevels[L]);
  accumulate(dlast, dlevels[L - 1]);
  // Merged maps, finest first: dmerged_i = output_i'(dlevel_i) + up'(dmerged_{i-1}).
  for (size_t i = 0; i < L; ++i) {
    Tensor dm = dmerged_[i].slice0(0, n);
    outer_[i]->backward(dm, i + 1 == L ? dlast : dlevels[i]);
    if (i > 0) upsample_nearest_backward(dm, dmerged_[i - 1].slice0(0, n));
  }
  // The body, coarsest first: a stage's output gradient is its lateral conv's plus the next
  // stage's input gradient (dx_[i + 1]). Body stages below the lowest trainable one are
  // skipped unless the caller wants din (stage s = 1..4 is layer s, 0 the stem).
  const int lowest = din.defined() ? 0 : 5 - trainable_layers_;
  for (size_t i = L; i-- > 0;) {
    const int s = int(i) + 1;
    const bool stage = s >= lowest;  // the lateral conv's weights train either way
    Tensor dc = stage ? dc_[i].slice0(0, n) : Tensor();
    inner_[i]->backward(dc, dmerged_[i].slice0(0, n));
    if (!stage) continue;
    if (i + 1 < L) accumulate(dc, dx_[i + 1].slice0(0, n));
    Tensor dx = s > lowest ? dx_[i].slice0(0, n) : Tensor();
    stages_[i]->backward(dx, dc);
  }
  if (lowest == 0) stem_->backward(din, dx_[0].slice0(0, n));
}

}  // namespace mpicnn::detect
