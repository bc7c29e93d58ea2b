// torchvision AlexNet: features (5 convs with in-place ReLUs, 3 max pools 3/2) ->
// AdaptiveAvgPool2d(6) -> flatten -> classifier (Dropout, Linear 9216-4096, ReLU, Dropout,
// Linear 4096-4096, ReLU, Linear 4096-classes).
#include "models/alexnet.h"

#include "layers/adaptive_avgpool2d.h"
#include "layers/conv2d.h"
#include "layers/dropout.h"
#include "layers/flatten.h"
#include "layers/linear.h"
#include "layers/maxpool2d.h"
#include "layers/relu.h"

namespace mpicnn {

void init_alexnet(Model& model, uint64_t seed) {
  model.root().for_each_layer([seed](Layer& l, const std::string&) { l.reset_parameters(seed); });
}

std::unique_ptr<Sequential> alexnet_module(const ModelOptions& options) {
  auto conv = [](int in, int out, int k, int s, int p) {
    return leaf<Conv2d>(Conv2dOptions{.in_channels = in, .out_channels = out, .kernel = k,
                                      .stride = s, .padding = p});
  };
  auto features = std::make_unique<Sequential>();
  features->add(conv(options.in_channels, 64, 11, 4, 2));
  features->add(leaf<ReLU>()).in_place();
  features->add(leaf<MaxPool2d>(3, 2));
  features->add(conv(64, 192, 5, 1, 2));
  features->add(leaf<ReLU>()).in_place();
  features->add(leaf<MaxPool2d>(3, 2));
  features->add(conv(192, 384, 3, 1, 1));
  features->add(leaf<ReLU>()).in_place();
  features->add(conv(384, 256, 3, 1, 1));
  features->add(leaf<ReLU>()).in_place();
  features->add(conv(256, 256, 3, 1, 1));
  features->add(leaf<ReLU>()).in_place();
  features->add(leaf<MaxPool2d>(3, 2));

  auto classifier = std::make_unique<Sequential>();
  classifier->add(leaf<Dropout>(options.dropout_or(0.5f)));
  classifier->add(leaf<Linear>(256 * 6 * 6, 4096));
  classifier->add(leaf<ReLU>()).in_place();
  classifier->add(leaf<Dropout>(options.dropout_or(0.5f)));
  classifier->add(leaf<Linear>(4096, 4096));
  classifier->add(leaf<ReLU>()).in_place();
  classifier->add(leaf<Linear>(4096, options.num_classes));

  auto root = std::make_unique<Sequential>();
  root->add("features", std::move(features));
  root->add("avgpool", leaf<AdaptiveAvgPool2d>(6, 6));
  root->add("flatten", leaf<Flatten>());
  root->add("classifier", std::move(classifier));
  return root;
}

std::unique_ptr<Model> make_alexnet(const ModelOptions& options, uint64_t seed) {
  auto model = std::make_unique<Model>("alexnet", alexnet_module(options), options, init_alexnet, seed);
  model->set_head({"classifier.6"});
  return model;
}

}  // namespace mpicnn
