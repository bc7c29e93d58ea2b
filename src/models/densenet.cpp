// torchvision DenseNet-121: features (conv0 7x7/2, norm0, relu0, pool0 3/2, four dense blocks
// with transitions between them (norm, relu, conv1x1 halving the channels, avgpool 2/2),
// norm5) -> ReLU -> AdaptiveAvgPool2d(1) -> flatten -> classifier (Linear).
#include "models/densenet.h"

#include <climits>
#include <cstring>

#include "core/blas.h"
#include "core/gpu.h"
#include "core/profile.h"
#include "layers/adaptive_avgpool2d.h"
#include "layers/avgpool2d.h"
#include "layers/flatten.h"
#include "layers/linear.h"
#include "layers/maxpool2d.h"
#include "models/init.h"

namespace mpicnn {

namespace {

// dst (B, A, HW) = src (A, B, HW) with the first two axes swapped: NCHW <-> channel-major.
// `device` is where both live.
void swap01(Device device, real* dst, const real* src, int64_t A, int64_t B, int64_t HW) {
  if (device == Device::CUDA) return gpu::backend().swap01(dst, src, A, B, HW);
#pragma omp parallel for collapse(2) schedule(static) if (A * B * HW > 32768)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t a = 0; a < A; ++a)
      std::memcpy(dst + (b * A + a) * HW, src + (a * B + b) * HW, size_t(HW) * sizeof(real));
}

}  // namespace

// One torchvision _DenseLayer. norm1, relu1 and conv1 act on the block's channel-major
// features, so they are bare layers (conv1 only holds the weight; its 1x1 convolution is a
// GEMM); norm2, relu2 and conv2 are ordinary NCHW leaves.
struct DenseBlock::DenseLayer {
  DenseLayer(int in_channels, int growth, int bottleneck)
      : in_channels(in_channels),
        norm1(in_channels),
        conv1(Conv2dOptions{.in_channels = in_channels, .out_channels = bottleneck,
                            .kernel = 1, .bias = false}),
        norm2(bottleneck),
        conv2(Conv2dOptions{.in_channels = bottleneck, .out_channels = growth, .kernel = 3,
                            .padding = 1, .bias = false}) {
    relu2.in_place();
  }

  int in_channels;
  std::string norm1_name, relu1_name, conv1_name;  // full prefixes of the bare layers
  BatchNorm2d norm1;
  ReLU relu1;
  Conv2d conv1;
  Leaf<BatchNorm2d> norm2;
  Leaf<ReLU> relu2;
  Leaf<Conv2d> conv2;
  Tensor a1;  // (in_channels, N, H*W): relu1(norm1(features)), conv1's input (one for all
              // layers in inference and CPU training plans)
  Tensor c1;  // (N, bottleneck, H, W): conv1's output, norm2's input
};

DenseBlock::DenseBlock(int num_layers, int in_channels, int growth, int bn_size)
    : in_channels_(in_channels), growth_(growth), bottleneck_(bn_size * growth) {
  CHECK(num_layers >= 1 && in_channels >= 1 && growth >= 1 && bn_size >= 1,
        "DenseBlock: layers, channels, growth and bn_size must be >= 1");
  for (int i = 0; i < num_layers; ++i)
    layers_.push_back(std::make_unique<DenseLayer>(in_channels + i * growth, growth, bottleneck_));
  out_channels_ = in_channels + num_layers * growth;
}

DenseBlock::~DenseBlock() = default;

void DenseBlock::register_state(ParamStore& store, const std::string& prefix) {
  for (size_t i = 0; i < layers_.size(); ++i) {
    DenseLayer& l = *layers_[i];
    const std::string p = prefix + "denselayer" + std::to_string(i + 1) + ".";
    l.norm1_name = p + "norm1.", l.relu1_name = p + "relu1.", l.conv1_name = p + "conv1.";
    l.norm1.register_state(store, l.norm1_name);
    l.conv1.register_state(store, l.conv1_name);
    l.norm2.register_state(store, p + "norm2.");
    l.relu2.register_state(store, p + "relu2.");
    l.conv2.register_state(store, p + "conv2.");
  }
}

void DenseBlock::for_each_layer(const std::function<void(Layer&, const std::string&)>& fn) {
  for (auto& lp : layers_) {
    DenseLayer& l = *lp;
    fn(l.norm1, l.norm1_name);
    fn(l.relu1, l.relu1_name);
    fn(l.conv1, l.conv1_name);
    l.norm2.for_each_layer(fn);
    l.relu2.for_each_layer(fn);
    l.conv2.for_each_layer(fn);
  }
}

void DenseBlock::set_training(bool training) {
  for (auto& l : layers_) {
    l->norm1.set_training(training);
    l->relu1.set_training(training);
    l->conv1.set_training(training);
    l->norm2.set_training(training);
    l->relu2.set_training(training);
    l->conv2.set_training(training);
  }
}

Shape DenseBlock::plan(const Shape& in, const ExecConfig& cfg) {
  CHECK(in.ndim == 4 && in[1] == in_channels_, "DenseBlock(", in_channels_,
        "): input must be (N, ", in_channels_, ", H, W), got ", in.str());
  const int64_t N = in[0];
  h_ = in[2], w_ = in[3], hw_ = h_ * w_;
  CHECK(N * hw_ <= INT_MAX / 4, "DenseBlock: ", in.str(), " is too large for one GEMM");
  const Shape mid{N, bottleneck_, h_, w_};
  fused_ = cfg.fusion;
  // An inference plan keeps no layer's a1 and c1 for backward: the
  // layers share one of each (the last layer's a1 is the largest), conv2 writes a shared
  // slot, and the gradient buffers are not allocated. On the CPU a training plan shares a1
  // too: backward recomputes it (recompute_a1_). norm2 alone reads c1 (plan_after_conv).
  const bool inference = cfg.inference;
  recompute_a1_ = !inference && cfg.device == Device::CPU;
  const int64_t last_in = int64_t(layers_.back()->in_channels) * N * hw_;
  const Tensor shared_a1 = inference || recompute_a1_ ? Tensor::empty({last_in}) : Tensor();
  const Tensor shared_c1 = inference ? Tensor::empty(mid) : Tensor();
  for (auto& l : layers_) {
    l->norm1.set_fused_relu(fused_);
    l->norm2.layer.set_fused_relu(fused_);
    l->a1 = shared_a1.defined() ? shared_a1 : Tensor::empty({int64_t(l->in_channels) * N * hw_});
    l->norm1.plan({1, l->in_channels, N, hw_}, cfg);  // its saved statistics, on the device
    // computed here as one GEMM, never planned
    l->conv1.note_input({N, l->in_channels, h_, w_}, cfg);
    l->c1 = inference ? shared_c1 : Tensor::empty(mid);
    plan_after_conv(l->norm2, cfg);
    l->norm2.plan(mid, cfg);
    l->relu2.plan(mid, cfg);
    l->conv2.output_to_scratch(inference ? kConv2Slot : -1);
    l->conv2.plan(mid, cfg);
  }
  auto grad_buffer = [&](const Shape& s) { return inference ? Tensor() : Tensor::empty(s); };
  feat_ = Tensor::empty({out_channels_ * N * hw_});
  grad_ = grad_buffer({out_channels_ * N * hw_});
  out_buf_ = Tensor::empty({N, out_channels_, h_, w_});
  g_prefix_ = grad_buffer({last_in});
  bottleneck_cm_ = Tensor::empty({bottleneck_ * N * hw_});
  g_bottleneck_ = grad_buffer(mid);
  g_new_ = grad_buffer({N, growth_, h_, w_});
  return out_buf_.shape();
}

const Tensor& DenseBlock::forward(const Tensor& in) {
  CHECK(out_buf_.defined(), "DenseBlock: forward before plan()");
  CHECK(in.dim() == 4 && in.size(1) == in_channels_ && in.size(2) == h_ && in.size(3) == w_ &&
            in.size(0) <= out_buf_.size(0),
        "DenseBlock: input ", in.shape().str(), " does not fit the plan ",
        out_buf_.shape().str());
  const int64_t n = in.size(0), cols = n * hw_;
  const Device dev = feat_.device();
  CHECK(in.device() == dev, "DenseBlock: input on ", device_name(in.device()), ", block on ",
        device_name(dev));
  real* feat = feat_.data();
  swap01(dev, feat, in.data(), n, in_channels_, hw_);
  for (auto& lp : layers_) {
    DenseLayer& l = *lp;
    const int64_t cin = l.in_channels;
    const Tensor prefix = feat_.head({1, cin, n, hw_});
    Tensor a1 = l.a1.head({1, cin, n, hw_});
    {
      profile::Scope timed(l.norm1_name, l.norm1.kind());  // with relu1 (applied or fused)
      l.norm1.forward(a1, prefix);
      if (!fused_) l.relu1.forward(a1, a1);
    }
    Tensor c1 = l.c1.head({n, bottleneck_, h_, w_});
    {
      profile::Scope timed(l.conv1_name, l.conv1.kind());
      // conv1: (bottleneck, n*HW) = W (bottleneck, cin) * a1 (cin, n*HW), then to NCHW
      gemm_in(dev, l.conv1.precision(), false, false, bottleneck_, int(cols), int(cin), 1.f,
              l.conv1.weight.data(), int(cin), a1.data(), int(cols), 0.f, bottleneck_cm_.data(),
              int(cols));
      swap01(dev, c1.data(), bottleneck_cm_.data(), bottleneck_, n, hw_);
    }
    const Tensor& n2 = l.norm2.forward(c1);
    const Tensor& fresh = l.conv2.forward(fused_ ? n2 : l.relu2.forward(n2));
    swap01(dev, feat + cin * cols, fresh.data(), n, growth_, hw_);
  }
  out_ = out_buf_.head({n, out_channels_, h_, w_});
  swap01(dev, out_.data(), feat, out_channels_, n, hw_);
  return out_;
}

void DenseBlock::backward(Tensor& din, const Tensor& dout) {
  const int64_t n = out_.size(0), cols = n * hw_;
  CHECK(dout.shape() == out_.shape(), "DenseBlock backward: dout ", dout.shape().str(),
        " vs the last output ", out_.shape().str());
  const Device dev = grad_.device();
  real* grad = grad_.data();
  swap01(dev, grad, dout.data(), n, out_channels_, hw_);
  for (size_t i = layers_.size(); i-- > 0;) {
    DenseLayer& l = *layers_[i];
    const int64_t cin = l.in_channels;
    Tensor g_new = g_new_.head({n, growth_, h_, w_});
    swap01(dev, g_new.data(), grad + cin * cols, growth_, n, hw_);
    Tensor gb = g_bottleneck_.head({n, bottleneck_, h_, w_});
    l.conv2.backward(gb, g_new);
    if (!fused_) l.relu2.backward(gb, gb);  // fused: norm2's backward masks
    l.norm2.backward(gb, gb);  // now the gradient of c1
    real* gc = bottleneck_cm_.data();
    Tensor a1 = l.a1.head({1, cin, n, hw_});
    const Tensor prefix = feat_.head({1, cin, n, hw_});
    if (recompute_a1_) {  // relu1(norm1(prefix)) as forward computed it, bit for bit
      profile::Scope timed(l.norm1_name, l.norm1.kind(), /*backward=*/true);
      l.norm1.recompute(a1, prefix);
      if (!fused_) l.relu1.forward(a1, a1);
    }
    Tensor g_prefix = g_prefix_.head({1, cin, n, hw_});
    {
      profile::Scope timed(l.conv1_name, l.conv1.kind(), /*backward=*/true);
      swap01(dev, gc, gb.data(), n, bottleneck_, hw_);
      // conv1 weight gradient '+=' (unless frozen) gc (bottleneck, n*HW) * a1^T; input
      // gradient W^T * gc.
      if (!l.conv1.frozen())
        gemm_in(dev, l.conv1.precision(), false, true, bottleneck_, int(cin), int(cols), 1.f, gc,
                int(cols), a1.data(), int(cols), 1.f, l.conv1.grad_weight.data(), int(cin));
      gemm_in(dev, l.conv1.precision(), true, false, int(cin), int(cols), bottleneck_, 1.f,
              l.conv1.weight.data(), int(cin), gc, int(cols), 0.f, g_prefix.data(), int(cols));
    }
    {
      profile::Scope timed(l.norm1_name, l.norm1.kind(), /*backward=*/true);
      if (!fused_) l.relu1.backward(g_prefix, g_prefix, a1, a1);
      Tensor g_features = grad_.head({1, cin, n, hw_});
      l.norm1.backward_add(g_features, g_prefix, prefix, a1);  // the prefix's gradients sum
    }
  }
  if (din.defined()) {
    CHECK_SHAPE(din, {n, in_channels_, h_, w_});
    swap01(dev, din.data(), grad, in_channels_, n, hw_);
  }
}

void init_densenet(Model& model, uint64_t seed) {
  model.root().for_each_layer([seed](Layer& l, const std::string& prefix) {
    if (auto* c = dynamic_cast<Conv2d*>(&l)) {
      init::kaiming_normal_relu(c->weight, seed, prefix + "weight", /*fan_out_mode=*/false);
    } else if (auto* f = dynamic_cast<Linear*>(&l)) {
      f->reset_parameters(seed);  // torchvision keeps nn.Linear's default weight
      init::constant(f->bias, 0.f);
    } else {
      l.reset_parameters(seed);  // BatchNorm: 1/0 and fresh running stats
    }
  });
}

std::unique_ptr<Model> make_densenet(const std::string& name, const ModelOptions& options,
                                     uint64_t seed) {
  CHECK(name == "densenet121", "unknown DenseNet '", name, "' (densenet121)");
  constexpr int growth = 32, bn_size = 4, init_features = 64;
  const int blocks[] = {6, 12, 24, 16};

  auto features = std::make_unique<Sequential>();
  features->add("conv0", leaf<Conv2d>(Conv2dOptions{.in_channels = options.in_channels,
                                                    .out_channels = init_features, .kernel = 7,
                                                    .stride = 2, .padding = 3, .bias = false}));
  features->add("norm0", leaf<BatchNorm2d>(init_features));
  features->add("relu0", leaf<ReLU>()).in_place();
  features->add("pool0", leaf<MaxPool2d>(3, 2, 1));
  int channels = init_features;
  for (int b = 0; b < 4; ++b) {
    const std::string k = std::to_string(b + 1);
    auto& block = features->add("denseblock" + k,
                                std::make_unique<DenseBlock>(blocks[b], channels, growth, bn_size));
    channels = block.out_channels();
    if (b == 3) break;
    auto transition = std::make_unique<Sequential>();
    transition->add("norm", leaf<BatchNorm2d>(channels));
    transition->add("relu", leaf<ReLU>()).in_place();
    transition->add("conv", leaf<Conv2d>(Conv2dOptions{.in_channels = channels,
                                                       .out_channels = channels / 2,
                                                       .kernel = 1, .bias = false}));
    transition->add("pool", leaf<AvgPool2d>(2, 2));
    features->add("transition" + k, std::move(transition));
    channels /= 2;
  }
  features->add("norm5", leaf<BatchNorm2d>(channels));

  // torchvision's forward: F.relu(features, inplace=True), adaptive_avg_pool2d, flatten.
  auto root = std::make_unique<Sequential>();
  root->add("features", std::move(features));
  root->add("relu", leaf<ReLU>()).in_place();
  root->add("avgpool", leaf<AdaptiveAvgPool2d>(1, 1));
  root->add("flatten", leaf<Flatten>());
  root->add("classifier", leaf<Linear>(channels, options.num_classes));
  auto model = std::make_unique<Model>(name, std::move(root), options, init_densenet, seed);
  model->set_head({"classifier"});
  return model;
}

}  // namespace mpicnn
