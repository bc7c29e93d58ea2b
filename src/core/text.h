// The one string join of src/: every list of names in a message, a config value or a report
// line is made with it; indent, for a block of lines inside a report; and the small text rules
// shared by the data code (ASCII lower case, zero padding).
#pragma once
#include <cctype>
#include <cstdint>
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

// ASCII lower case (file extensions, format names): lower("X.JPEG") == "x.jpeg".
inline std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// v in decimal, zero-padded to `width` digits: zero_pad(7, 3) == "007" (wider numbers as they are).
inline std::string zero_pad(uint64_t v, int width) {
  std::string s = std::to_string(v);
  return s.size() < size_t(width) ? std::string(size_t(width) - s.size(), '0') + s : s;
}

}  // namespace mpicnn
