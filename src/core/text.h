// The one string join of src/: every list of names in a message, a config value or a report
// line is made with it; and indent, for a block of lines inside a report.
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

// Every line of `text` with `prefix` before it: indent("a\nb\n", "  ") == "  a\n  b\n".
inline std::string indent(std::string_view text, std::string_view prefix) {
  std::string s;
  bool line_start = true;
  for (const char c : text) {
    if (line_start) s += prefix;
    s += c;
    line_start = c == '\n';
  }
  return s;
}

}  // namespace mpicnn
