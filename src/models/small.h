// Small models for 28-32 px inputs (Fashion-MNIST 28x28x1, CIFAR 32x32x3): a LeNet-5 style
// net and the CIFAR ResNet-20 of He et al. 2016. No torchvision counterpart; names follow
// torchvision's style. Not tuned variants (no wide or pre-activation ResNets).
#pragma once
#include <memory>

#include "models/model.h"

namespace mpicnn {

// conv1 5x5 (6, padding 2) -> ReLU -> max pool 2 -> conv2 5x5 (16) -> ReLU -> max pool 2 ->
// AdaptiveAvgPool2d(5) -> flatten -> fc1 (400-120) -> ReLU -> fc2 (120-84) -> ReLU -> fc3.
// Padding 2 makes a 28x28 input reach the classic 16x5x5 map (as 32x32 does in LeNet-5
// without padding); the adaptive pool is the identity there and keeps fc1 at 400 inputs for
// other sizes (32x32 gives 6x6 maps, averaged to 5x5). PyTorch's default initialisation.
std::unique_ptr<Model> make_lenet(const ModelOptions& options, uint64_t seed);

// conv1 3x3 (16) -> bn1 -> ReLU -> layer1..3 (three BasicBlocks each, 16/32/64 channels,
// stride 2 at the first block of layer2 and layer3) -> AdaptiveAvgPool2d(1) -> flatten -> fc.
// Shortcuts that change shape are 1x1 conv + BN projections (He et al.'s option B), as
// torchvision's downsample. torchvision's ResNet initialisation (init_resnet).
std::unique_ptr<Model> make_resnet20(const ModelOptions& options, uint64_t seed);

}  // namespace mpicnn
