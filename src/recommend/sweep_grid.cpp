// The sweep's grid file and the naming of its points (sweep.h). The file format is documented
// in docs/sweep.md and `recommend sweep -h`.
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "core/check.h"
#include "core/text.h"
#include "recommend/sweep.h"
#include "train/options.h"

namespace fs = std::filesystem;

namespace mpicnn::recommend::sweep {
namespace {

using Values = std::vector<std::string>;
struct Section {
  std::string name;
  std::string where;  // "FILE:LINE" of its [name] line
  std::vector<std::pair<std::string, Values>> keys;  // in file order
  std::map<std::string, std::string> key_where;      // "FILE:LINE" of each key's line
};

// Edit distance (insertions, deletions, substitutions) of a and b.
size_t distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
      diag = up;
    }
  }
  return row[b.size()];
}

// The option name nearest `key`: one that starts with it (batch -> batch-size), else the
// fewest edits.
std::string nearest(const std::string& key, const std::vector<std::string>& names) {
  for (const std::string& n : names)
    if (n.starts_with(key)) return n;
  return *std::min_element(names.begin(), names.end(), [&](const std::string& a, const std::string& b) {
    return distance(key, a) < distance(key, b);
  });
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

bool valid_word(const std::string& s, const char* extra) {
  if (s.empty()) return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && !std::strchr(extra, c)) return false;
  return true;
}

bool positive_int(const std::string& s) {
  if (s.empty() || s.size() > 6) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return std::stoi(s) >= 1;
}

// One "key = v1 v2 ..." line into the section; errors are GridError "FILE:LINE: ...".
void add_key_line(Section& sec, const std::string& text, const std::string& where) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos)
    throw GridError{where + ": expected 'key = values', '[block]' or a comment, got '" + text + "'"};
  std::string key = trim(text.substr(0, eq));
  if (key.rfind("--", 0) == 0) key = key.substr(2);
  if (!valid_word(key, "-_"))
    throw GridError{where + ": '" + key + "' is not an option name (letters, digits and '-')"};
  if (key == "save-dir" || key == "resume" || key == "progress" || key == "help")
    throw GridError{where + ": " + key + " is set by the sweep (each point's run directory, plain progress)"};
  // The sweep's own key, and ./train's options: the table ./train parses with.
  std::vector<std::string> names = train::option_names();
  names.push_back("ranks");
  if (std::find(names.begin(), names.end(), key) == names.end())
    throw GridError{where + ": '" + key + "' is not an option of ./train or the sweep (did you mean " +
                    nearest(key, names) + "?)"};
  std::istringstream in(text.substr(eq + 1));
  Values values;
  for (std::string v; in >> v;) values.push_back(v);
  if (values.empty()) throw GridError{where + ": " + key + " has no values"};
  if (key == "ranks")
    for (const std::string& v : values)
      if (!positive_int(v)) throw GridError{where + ": ranks '" + v + "' is not a positive integer"};
  for (const auto& [k, _] : sec.keys)
    if (k == key) throw GridError{where + ": " + key + " is given twice in this section"};
  sec.key_where[key] = where;
  sec.keys.emplace_back(key, std::move(values));
}

std::vector<Section> read_sections(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw GridError{path + ": cannot read the grid file"};
  std::vector<Section> sections(1);  // [0]: the lines before any [block]
  sections[0].where = path;
  std::set<std::string> names;
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    const std::string text = trim(line.substr(0, line.find('#')));
    if (text.empty()) continue;
    const std::string where = path + ":" + std::to_string(n);
    if (text.front() == '[') {
      const std::string name = text.back() == ']' ? trim(text.substr(1, text.size() - 2)) : "";
      if (!valid_word(name, "-_."))
        throw GridError{where + ": a block header is '[name]' (letters, digits, '-', '_', '.'), got '" + text + "'"};
      if (!names.insert(name).second) throw GridError{where + ": block [" + name + "] is given twice"};
      sections.push_back({name, where, {}, {}});
      continue;
    }
    add_key_line(sections.back(), text, where);
  }
  if (in.bad()) throw GridError{path + ": read error"};
  return sections;
}

// The cartesian product of `keys` (the last key varies fastest); `where` locates the keys'
// lines and, under "[block]", the block's.
void product(const std::vector<std::pair<std::string, Values>>& keys, const std::string& block,
             const std::map<std::string, std::string>& where, std::vector<GridPoint>& out) {
  std::vector<size_t> idx(keys.size(), 0);
  for (;;) {
    GridPoint p;
    p.block = block;
    p.where = where;
    for (size_t k = 0; k < keys.size(); ++k) {
      const std::string& v = keys[k].second[idx[k]];
      if (keys[k].first == "ranks") p.ranks = std::stoi(v);
      else p.options.emplace_back(keys[k].first, v);
    }
    out.push_back(std::move(p));
    size_t k = keys.size();
    while (k > 0 && ++idx[k - 1] == keys[k - 1].second.size()) idx[--k] = 0;
    if (k == 0) return;
  }
}

bool truthy(const std::string& v) { return v == "true" || v == "on" || v == "yes" || v == "1"; }

std::string sanitize(const std::string& s, size_t max_len) {
  std::string out;
  for (char c : s) out += std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' ? c : '_';
  return out.substr(0, max_len);
}

// "syn", "fmnist", or the data path's name ("fmnist_2k" for data/fmnist_2k/train.csv).
std::string data_tag(const std::map<std::string, std::string>& o) {
  const std::string data = o.at("data"), kind = o.at("dataset");
  const bool packaged = kind == "fashion-mnist" && fs::path(data).lexically_normal().filename() == "fashion-mnist";
  if (data.empty() || packaged) {
    if (kind == "synthetic") return "syn";
    if (kind == "fashion-mnist") return "fmnist";
    return sanitize(kind, 24);
  }
  fs::path p = fs::path(data).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  std::string stem = p.stem().string();
  if ((stem == "train" || stem == "data" || stem == "test") && !p.parent_path().filename().empty())
    stem = p.parent_path().filename().string();
  return sanitize(stem, 24);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// model-data-sSIZE-bBATCH-rRANKS-tTHREADS-wWORKERS-ddD-eEPOCHS[-device][-hash], the hash over
// every other option that differs from ./train's default, so a name is one configuration.
std::string point_name(const PointRun& plan, const std::map<std::string, std::string>& defaults) {
  const auto& o = plan.options;
  // Appended piecewise: GCC 12 warns falsely (-Wrestrict) on "literal" + std::string&&.
  std::string name = sanitize(o.at("model"), 32);
  auto add = [&name](const char* prefix, const std::string& v) { name.append(prefix).append(v); };
  add("-", data_tag(o));
  if (o.at("image-size") != "0") add("-s", sanitize(o.at("image-size"), 8));
  add("-b", sanitize(o.at("batch-size"), 8));
  add("-r", std::to_string(plan.point.ranks));
  add("-t", sanitize(o.at("threads"), 8));
  add("-w", sanitize(o.at("workers"), 8));
  add("-dd", truthy(o.at("distribute-data")) ? "1" : "0");
  add("-e", sanitize(o.at("epochs"), 8));
  if (o.at("device") != "auto") add("-", sanitize(o.at("device"), 8));
  static const std::set<std::string> named = {"model", "data", "dataset", "image-size", "batch-size",
                                              "threads", "workers", "distribute-data", "epochs",
                                              "device", "save-dir", "progress"};
  std::string rest;
  for (const auto& [k, v] : o) {
    const auto d = defaults.find(k);
    if (!named.count(k) && (d == defaults.end() || d->second != v)) rest += k + "=" + v + "\n";
  }
  if (!rest.empty()) {
    char hex[16];
    std::snprintf(hex, sizeof hex, "%06llx", static_cast<unsigned long long>(fnv1a(rest) & 0xffffff));
    add("-", hex);
  }
  return name;
}

}  // namespace

std::vector<GridPoint> read_grid(const std::string& path) {
  const std::vector<Section> sections = read_sections(path);
  std::vector<GridPoint> points;
  if (sections.size() == 1) {
    if (sections[0].keys.empty()) throw GridError{path + ": no configurations (no 'key = values' lines)"};
    auto where = sections[0].key_where;
    where["[block]"] = path;
    product(sections[0].keys, "", where, points);
    return points;
  }
  for (size_t s = 1; s < sections.size(); ++s) {
    const Section& b = sections[s];
    if (b.keys.empty()) throw GridError{b.where + ": block [" + b.name + "] has no 'key = values' lines"};
    auto keys = sections[0].keys;  // the top section's keys, overridden or extended by the block's
    auto where = sections[0].key_where;
    for (const auto& kv : b.keys) {
      auto it = std::find_if(keys.begin(), keys.end(), [&](const auto& x) { return x.first == kv.first; });
      if (it != keys.end()) it->second = kv.second;
      else keys.push_back(kv);
      where[kv.first] = b.key_where.at(kv.first);
    }
    where["[block]"] = b.where;
    product(keys, b.name, where, points);
  }
  return points;
}

std::vector<PointRun> prepare_points(const std::vector<GridPoint>& points) {
  const auto defaults = train::to_config(train::TrainOptions{});
  std::vector<PointRun> plans;
  std::set<std::string> seen;
  for (const GridPoint& p : points) {
    PointRun plan;
    plan.point = p;
    for (const auto& [k, v] : p.options) plan.train_args.push_back("--" + k + "=" + v);
    try {
      plan.options = train::to_config(train::parse_train_options(plan.train_args));
    } catch (const Error& e) {
      // ./train would refuse this point: name the line of the key its error names ("--KEY: ..."
      // or "-K/--KEY: ..."), else the block's.
      const std::string m = e.message();
      const size_t dash = m.find("--"), end = m.find_first_of(": =", dash == std::string::npos ? 0 : dash);
      const std::string flag = dash == std::string::npos || end == std::string::npos ? "" : m.substr(dash + 2, end - dash - 2);
      const auto key = std::find_if(p.options.begin(), p.options.end(), [&](const auto& kv) { return kv.first == flag; });
      if (key != p.options.end())
        throw GridError{p.where.at(flag) + ": " + flag + " = " + key->second + ": ./train refuses it: " + m};
      throw GridError{p.where.at("[block]") + ": " + (p.block.empty() ? "" : "[" + p.block + "] ") +
                      "./train refuses the point " + join(plan.train_args, " ") + ": " + m};
    }
    plan.options.erase("save-dir");
    plan.name = point_name(plan, defaults);
    if (seen.insert(plan.name).second) plans.push_back(std::move(plan));
  }
  return plans;
}

}  // namespace mpicnn::recommend::sweep
