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
  for (const std::string& p : parts) {
    if (!s.empty() || &p != &parts.front()) s += sep;
    s += p;
  }
  return s;
}

}  // namespace mpicnn
