// The list of models. Each family file provides its make_* function.
#include "models/registry.h"

#include "models/resnet.h"

namespace mpicnn {

const std::vector<ModelSpec>& model_specs() {
  static const std::vector<ModelSpec> specs = [] {
    std::vector<ModelSpec> v;
    for (const char* n : {"resnet18", "resnet34", "resnet50"})
      v.push_back({n, "torchvision ResNet", 224, 32,
                   [n](const ModelOptions& o, uint64_t seed) { return make_resnet(n, o, seed); }});
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

std::unique_ptr<Model> build_model(const std::string& name, const ModelOptions& options,
                                   uint64_t seed) {
  return model_spec(name).build(options, seed);
}

}  // namespace mpicnn
