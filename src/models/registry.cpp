// The list of models. Each family file provides its make_* function. min_size is the smallest
// square input on which the model runs in training mode with a batch of one image: every pool
// and strided conv leaves at least one pixel and every BatchNorm sees more than one value per
// channel (its last maps are at least 2x2). It is where torchvision's model stops raising;
// tests/test_models.cpp checks it against PyTorch. Below it, ResNets, ResNet-20 and DenseNet
// still run shapes-wise, with batches of two or more, but their last BatchNorms then normalise
// 1x1 maps over the batch alone. Inception v3 is the exception (min_batch 2): at its own 299
// its auxiliary head's last BatchNorm sees a 1x1 map, so torchvision's model trains there only
// on batches of two or more (one image needs 347); its min_size 299 is for a batch of two,
// where the head's 5x5/3 pool still gets its 5x5 map.
#include "models/registry.h"

#include "models/alexnet.h"
#include "models/densenet.h"
#include "models/googlenet.h"
#include "models/inception.h"
#include "models/resnet.h"
#include "models/small.h"
#include "models/squeezenet.h"
#include "models/vgg.h"

namespace mpicnn {

const std::vector<ModelSpec>& model_specs() {
  static const std::vector<ModelSpec> specs = [] {
    std::vector<ModelSpec> v;
    v.push_back({"lenet", "LeNet-5 style convnet for 28x28 (Fashion-MNIST) or 32x32 images", 28,
                 12, [](const ModelOptions& o, uint64_t seed) { return make_lenet(o, seed); }});
    v.push_back({"resnet20", "CIFAR ResNet-20 of He et al. 2016, projection shortcuts", 32, 5,
                 [](const ModelOptions& o, uint64_t seed) { return make_resnet20(o, seed); }});
    const std::pair<const char*, const char*> resnets[] = {
        {"resnet18", "torchvision ResNet-18 (BasicBlocks 2-2-2-2)"},
        {"resnet34", "torchvision ResNet-34 (BasicBlocks 3-4-6-3)"},
        {"resnet50", "torchvision ResNet-50 (Bottlenecks 3-4-6-3)"}};
    for (auto [n, what] : resnets)
      v.push_back({n, what, 224, 33,
                   [n](const ModelOptions& o, uint64_t seed) { return make_resnet(n, o, seed); }});
    v.push_back({"alexnet", "torchvision AlexNet (64-192-384-256-256 convs)", 224, 63,
                 [](const ModelOptions& o, uint64_t seed) { return make_alexnet(o, seed); }});
    for (int depth : {11, 13, 16, 19}) {
      for (bool bn : {false, true}) {
        const std::string n = "vgg" + std::to_string(depth) + (bn ? "_bn" : "");
        v.push_back({n,
                     "torchvision VGG-" + std::to_string(depth) + (bn ? " with BatchNorm" : ""),
                     224, 32, [n](const ModelOptions& o, uint64_t seed) {
                       return make_vgg(n, o, seed);
                     }});
      }
    }
    v.push_back({"squeezenet1_1", "torchvision SqueezeNet 1.1 (Fire blocks, conv classifier)",
                 224, 17, [](const ModelOptions& o, uint64_t seed) {
                   return make_squeezenet("squeezenet1_1", o, seed);
                 }});
    v.push_back({"densenet121", "torchvision DenseNet-121 (growth 32, blocks 6-12-24-16)", 224,
                 61, [](const ModelOptions& o, uint64_t seed) {
                   return make_densenet("densenet121", o, seed);
                 }});
    v.push_back({"inception_v3",
                 "torchvision Inception v3 (training adds its aux head's loss x 0.4)",
                 299, 299, [](const ModelOptions& o, uint64_t seed) {
                   return make_inception_v3(o, seed);
                 }, /*min_batch=*/2});
    v.push_back({"googlenet",
                 "torchvision GoogLeNet (training adds aux1 and aux2 losses x 0.3)",
                 224, 47, [](const ModelOptions& o, uint64_t seed) {
                   return make_googlenet(o, seed);
                 }});
    return v;
  }();
  return specs;
}

const ModelSpec& model_spec(const std::string& name) {
  std::string known;
  for (const ModelSpec& s : model_specs()) {
    if (s.name == name) return s;
    known += (known.empty() ? "" : ", ") + s.name;
  }
  FAIL("unknown model '", name, "' (known: ", known, ")");
}

std::string model_list() {
  std::string out;
  for (const ModelSpec& s : model_specs())
    out += "  " + s.name + std::string(s.name.size() < 16 ? 16 - s.name.size() : 1, ' ') +
           s.description + " (" + std::to_string(s.default_size) + "x" +
           std::to_string(s.default_size) + ")\n";
  return out;
}

std::unique_ptr<Model> build_model(const std::string& name, const ModelOptions& options,
                                   uint64_t seed) {
  return model_spec(name).build(options, seed);
}

}  // namespace mpicnn
