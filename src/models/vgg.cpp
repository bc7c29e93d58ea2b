// torchvision VGG: features (conv3x3 [+ BN] + ReLU, max pools) -> AdaptiveAvgPool2d(7) ->
// flatten -> classifier (Linear 25088-4096, ReLU, Dropout, Linear 4096-4096, ReLU, Dropout,
// Linear 4096-classes). ReLUs run in place, as torchvision's ReLU(inplace=True).
#include "models/vgg.h"

#include <vector>

#include "layers/adaptive_avgpool2d.h"
#include "layers/batchnorm.h"
#include "layers/conv2d.h"
#include "layers/dropout.h"
#include "layers/flatten.h"
#include "layers/linear.h"
#include "layers/maxpool2d.h"
#include "layers/relu.h"
#include "models/init.h"

namespace mpicnn {

namespace {

constexpr int M = 0;  // a 2x2 max pool in a configuration; other entries are conv widths

// torchvision's cfgs "A" (vgg11), "B" (vgg13), "D" (vgg16), "E" (vgg19).
const std::vector<int>& config(int depth) {
  static const std::vector<int> a = {64, M, 128, M, 256, 256, M, 512, 512, M, 512, 512, M};
  static const std::vector<int> b = {64, 64, M, 128, 128, M, 256, 256, M, 512, 512, M,
                                     512, 512, M};
  static const std::vector<int> d = {64, 64, M, 128, 128, M, 256, 256, 256, M,
                                     512, 512, 512, M, 512, 512, 512, M};
  static const std::vector<int> e = {64, 64, M, 128, 128, M, 256, 256, 256, 256, M,
                                     512, 512, 512, 512, M, 512, 512, 512, 512, M};
  switch (depth) {
    case 11: return a;
    case 13: return b;
    case 16: return d;
    case 19: return e;
  }
  FAIL("VGG depth must be 11, 13, 16 or 19, got ", depth);
}

}  // namespace

void init_vgg(Model& model, uint64_t seed) {
  model.root().for_each_layer([seed](Layer& l, const std::string& prefix) {
    if (auto* c = dynamic_cast<Conv2d*>(&l)) {
      init::kaiming_normal_relu(c->weight, seed, prefix + "weight", /*fan_out_mode=*/true);
      if (c->bias.defined()) init::constant(c->bias, 0.f);
    } else if (auto* f = dynamic_cast<Linear*>(&l)) {
      init::normal(f->weight, seed, prefix + "weight", 0.f, 0.01f);
      if (f->bias.defined()) init::constant(f->bias, 0.f);
    } else {
      l.reset_parameters(seed);  // BatchNorm: 1/0 and fresh running stats
    }
  });
}

std::unique_ptr<Sequential> vgg_module(const std::string& name, const ModelOptions& options) {
  int depth = 0;
  bool bn = false;
  for (int d : {11, 13, 16, 19}) {
    const std::string base = "vgg" + std::to_string(d);
    if (name == base || name == base + "_bn") depth = d, bn = (name != base);
  }
  CHECK(depth != 0, "unknown VGG '", name, "' (vgg11, vgg13, vgg16, vgg19, each also _bn)");

  auto features = std::make_unique<Sequential>();
  int in = options.in_channels;
  for (int v : config(depth)) {
    if (v == M) {
      features->add(leaf<MaxPool2d>(2, 2));
      continue;
    }
    features->add(leaf<Conv2d>(
        Conv2dOptions{.in_channels = in, .out_channels = v, .kernel = 3, .padding = 1}));
    if (bn) features->add(leaf<BatchNorm2d>(v));
    features->add(leaf<ReLU>()).in_place();
    in = v;
  }
  auto classifier = std::make_unique<Sequential>();
  classifier->add(leaf<Linear>(512 * 7 * 7, 4096));
  classifier->add(leaf<ReLU>()).in_place();
  classifier->add(leaf<Dropout>(options.dropout_or(0.5f)));
  classifier->add(leaf<Linear>(4096, 4096));
  classifier->add(leaf<ReLU>()).in_place();
  classifier->add(leaf<Dropout>(options.dropout_or(0.5f)));
  classifier->add(leaf<Linear>(4096, options.num_classes));

  auto root = std::make_unique<Sequential>();
  root->add("features", std::move(features));
  root->add("avgpool", leaf<AdaptiveAvgPool2d>(7, 7));
  root->add("flatten", leaf<Flatten>());
  root->add("classifier", std::move(classifier));
  return root;
}

std::unique_ptr<Model> make_vgg(const std::string& name, const ModelOptions& options,
                                uint64_t seed) {
  auto model = std::make_unique<Model>(name, vgg_module(name, options), options, init_vgg, seed);
  model->set_head({"classifier.6"});
  return model;
}

}  // namespace mpicnn
