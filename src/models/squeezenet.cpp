// torchvision SqueezeNet 1.1: features (conv3x3/2, ReLU, ceil-mode max pools, eight Fire
// blocks) -> classifier (Dropout, conv1x1 512-classes, ReLU, AdaptiveAvgPool2d(1)) -> flatten.
// Fire backward: the concat gradient splits into the two expand branches; their gradients
// w.r.t. the shared squeeze output add up before the squeeze ReLU and conv.
#include "models/squeezenet.h"

#include "layers/adaptive_avgpool2d.h"
#include "layers/add.h"
#include "layers/dropout.h"
#include "layers/flatten.h"
#include "layers/maxpool2d.h"
#include "models/init.h"

namespace mpicnn {

namespace {

std::unique_ptr<Leaf<Conv2d>> conv(int in, int out, int k, int stride = 1, int padding = 0) {
  return leaf<Conv2d>(Conv2dOptions{.in_channels = in, .out_channels = out, .kernel = k,
                                    .stride = stride, .padding = padding});
}

std::unique_ptr<Leaf<ReLU>> relu_in_place() {
  auto r = leaf<ReLU>();
  r->in_place();
  return r;
}

Tensor batch_view(Tensor& buf, const Shape& planned, int64_t n) {
  Shape s = planned;
  s.d[0] = n;
  return buf.head(s);
}

}  // namespace

Fire::Fire(int in_channels, int squeeze, int expand1x1, int expand3x3)
    : e1_(expand1x1), e3_(expand3x3) {
  squeeze_ = conv(in_channels, squeeze, 1);
  squeeze_relu_ = relu_in_place();
  expand1x1_ = conv(squeeze, expand1x1, 1);
  expand1x1_relu_ = relu_in_place();
  expand3x3_ = conv(squeeze, expand3x3, 3, 1, 1);
  expand3x3_relu_ = relu_in_place();
}

void Fire::register_state(ParamStore& store, const std::string& prefix) {
  squeeze_->register_state(store, prefix + "squeeze.");
  squeeze_relu_->register_state(store, prefix + "squeeze_activation.");
  expand1x1_->register_state(store, prefix + "expand1x1.");
  expand1x1_relu_->register_state(store, prefix + "expand1x1_activation.");
  expand3x3_->register_state(store, prefix + "expand3x3.");
  expand3x3_relu_->register_state(store, prefix + "expand3x3_activation.");
}

void Fire::for_each_layer(const std::function<void(Layer&, const std::string&)>& fn) {
  squeeze_->for_each_layer(fn);
  squeeze_relu_->for_each_layer(fn);
  expand1x1_->for_each_layer(fn);
  expand1x1_relu_->for_each_layer(fn);
  expand3x3_->for_each_layer(fn);
  expand3x3_relu_->for_each_layer(fn);
}

void Fire::set_training(bool training) {
  for (Module* m : std::initializer_list<Module*>{squeeze_.get(), squeeze_relu_.get(),
                                                  expand1x1_.get(), expand1x1_relu_.get(),
                                                  expand3x3_.get(), expand3x3_relu_.get()})
    m->set_training(training);
}

Shape Fire::plan(const Shape& in, const ExecConfig& cfg) {
  const Shape s = squeeze_->plan(in, cfg);
  squeeze_relu_->plan(s, cfg);
  const Shape e1 = expand1x1_->plan(s, cfg);
  expand1x1_relu_->plan(e1, cfg);
  const Shape e3 = expand3x3_->plan(s, cfg);
  expand3x3_relu_->plan(e3, cfg);
  const Shape out = Concat::output_shape({e1, e3});
  out_buf_ = cfg.activation(out);
  g_e1_ = cfg.activation(e1);
  g_e3_ = cfg.activation(e3);
  g_s_ = cfg.activation(s);
  g_s3_ = cfg.activation(s);
  return out;
}

const Tensor& Fire::forward(const Tensor& in) {
  CHECK(out_buf_.defined(), "Fire: forward before plan()");
  CHECK(in.dim() == 4 && in.size(0) <= out_buf_.size(0), "Fire: input ", in.shape().str(),
        " exceeds the planned batch ", out_buf_.size(0));
  const Tensor& s = squeeze_relu_->forward(squeeze_->forward(in));
  const Tensor& a = expand1x1_relu_->forward(expand1x1_->forward(s));
  const Tensor& b = expand3x3_relu_->forward(expand3x3_->forward(s));
  out_ = batch_view(out_buf_, out_buf_.shape(), in.size(0));
  concat_.forward(out_, {&a, &b});
  return out_;
}

void Fire::backward(Tensor& din, const Tensor& dout) {
  const int64_t n = out_.size(0);
  Tensor ga = batch_view(g_e1_, g_e1_.shape(), n), gb = batch_view(g_e3_, g_e3_.shape(), n);
  concat_.backward({&ga, &gb}, dout);
  expand1x1_relu_->backward(ga, ga);
  expand3x3_relu_->backward(gb, gb);
  Tensor gs = batch_view(g_s_, g_s_.shape(), n), gs3 = batch_view(g_s3_, g_s3_.shape(), n);
  expand1x1_->backward(gs, ga);
  expand3x3_->backward(gs3, gb);
  accumulate(gs, gs3);
  squeeze_relu_->backward(gs, gs);
  squeeze_->backward(din, gs);
}

void init_squeezenet(Model& model, uint64_t seed) {
  model.root().for_each_layer([seed](Layer& l, const std::string& prefix) {
    auto* c = dynamic_cast<Conv2d*>(&l);
    if (!c) return;  // SqueezeNet has no other parameterised layer
    if (prefix == "classifier.1.")
      init::normal(c->weight, seed, prefix + "weight", 0.f, 0.01f);
    else
      init::kaiming_uniform_relu(c->weight, seed, prefix + "weight");
    init::constant(c->bias, 0.f);
  });
}

std::unique_ptr<Model> make_squeezenet(const std::string& name, const ModelOptions& options,
                                       uint64_t seed) {
  CHECK(name == "squeezenet1_1", "unknown SqueezeNet '", name, "' (squeezenet1_1)");
  auto pool = [] { return leaf<MaxPool2d>(3, 2, 0, 1, /*ceil_mode=*/true); };
  auto features = std::make_unique<Sequential>();
  features->add(conv(options.in_channels, 64, 3, 2));
  features->add(relu_in_place());
  features->add(pool());
  features->add(std::make_unique<Fire>(64, 16, 64, 64));
  features->add(std::make_unique<Fire>(128, 16, 64, 64));
  features->add(pool());
  features->add(std::make_unique<Fire>(128, 32, 128, 128));
  features->add(std::make_unique<Fire>(256, 32, 128, 128));
  features->add(pool());
  features->add(std::make_unique<Fire>(256, 48, 192, 192));
  features->add(std::make_unique<Fire>(384, 48, 192, 192));
  features->add(std::make_unique<Fire>(384, 64, 256, 256));
  features->add(std::make_unique<Fire>(512, 64, 256, 256));

  auto classifier = std::make_unique<Sequential>();
  classifier->add(leaf<Dropout>(options.dropout_or(0.5f)));
  classifier->add(conv(512, options.num_classes, 1));
  classifier->add(relu_in_place());
  classifier->add(leaf<AdaptiveAvgPool2d>(1, 1));

  auto root = std::make_unique<Sequential>();
  root->add("features", std::move(features));
  root->add("classifier", std::move(classifier));
  root->add("flatten", leaf<Flatten>());
  auto model = std::make_unique<Model>(name, std::move(root), options, init_squeezenet, seed);
  model->set_head({"classifier.1"});
  return model;
}

}  // namespace mpicnn
