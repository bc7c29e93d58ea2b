// LeNet and ResNet-20: built from the same modules as the torchvision families.
#include "models/small.h"

#include "layers/adaptive_avgpool2d.h"
#include "layers/batchnorm.h"
#include "layers/conv2d.h"
#include "layers/flatten.h"
#include "layers/linear.h"
#include "layers/maxpool2d.h"
#include "layers/relu.h"
#include "models/resnet.h"

namespace mpicnn {

std::unique_ptr<Model> make_lenet(const ModelOptions& options, uint64_t seed) {
  auto root = std::make_unique<Sequential>();
  root->add("conv1", leaf<Conv2d>(Conv2dOptions{.in_channels = options.in_channels,
                                                .out_channels = 6, .kernel = 5, .padding = 2}));
  root->add("relu1", leaf<ReLU>()).in_place();
  root->add("pool1", leaf<MaxPool2d>(2));
  root->add("conv2",
            leaf<Conv2d>(Conv2dOptions{.in_channels = 6, .out_channels = 16, .kernel = 5}));
  root->add("relu2", leaf<ReLU>()).in_place();
  root->add("pool2", leaf<MaxPool2d>(2));
  root->add("avgpool", leaf<AdaptiveAvgPool2d>(5, 5));
  root->add("flatten", leaf<Flatten>());
  root->add("fc1", leaf<Linear>(16 * 5 * 5, 120));
  root->add("relu3", leaf<ReLU>()).in_place();
  root->add("fc2", leaf<Linear>(120, 84));
  root->add("relu4", leaf<ReLU>()).in_place();
  root->add("fc3", leaf<Linear>(84, options.num_classes));
  auto init = [](Model& m, uint64_t s) {
    m.root().for_each_layer([s](Layer& l, const std::string&) { l.reset_parameters(s); });
  };
  auto model = std::make_unique<Model>("lenet", std::move(root), options, init, seed);
  model->set_head({"fc3"});
  return model;
}

std::unique_ptr<Model> make_resnet20(const ModelOptions& options, uint64_t seed) {
  auto root = std::make_unique<Sequential>();
  root->add("conv1", leaf<Conv2d>(Conv2dOptions{.in_channels = options.in_channels,
                                                .out_channels = 16, .kernel = 3, .padding = 1,
                                                .bias = false}));
  root->add("bn1", leaf<BatchNorm2d>(16));
  root->add("relu", leaf<ReLU>()).in_place();
  int in = 16;
  for (int stage = 0; stage < 3; ++stage) {
    const int width = 16 << stage;
    auto layer = std::make_unique<Sequential>();
    for (int b = 0; b < 3; ++b)
      in = layer->add(std::make_unique<ResidualBlock>(in, width, (b == 0 && stage > 0) ? 2 : 1,
                                                      /*bottleneck=*/false))
               .out_channels();
    root->add("layer" + std::to_string(stage + 1), std::move(layer));
  }
  root->add("avgpool", leaf<AdaptiveAvgPool2d>(1, 1));
  root->add("flatten", leaf<Flatten>());
  root->add("fc", leaf<Linear>(in, options.num_classes));
  auto model = std::make_unique<Model>("resnet20", std::move(root), options, init_resnet, seed);
  model->set_head({"fc"});
  return model;
}

}  // namespace mpicnn
