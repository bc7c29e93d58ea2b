// GoogLeNet exactly as torchvision 0.14 builds it with googlenet(weights=None, aux_logits=True,
// transform_input=False, init_weights=True): names, shapes, state_dict order, initialisation,
// and the auxiliary heads aux1 (on inception4a) and aux2 (on inception4d), whose logits a
// training-mode forward also computes (Model::aux_outputs, weight 0.3 each in the loss as
// torchvision's reference recipe). num_classes, in_channels, the dropout before fc
// (ModelOptions::dropout, torchvision's 0.2 when unset) and the heads' dropout
// (ModelOptions::aux_dropout, torchvision's dropout_aux, 0.7 when unset) from ModelOptions.
// Not the transform_input variant.
#pragma once
#include <memory>

#include "models/model.h"

namespace mpicnn {

std::unique_ptr<Model> make_googlenet(const ModelOptions& options, uint64_t seed);

// torchvision's GoogLeNet init: every Conv2d and Linear weight trunc_normal_(0, 0.01, a=-2,
// b=2), BatchNorm 1/0, Linear biases nn.Linear's default.
void init_googlenet(Model& model, uint64_t seed);

}  // namespace mpicnn
