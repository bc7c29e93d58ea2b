// Shared command-line machinery (see cli.h). Boost.ProgramOptions does the tokenising; every
// value is taken as a string and converted here, so each bad value gets one line.
#include "core/cli.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstring>
#include <sstream>

#include "core/check.h"
#include "core/text.h"

namespace mpicnn::cli {

namespace po = boost::program_options;

namespace {

constexpr const char* kPositional = "positional-arguments";

bool multi_letter(const OptionDef& d) { return std::strlen(d.short_name) > 1; }

// "--name=" -> "--name" "" and "-lr[=X]" -> "--learning-rate[=X]" (Boost knows only one-letter
// short names).
std::vector<std::string> rewrite_args(const Program& p, const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (const std::string& a : args) {
    const OptionDef* multi = nullptr;
    std::string rest;
    for (const OptionDef& d : p.options) {
      const std::string s = std::string("-") + d.short_name;
      if (multi_letter(d) && (a == s || a.rfind(s + "=", 0) == 0)) {
        multi = &d;
        rest = a.substr(s.size());
      }
    }
    if (multi) {
      out.push_back(std::string("--") + multi->name + rest);
    } else if (a.size() > 3 && a.rfind("--", 0) == 0 && a.back() == '=' &&
               a.find('=') == a.size() - 1) {
      out.push_back(a.substr(0, a.size() - 1));
      out.push_back("");
    } else {
      out.push_back(a);
    }
  }
  return out;
}

}  // namespace

const OptionDef& find_option(const Program& p, const std::string& name) {
  for (const OptionDef& d : p.options)
    if (name == d.name) return d;
  FAIL("internal: ", p.name, " has no option '", name, "'");
}

std::string flag_name(const OptionDef& d) {
  return (*d.short_name ? std::string("-") + d.short_name + "/" : std::string()) + "--" + d.name;
}

po::options_description describe(const Program& p, bool config_file) {
  po::options_description desc;
  for (const OptionDef& d : p.options) {
    if (config_file && (d.kind == Kind::Help || std::strcmp(d.name, "config") == 0)) continue;
    std::string name = d.name;
    if (!config_file && std::strlen(d.short_name) == 1) name += std::string(",") + d.short_name;
    if (d.kind == Kind::Help)
      desc.add_options()(name.c_str(), "");
    else if (d.kind == Kind::Switch)
      desc.add_options()(name.c_str(), po::value<std::string>()->implicit_value("true"), "");
    else
      desc.add_options()(name.c_str(), po::value<std::string>(), "");
  }
  // Stray words are collected rather than left to Boost's "too many positional options".
  if (!config_file) desc.add_options()(kPositional, po::value<std::vector<std::string>>(), "");
  return desc;
}

po::variables_map parse_command_line(const Program& p, const std::vector<std::string>& args) {
  const po::options_description desc = describe(p, false);
  po::positional_options_description positional;
  positional.add(kPositional, -1);
  // No guessing: "--epoch" must not silently mean --epochs, nor "--check" --checkpoint.
  const int style = po::command_line_style::default_style & ~po::command_line_style::allow_guessing;
  const std::string see_help = " (" + p.name + " --help lists the options)";
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(rewrite_args(p, args))
                  .options(desc)
                  .positional(positional)
                  .style(style)
                  .run(),
              vm);
  } catch (const po::unknown_option& e) {
    const std::string name = e.get_option_name();
    // A glued value after a multi-letter short name ("-lr0.1") gets its accepted forms.
    for (const OptionDef& d : p.options)
      if (multi_letter(d) && name.rfind(std::string("-") + d.short_name, 0) == 0)
        FAIL("unknown option '", name, "' (", flag_name(d), " takes its value as -", d.short_name,
             " ", d.arg, ", -", d.short_name, "=", d.arg, " or --", d.name, " ", d.arg, ")");
    FAIL("unknown option '", name, "'", see_help);
  } catch (const po::error& e) {
    FAIL(e.what(), see_help);
  }
  if (vm.count(kPositional)) {
    const auto& words = vm[kPositional].as<std::vector<std::string>>();
    std::string list;
    for (size_t i = 0; i < words.size(); ++i) list += (i ? ", '" : "'") + words[i] + "'";
    FAIL("unexpected argument", words.size() > 1 ? "s " : " ", list, ": ", p.name,
         " takes only options (", p.stray_hint.empty() ? "" : p.stray_hint + "; ",
         "a switch's value goes after '=', as in --", [&] {
           for (const OptionDef& d : p.options)
             if (d.kind == Kind::Switch) return std::string(d.name);
           return std::string("name");
         }(), "=false)");
  }
  return vm;
}

// ---- value conversions --------------------------------------------------------------------------

void bad(const Given& g, const std::string& expected) {
  FAIL(g.label, ": '", g.value, "' is not ", expected);
}

int64_t to_int(const Given& g, int64_t lo, int64_t hi) {
  const std::string expected =
      hi == std::numeric_limits<int64_t>::max()
          ? "an integer >= " + std::to_string(lo)
          : "an integer from " + std::to_string(lo) + " to " + std::to_string(hi);
  int64_t v = 0;
  const char* end = g.value.data() + g.value.size();
  const auto [p, ec] = std::from_chars(g.value.data(), end, v);
  if (g.value.empty() || ec != std::errc() || p != end || v < lo || v > hi) bad(g, expected);
  return v;
}

int to_int32(const Given& g, int64_t lo) {
  const int64_t v = to_int(g, lo);
  if (v > std::numeric_limits<int>::max()) to_int(g, lo, std::numeric_limits<int>::max());
  return int(v);
}

uint64_t to_uint64(const Given& g) {
  uint64_t v = 0;
  const char* end = g.value.data() + g.value.size();
  const auto [p, ec] = std::from_chars(g.value.data(), end, v);
  if (g.value.empty() || ec != std::errc() || p != end) bad(g, "an integer from 0 to 2^64-1");
  return v;
}

double to_double(const Given& g, const std::function<bool(double)>& ok,
                 const std::string& expected) {
  double v = 0;
  const char* end = g.value.data() + g.value.size();
  const auto [p, ec] = std::from_chars(g.value.data(), end, v);
  if (g.value.empty() || ec != std::errc() || p != end || !std::isfinite(v) || !ok(v))
    bad(g, expected);
  return v;
}

bool to_bool(const Given& g) {
  std::string v = g.value;
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  if (v == "true" || v == "on" || v == "yes" || v == "1") return true;
  if (v == "false" || v == "off" || v == "no" || v == "0") return false;
  bad(g, "a switch value (true, on, yes, 1, false, off, no, 0)");
}

std::string to_choice(const Given& g, const std::vector<std::string>& accepted) {
  if (std::find(accepted.begin(), accepted.end(), g.value) != accepted.end()) return g.value;
  std::string list;
  for (size_t i = 0; i < accepted.size(); ++i)
    list += (i == 0 ? "" : i + 1 == accepted.size() ? " or " : ", ") + accepted[i];
  bad(g, "one of " + list);
}

std::vector<float> to_float_list(const Given& g, bool positive) {
  if (g.value.empty()) return {};
  const std::vector<float> v = parse_float_list(g.value, g.label);
  if (v.size() != 1 && v.size() != 3) bad(g, "a list of 1 or 3 numbers (one per channel)");
  if (positive)
    for (float x : v)
      if (!(x > 0)) bad(g, "a list of numbers > 0");
  return v;
}

std::vector<float> parse_float_list(const std::string& text, const std::string& flag) {
  std::vector<float> out;
  std::size_t pos = 0;
  while (true) {
    const std::size_t comma = std::min(text.find(',', pos), text.size());
    std::string item = text.substr(pos, comma - pos);
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    float v = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    CHECK(!item.empty() && ec == std::errc() && end == item.data() + item.size() && std::isfinite(v),
          flag, ": '", item, "' in '", text, "' is not a number (expected a list like 0.485,0.456,0.406)");
    out.push_back(v);
    if (comma == text.size()) break;
    pos = comma + 1;
  }
  return out;
}

std::string format_double(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string format_float_list(const std::vector<float>& v) {
  std::string s;
  for (float x : v) {
    char buf[32];
    const auto r = std::to_chars(buf, buf + sizeof buf, x);
    if (!s.empty()) s += ',';
    s.append(buf, r.ptr);
  }
  return s;
}

std::string value_text(const std::string& v) { return v; }
std::string value_text(bool v) { return v ? "true" : "false"; }
std::string value_text(double v) { return format_double(v); }
std::string value_text(const std::vector<float>& v) { return format_float_list(v); }
std::string value_text(const std::vector<std::string>& v) { return join(v, ","); }
std::string value_text(Task t) { return task_name(t); }

std::string format_options(const Program& p, const std::map<std::string, std::string>& defaults) {
  constexpr size_t kIndent = 30, kWidth = 100;
  std::string out;
  for (const OptionDef& d : p.options) {
    std::string head = "  ";
    head += *d.short_name ? std::string("-") + d.short_name + ", " : "    ";
    head += std::string("--") + d.name;
    if (*d.arg) head += std::string(d.arg[0] == '[' ? "" : " ") + d.arg;
    std::string help = d.help;
    const auto def = defaults.find(d.name);
    if (def != defaults.end() && !def->second.empty()) help += " [default " + def->second + "]";
    std::string line = head.size() + 1 < kIndent ? head + std::string(kIndent - head.size(), ' ')
                                                 : head + "\n" + std::string(kIndent, ' ');
    size_t col = kIndent;
    std::istringstream words(help);
    std::string w;
    bool first = true;
    while (words >> w) {
      if (!first && col + 1 + w.size() > kWidth) {
        line += "\n" + std::string(kIndent, ' ');
        col = kIndent;
      } else if (!first) {
        line += ' ';
        ++col;
      }
      line += w;
      col += w.size();
      first = false;
    }
    out += line + '\n';
  }
  return out;
}

}  // namespace mpicnn::cli
