// torchvision ResNets. Block backward, with the residual gradient reused for both branches:
//   g_out = relu'(out) * dout                      (the gradient of bn_last's output and of
//   main: bn_k, conv_k, relu_{k-1}, ... conv_1     the identity branch alike)
//   din = main + (downsample ? downsample'(g_out) : g_out)
#include "models/resnet.h"

#include <algorithm>

#include "core/mutant.h"
#include "layers/adaptive_avgpool2d.h"
#include "layers/flatten.h"
#include "layers/linear.h"
#include "layers/maxpool2d.h"
#include "layers/plan_mode.h"
#include "models/init.h"
#include "models/registry.h"

namespace mpicnn {

ResidualBlock::ResidualBlock(int in_channels, int width, int stride, bool bottleneck) {
  auto conv = [](int in, int out, int k, int s) {
    return leaf<Conv2d>(Conv2dOptions{.in_channels = in, .out_channels = out, .kernel = k,
                                      .stride = s, .padding = k / 2, .bias = false});
  };
  if (bottleneck) {
    convs_.push_back(conv(in_channels, width, 1, 1));
    convs_.push_back(conv(width, width, 3, stride));  // stride on the 3x3, as torchvision
    convs_.push_back(conv(width, width * 4, 1, 1));
    out_channels_ = width * 4;
  } else {
    convs_.push_back(conv(in_channels, width, 3, stride));
    convs_.push_back(conv(width, width, 3, 1));
    out_channels_ = width;
  }
  for (auto& c : convs_) bns_.push_back(leaf<BatchNorm2d>(c->layer.options().out_channels));
  for (size_t i = 0; i + 1 < convs_.size(); ++i) {
    relus_.push_back(leaf<ReLU>());
    relus_.back()->in_place();
  }
  if (stride != 1 || in_channels != out_channels_) {
    downsample_ = std::make_unique<Sequential>();
    downsample_->set_overwrites_dout(true);  // its BatchNorm's gradient over g_out: see backward
    downsample_conv_ = &downsample_->add(conv(in_channels, out_channels_, 1, stride));
    downsample_->add(leaf<BatchNorm2d>(out_channels_));
  }
}

void ResidualBlock::register_state(ParamStore& store, const std::string& prefix) {
  for (size_t i = 0; i < convs_.size(); ++i) {
    const std::string k = std::to_string(i + 1);
    convs_[i]->register_state(store, prefix + "conv" + k + ".");
    bns_[i]->register_state(store, prefix + "bn" + k + ".");
  }
  if (downsample_) downsample_->register_state(store, prefix + "downsample.");
  relu_name_ = prefix + "relu.";
  for (auto& r : relus_) r->register_state(store, relu_name_);
}

void ResidualBlock::for_each_layer(const std::function<void(Layer&, const std::string&)>& fn) {
  for (size_t i = 0; i < convs_.size(); ++i) {
    convs_[i]->for_each_layer(fn);
    bns_[i]->for_each_layer(fn);
  }
  if (downsample_) downsample_->for_each_layer(fn);
}

void ResidualBlock::set_training(bool training) {
  for (auto& b : bns_) b->set_training(training);
  if (downsample_) downsample_->set_training(training);
  training_ = training;
  if (!training)
    for (FoldedConv& f : folds_) f.refresh();  // the folded copies follow the weights as they are
}

Shape ResidualBlock::plan(const Shape& in, const ExecConfig& cfg) {
  in_shape_ = in;
  fused_ = cfg.fusion;
  for (size_t i = 0; i + 1 < bns_.size(); ++i) bns_[i]->layer.set_fused_relu(fused_);
  // Output slots of an inference plan (-1: own buffers); see kFwdA.
  const bool inference = cfg.inference;
  const int out_slot = inference ? kFwdOut0 + plan_mode::next_parity() : -1;
  const size_t last = convs_.size() - 1;
  for (size_t i = 0; i <= last; ++i) {
    const int slot = i == 0 ? kFwdA : i < last ? kFwdB : out_slot;
    convs_[i]->output_to_scratch(inference ? slot : -1);
  }
  // The downsample's output is the residual, read once by bn_last's forward. Its BatchNorm,
  // in place over the convolution's output when it keeps a bf16 input (plan_after_conv),
  // reads only that copy in backward: then a training plan shares the slot too.
  const bool ds_scratch = inference || bf16_batchnorm_sharing(cfg);
  if (downsample_conv_) downsample_conv_->output_to_scratch(ds_scratch ? kFwdA : -1);
  Shape s = in;
  int64_t max_out = 0, max_mid_in = 0;
  for (size_t i = 0; i < convs_.size(); ++i) {
    if (i > 0) max_mid_in = std::max(max_mid_in, block_scratch::floats_for(s, cfg));
    s = convs_[i]->plan(s, cfg);
    max_out = std::max(max_out, block_scratch::floats_for(s, cfg));
    plan_after_conv(*bns_[i], cfg);  // bn_i alone reads conv_i's output
    s = bns_[i]->plan(s, cfg);
    if (i + 1 < convs_.size()) relus_[i]->plan(s, cfg);
  }
  folds_.clear();
  if (cfg.folds()) {
    folds_.resize(convs_.size());
    for (size_t i = 0; i < convs_.size(); ++i) {
      folds_[i].plan(convs_[i]->layer, bns_[i]->layer);
      if (!training_) folds_[i].refresh();
    }
  }
  if (downsample_) {
    const Shape d = downsample_->plan(in, cfg);
    CHECK(d == s, "residual block: downsample gives ", d.str(), ", main branch ", s.str());
  } else {
    CHECK(in == s, "residual block: identity ", in.str(), " does not match ", s.str());
  }
  // Gradient buffers: the output's, conv outputs' (and the input's from the downsample, once
  // the main branch is done with A), mid inputs'.
  const int64_t need[kGradSlots] = {
      block_scratch::floats_for(s, cfg),
      std::max(max_out, downsample_ ? block_scratch::floats_for(in, cfg) : 1),
      std::max<int64_t>(max_mid_in, 1)};
  for (int k = 0; k < kGradSlots; ++k) grads_[k].plan(k, need[k], cfg);  // slot k: every block's
  return s;
}

Tensor ResidualBlock::grad_buffer(int slot, Shape shape) const {
  shape.d[0] = out_.size(0);
  return grads_[slot].view(shape);
}

const Tensor& ResidualBlock::forward(const Tensor& in) {
  folded_ran_ = !training_ && !folds_.empty();
  if (folded_ran_) return forward_folded(in);
  in_ = in;
  const Tensor* x = &in;
  const size_t last = convs_.size() - 1;
  for (size_t i = 0; i < last; ++i) {
    x = &bns_[i]->forward(convs_[i]->forward(*x));
    if (!fused_) x = &relus_[i]->forward(*x);
  }
  const Tensor& c = convs_[last]->forward(*x);
  const Tensor& residual = downsample_ ? downsample_->forward(in) : in;
  if (fused_) {
    out_ = bns_[last]->forward_with(c, residual);  // relu(bn(c) + residual)
    return out_;
  }
  bns_[last]->forward(c);
  Tensor& sum = bns_[last]->output();
  profile::Scope timed(relu_name_, out_relu_.kind());
  accumulate(sum, residual);
  out_relu_.forward(sum, sum);
  out_ = sum;
  return out_;
}

// relu(conv_i(x, w'_i) + b'_i) for i < last, then relu(conv_last(x, w') + b' + residual): the
// unfolded forward's values, each convolution with its BatchNorm, add and ReLU in one call.
const Tensor& ResidualBlock::forward_folded(const Tensor& in) {
  in_ = in;
  const size_t last = convs_.size() - 1;
  auto fold = [&](size_t i, const Tensor& x, const Tensor* residual) -> const Tensor& {
    return convs_[i]->forward_by(
        x, "FoldedConv", [&](Tensor& out) { folds_[i].forward(out, x, residual, true); });
  };
  const Tensor* x = &in;
  for (size_t i = 0; i < last; ++i) x = &fold(i, *x, nullptr);
  const Tensor& residual = downsample_ ? downsample_->forward(in) : in;
  out_ = fold(last, *x, &residual);
  return out_;
}

void ResidualBlock::backward(Tensor& din, const Tensor& dout) {
  CHECK(!folded_ran_, "residual block: backward after a folded eval-mode forward "
        "(MPICNN_GPU_FOLD): its BatchNorm layers did not run");
  Tensor g_out = grad_buffer(kGradOut, out_.shape());
  {
    profile::Scope timed(relu_name_, out_relu_.kind(), /*backward=*/true);
    out_relu_.backward(g_out, dout, out_, out_);
  }
  const Tensor* g = &g_out;
  Tensor ga, gb;
  for (size_t i = convs_.size(); i-- > 0;) {
    ga = grad_buffer(kGradA, bns_[i]->output().shape());  // conv_i's output shape
    bns_[i]->backward(ga, *g);
    if (i == 0) {
      convs_[0]->backward(din, ga);
      break;
    }
    gb = grad_buffer(kGradB, bns_[i - 1]->output().shape());
    convs_[i]->backward(gb, ga);
    if (!fused_) relus_[i - 1]->backward(gb, gb);  // fused: bn_{i-1}'s backward masks
    g = &gb;
  }
  if (!din.defined()) {
    Tensor none;
    if (downsample_) downsample_->backward_over(none, g_out);
    return;
  }
  if (downsample_) {
    Tensor gi = grad_buffer(kGradA, in_.shape());  // the main branch is done with A
    downsample_->backward_over(gi, g_out);  // the last reader of g_out: may overwrite it
    accumulate(din, gi);
  } else if constexpr (!MUTANT(8)) {
    accumulate(din, g_out);
  }
}

void init_resnet(Model& model, uint64_t seed) {
  model.root().for_each_layer([seed](Layer& l, const std::string& prefix) {
    if (auto* c = dynamic_cast<Conv2d*>(&l))
      init::kaiming_normal_relu(c->weight, seed, prefix + "weight", /*fan_out_mode=*/true);
    else
      l.reset_parameters(seed);  // BatchNorm: 1/0; Linear: nn.Linear's default
  });
}

std::vector<std::pair<std::string, std::unique_ptr<Module>>> make_resnet_trunk(
    const std::string& name, int in_channels, std::vector<int>* stage_channels) {
  std::vector<int> blocks;
  bool bottleneck = false;
  if (name == "resnet18") blocks = {2, 2, 2, 2};
  else if (name == "resnet34") blocks = {3, 4, 6, 3};
  else if (name == "resnet50") blocks = {3, 4, 6, 3}, bottleneck = true;
  else FAIL("unknown ResNet '", name, "' (resnet18, resnet34, resnet50)");

  std::vector<std::pair<std::string, std::unique_ptr<Module>>> trunk;
  trunk.emplace_back("conv1", leaf<Conv2d>(Conv2dOptions{.in_channels = in_channels,
                                                         .out_channels = 64, .kernel = 7,
                                                         .stride = 2, .padding = 3,
                                                         .bias = false}));
  trunk.emplace_back("bn1", leaf<BatchNorm2d>(64));
  auto relu = leaf<ReLU>();
  relu->in_place();
  trunk.emplace_back("relu", std::move(relu));
  trunk.emplace_back("maxpool", leaf<MaxPool2d>(3, 2, 1));
  int in = 64;
  const int widths[] = {64, 128, 256, 512};
  if (stage_channels) stage_channels->clear();
  for (int stage = 0; stage < 4; ++stage) {
    auto layer = std::make_unique<Sequential>();
    for (int b = 0; b < blocks[size_t(stage)]; ++b) {
      auto& block = layer->add(std::make_unique<ResidualBlock>(
          in, widths[stage], (b == 0 && stage > 0) ? 2 : 1, bottleneck));
      in = block.out_channels();
    }
    if (stage_channels) stage_channels->push_back(in);
    trunk.emplace_back("layer" + std::to_string(stage + 1), std::move(layer));
  }
  return trunk;
}

std::unique_ptr<Model> make_resnet(const std::string& name, const ModelOptions& options,
                                   uint64_t seed) {
  std::vector<int> channels;
  auto root = std::make_unique<Sequential>();
  for (auto& [child, module] : make_resnet_trunk(name, options.in_channels, &channels))
    root->add(child, std::move(module));
  const int in = channels.back();
  root->add("avgpool", leaf<AdaptiveAvgPool2d>(1, 1));
  root->add("flatten", leaf<Flatten>());
  root->add("fc", leaf<Linear>(in, options.num_classes));
  auto model = std::make_unique<Model>(name, std::move(root), options, init_resnet, seed);
  model->set_head({"fc"});
  return model;
}

}  // namespace mpicnn
