// Command-line machinery shared by the apps' option files (src/train/options.cpp,
// src/eval/options.cpp): the option table, Boost.ProgramOptions tokenising with one-line errors,
// value converters whose failures name the flag and what is accepted, and the --help layout.
// Each app keeps its own table, fields, cross-option checks and help prose.
#pragma once
#include <boost/program_options.hpp>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace mpicnn::cli {

// Value: takes an argument. Switch: "--x" alone means true; "--x=false|off|0" (or Boost's
// "--x false": a word that is not an option is taken as the value) sets it explicitly.
enum class Kind { Value, Switch, Help };

struct OptionDef {
  const char* name;        // long name (and the config file key)
  const char* short_name;  // "" for none; more than one letter ("lr") means the single-dash -lr
  const char* arg;         // metavariable in the help text: "N", "PATH", "[=BOOL]"
  Kind kind;
  const char* help;
};

// What the parser needs to know about a program besides its options.
struct Program {
  std::string name;                // as users type it, for errors: "./train"
  std::vector<OptionDef> options;  // in help order
  std::string stray_hint;          // why a stray word is wrong, e.g. "the dataset is -d PATH"
};

const OptionDef& find_option(const Program& p, const std::string& name);
// How a flag is named in errors: "-b/--batch-size", "--momentum".
std::string flag_name(const OptionDef& d);

// Every option as a string value (switches take an implicit "true"). For a config file the help
// option and "config" itself are left out and short names are not registered.
boost::program_options::options_description describe(const Program& p, bool config_file);

// Tokenises the arguments after the program name. "--name=" is an empty value (Boost refuses
// it otherwise), multi-letter short names are rewritten to their long names, prefixes are never
// guessed, and unknown options and stray words fail with one line that says what to do.
boost::program_options::variables_map parse_command_line(const Program& p,
                                                         const std::vector<std::string>& args);

// One option's value and how to name it in an error.
struct Given {
  std::string value;
  std::string label;  // "-b/--batch-size" or "train.cfg:3: batch-size"
};

// ---- value conversions: each failure is one line "LABEL: 'VALUE' is not EXPECTED" -------------
[[noreturn]] void bad(const Given& g, const std::string& expected);
int64_t to_int(const Given& g, int64_t lo, int64_t hi = std::numeric_limits<int64_t>::max());
// An int field: "an integer >= LO" unless the value parsed and only overflowed int.
int to_int32(const Given& g, int64_t lo);
uint64_t to_uint64(const Given& g);
// `ok` decides the range; `expected` says it ("a number > 0").
double to_double(const Given& g, const std::function<bool(double)>& ok, const std::string& expected);
bool to_bool(const Given& g);  // true/on/yes/1, false/off/no/0, any case
std::string to_choice(const Given& g, const std::vector<std::string>& accepted);
// Per-channel values: empty, or 1 or 3 numbers; `positive` also requires each > 0.
std::vector<float> to_float_list(const Given& g, bool positive);

// "0.485,0.456,0.406" -> floats. `flag` names the option in errors ("--mean: 'x' in ... is not a
// number").
std::vector<float> parse_float_list(const std::string& text, const std::string& flag);
// Shortest forms that read back exactly (config records).
std::string format_double(double v);
std::string format_float_list(const std::vector<float>& v);

// The options part of --help: "  -b, --batch-size N   help text [default 64]", word-wrapped
// with a hanging indent to 100 columns. `defaults` maps long names to the shown default
// (missing or empty: none shown).
std::string format_options(const Program& p, const std::map<std::string, std::string>& defaults);

}  // namespace mpicnn::cli
