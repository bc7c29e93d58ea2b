// Model registry: build a model by name, list names with parameter counts and input sizes.
// Not a plugin system: every model the engine has is listed in registry.cpp.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "models/model.h"

namespace mpicnn {

struct ModelSpec {
  std::string name;
  std::string description;
  int default_size;  // input height/width the model is designed for
  int min_size;      // smallest input height/width it accepts
  std::function<std::unique_ptr<Model>(const ModelOptions&, uint64_t seed)> build;
  int min_batch = 1;  // the training batch min_size is for (registry.cpp)
};

const std::vector<ModelSpec>& model_specs();
// Throws an Error listing the known names when `name` is unknown.
const ModelSpec& model_spec(const std::string& name);
// One line per model for --help texts: "  resnet18        ResNet-18 ... (224x224)".
std::string model_list();
std::unique_ptr<Model> build_model(const std::string& name, const ModelOptions& options = {},
                                   uint64_t seed = 0);

}  // namespace mpicnn
