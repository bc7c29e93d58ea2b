// AlexNet exactly as torchvision 0.14 builds it (the "one weird trick" variant: 64-192-384-
// 256-256 channels), with num_classes, in_channels and the classifier's dropout from
// ModelOptions. Initialisation is PyTorch's per-layer default, as torchvision leaves it.
#pragma once
#include <memory>

#include "models/model.h"
#include "models/module.h"

namespace mpicnn {

// Conv2d and Linear reset_parameters (U(+-1/sqrt(fan_in)) for weights and biases).
void init_alexnet(Model& model, uint64_t seed);

std::unique_ptr<Model> make_alexnet(const ModelOptions& options, uint64_t seed);

// make_alexnet's module tree alone, for code that needs the structure without 57M random
// draws (tests of names and shapes).
std::unique_ptr<Sequential> alexnet_module(const ModelOptions& options);

}  // namespace mpicnn
