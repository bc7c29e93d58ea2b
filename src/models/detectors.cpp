#include "models/detectors.h"

#include <algorithm>

#include "core/check.h"
#include "core/text.h"

namespace mpicnn {

const std::vector<std::string>& detection_model_names() {
  static const std::vector<std::string> names = {
      "fasterrcnn_resnet18_fpn", "fasterrcnn_resnet34_fpn", "fasterrcnn_resnet50_fpn"};
  return names;
}

std::string detection_body(const std::string& name) {
  const auto& names = detection_model_names();
  if (std::find(names.begin(), names.end(), name) == names.end())
    FAIL("unknown detection model '", name, "' (", join(names, ", "), ")");
  return name.substr(11, name.size() - 15);  // fasterrcnn_<body>_fpn
}

}  // namespace mpicnn
