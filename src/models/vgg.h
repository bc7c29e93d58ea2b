// VGG-11/13/16/19, with and without BatchNorm, exactly as torchvision 0.14 builds them (names,
// shapes, state_dict order, default initialisation), with num_classes, in_channels and the
// classifier's dropout from ModelOptions. Not the CIFAR variants (those differ in the head).
#pragma once
#include <memory>
#include <string>

#include "models/model.h"
#include "models/module.h"

namespace mpicnn {

// torchvision's VGG init: conv weights kaiming_normal(fan_out, relu) and biases 0, BatchNorm
// 1/0, Linear weights normal(0, 0.01) and biases 0.
void init_vgg(Model& model, uint64_t seed);

// "vgg11", "vgg13", "vgg16", "vgg19" and the "_bn" variants.
std::unique_ptr<Model> make_vgg(const std::string& name, const ModelOptions& options,
                                uint64_t seed);

// make_vgg's module tree alone, for code that needs the structure without 130M+ random draws
// (tests of names and shapes).
std::unique_ptr<Sequential> vgg_module(const std::string& name, const ModelOptions& options);

}  // namespace mpicnn
