// The one string join of src/: every list of names in a message, a config value or a report
// line is made with it.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace mpicnn {

// The parts with `sep` between them: join({"a", "b", "c"}, ", ") == "a, b, c"; "" for none.
inline std::string join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string s;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) s += sep;
    s += parts[i];
  }
  return s;
}

}  // namespace mpicnn
