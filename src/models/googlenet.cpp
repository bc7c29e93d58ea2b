// torchvision GoogLeNet: conv1 (7x7/2), maxpool1, conv2 (1x1), conv3 (3x3), maxpool2,
// inception3a-3b, maxpool3, inception4a-4e, maxpool4 (2x2), inception5a-5b, then
// AdaptiveAvgPool2d(1), flatten, Dropout, fc; every max pool is ceil_mode. As torchvision, an
// Inception block's "5x5" branch (branch3) is a 3x3 conv. aux1 reads inception4a's output,
// aux2 inception4d's, in training mode only.
#include "models/googlenet.h"

#include "layers/adaptive_avgpool2d.h"
#include "layers/dropout.h"
#include "layers/flatten.h"
#include "layers/linear.h"
#include "layers/maxpool2d.h"
#include "layers/relu.h"
#include "models/aux_net.h"
#include "models/branches.h"
#include "models/init.h"

namespace mpicnn {

namespace {

std::unique_ptr<Leaf<MaxPool2d>> ceil_pool(int kernel, int stride, int padding = 0) {
  return leaf<MaxPool2d>(kernel, stride, padding, 1, /*ceil_mode=*/true);
}

// One named branch of an Inception block ("branch1", or "branch2.0", "branch2.1", ...).
std::unique_ptr<Sequential> branch(const std::string& name, std::unique_ptr<Module> body) {
  auto s = std::make_unique<Sequential>();
  s->add(name, std::move(body));
  return s;
}

std::unique_ptr<Sequential> two(std::unique_ptr<Module> a, std::unique_ptr<Module> b) {
  auto s = std::make_unique<Sequential>();
  s->add(std::move(a));
  s->add(std::move(b));
  return s;
}

// torchvision's Inception(in, ch1x1, ch3x3red, ch3x3, ch5x5red, ch5x5, pool_proj).
std::unique_ptr<Branches> inception(int in, int ch1x1, int ch3x3red, int ch3x3, int ch5x5red,
                                    int ch5x5, int pool_proj) {
  auto b = std::make_unique<Branches>();
  b->add(branch("branch1", basic_conv2d(in, ch1x1, 1)));
  b->add(branch("branch2", two(basic_conv2d(in, ch3x3red, 1),
                               basic_conv2d(ch3x3red, ch3x3, 3, 1, 1))));
  b->add(branch("branch3", two(basic_conv2d(in, ch5x5red, 1),
                               basic_conv2d(ch5x5red, ch5x5, 3, 1, 1))));
  b->add(branch("branch4", two(ceil_pool(3, 1, 1), basic_conv2d(in, pool_proj, 1))));
  return b;
}

// InceptionAux: adaptive_avg_pool2d(4), conv (1x1, 128), flatten, relu(fc1), dropout, fc2.
std::unique_ptr<Sequential> aux_head(int in, int classes, real dropout) {
  auto s = std::make_unique<Sequential>();
  s->add("adaptive_avg_pool", leaf<AdaptiveAvgPool2d>(4, 4));
  s->add("conv", basic_conv2d(in, 128, 1));
  s->add("flatten", leaf<Flatten>());
  s->add("fc1", leaf<Linear>(2048, 1024));
  s->add("relu", leaf<ReLU>()).in_place();
  s->add("dropout", leaf<Dropout>(dropout));
  s->add("fc2", leaf<Linear>(1024, classes));
  return s;
}

}  // namespace

void init_googlenet(Model& model, uint64_t seed) {
  model.root().for_each_layer([seed](Layer& l, const std::string& prefix) {
    if (auto* c = dynamic_cast<Conv2d*>(&l)) {
      init::trunc_normal(c->weight, seed, prefix + "weight", 0.f, 0.01f, -2.f, 2.f);
    } else if (auto* f = dynamic_cast<Linear*>(&l)) {
      f->reset_parameters(seed);  // the bias keeps nn.Linear's default
      init::trunc_normal(f->weight, seed, prefix + "weight", 0.f, 0.01f, -2.f, 2.f);
    } else {
      l.reset_parameters(seed);  // BatchNorm: 1/0 and fresh running stats
    }
  });
}

std::unique_ptr<Model> make_googlenet(const ModelOptions& options, uint64_t seed) {
  auto to_4a = std::make_unique<Sequential>();
  to_4a->add("conv1", basic_conv2d(options.in_channels, 64, 7, 2, 3));
  to_4a->add("maxpool1", ceil_pool(3, 2));
  to_4a->add("conv2", basic_conv2d(64, 64, 1));
  to_4a->add("conv3", basic_conv2d(64, 192, 3, 1, 1));
  to_4a->add("maxpool2", ceil_pool(3, 2));
  to_4a->add("inception3a", inception(192, 64, 96, 128, 16, 32, 32));
  to_4a->add("inception3b", inception(256, 128, 128, 192, 32, 96, 64));
  to_4a->add("maxpool3", ceil_pool(3, 2));
  to_4a->add("inception4a", inception(480, 192, 96, 208, 16, 48, 64));
  auto to_4d = std::make_unique<Sequential>();
  to_4d->add("inception4b", inception(512, 160, 112, 224, 24, 64, 64));
  to_4d->add("inception4c", inception(512, 128, 128, 256, 24, 64, 64));
  to_4d->add("inception4d", inception(512, 112, 144, 288, 32, 64, 64));
  auto to_5b = std::make_unique<Sequential>();
  to_5b->add("inception4e", inception(528, 256, 160, 320, 32, 128, 128));
  to_5b->add("maxpool4", ceil_pool(2, 2));
  to_5b->add("inception5a", inception(832, 256, 160, 320, 32, 128, 128));
  to_5b->add("inception5b", inception(832, 384, 192, 384, 48, 128, 128));
  auto classifier = std::make_unique<Sequential>();
  classifier->add("avgpool", leaf<AdaptiveAvgPool2d>(1, 1));
  classifier->add("flatten", leaf<Flatten>());
  classifier->add("dropout", leaf<Dropout>(options.dropout_or(real(0.2))));
  classifier->add("fc", leaf<Linear>(1024, options.num_classes));

  // torchvision registers aux1 and aux2 after inception5b, before fc: so here too.
  const real aux_dropout = options.aux_dropout_or(real(0.7));
  auto root = std::make_unique<AuxNet>();
  root->add_segment(std::move(to_4a));
  root->add_segment(std::move(to_4d));
  root->add_segment(std::move(to_5b));
  root->add_head("aux1", real(0.3), 0, aux_head(512, options.num_classes, aux_dropout));
  root->add_head("aux2", real(0.3), 1, aux_head(528, options.num_classes, aux_dropout));
  root->add_segment(std::move(classifier));
  auto model = std::make_unique<Model>("googlenet", std::move(root), options, init_googlenet, seed);
  // Every classifier sized by the class count: --init-weights re-initialises them together.
  model->set_head({"fc", "aux1.fc2", "aux2.fc2"});
  return model;
}

}  // namespace mpicnn
