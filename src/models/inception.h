// Inception v3 exactly as torchvision 0.14 builds it with inception_v3(weights=None,
// aux_logits=True, transform_input=False, init_weights=True): names, shapes, state_dict order,
// initialisation, and the auxiliary head (AuxLogits), whose logits a training-mode forward also
// computes (Model::aux_outputs, weight 0.4 in the loss as torchvision's reference recipe).
// num_classes, in_channels and the dropout before fc come from ModelOptions. Not the
// transform_input variant (a fixed affine map of the input that ImageNet weights expect).
#pragma once
#include <memory>

#include "models/model.h"

namespace mpicnn {

std::unique_ptr<Model> make_inception_v3(const ModelOptions& options, uint64_t seed);

// torchvision's Inception3 init: every Conv2d and Linear weight trunc_normal_(0, stddev, a=-2,
// b=2) with stddev 0.1, except AuxLogits.fc (0.001); BatchNorm 1/0; Linear biases keep
// nn.Linear's default. (torchvision also sets stddev 0.01 on AuxLogits.conv1, but on the
// BasicConv2d, which its init loop does not read: that conv gets 0.1 there, and here.)
void init_inception_v3(Model& model, uint64_t seed);

}  // namespace mpicnn
