// Command-line machinery shared by the apps' option files (src/train/options.cpp,
// src/eval/options.cpp): the flag table's row (one per flag: its name and help, the field it
// fills, its conversion and, for ./train, the tasks that take it), Boost.ProgramOptions
// tokenising with one-line errors, value converters whose failures name the flag and what is
// accepted, and the --help layout. Each app keeps its own table, fields, cross-option checks
// and help prose; the flags several apps take are declared once in core/common_flags.h.
#pragma once
#include <boost/program_options.hpp>
#include <algorithm>
#include <concepts>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "core/task.h"

namespace mpicnn::cli {

// Value: takes an argument. Switch: "--x" alone means true; "--x=false|off|0" (or Boost's
// "--x false": a word that is not an option is taken as the value) sets it explicitly.
enum class Kind { Value, Switch, Help };

struct OptionDef {
  const char* name;        // long name (and the config file key)
  const char* short_name;  // "" for none; more than one letter ("lr") means the single-dash -lr
  const char* arg;         // metavariable in the help text: "N", "PATH", "[=BOOL]"
  Kind kind;
  std::string help;        // a string, so that a shared row can take a program's suffix
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

// ---- converter factories, for table rows -------------------------------------------------------
inline std::string text(const Given& g) { return g.value; }
inline auto int_from(int64_t lo) { return [lo](const Given& g) { return to_int(g, lo); }; }
inline auto int32_from(int64_t lo) { return [lo](const Given& g) { return to_int32(g, lo); }; }
inline auto number(std::function<bool(double)> ok, std::string expected) {
  return [ok = std::move(ok), expected = std::move(expected)](const Given& g) {
    return to_double(g, ok, expected);
  };
}
inline auto choice(std::vector<std::string> accepted) {
  return [accepted = std::move(accepted)](const Given& g) { return to_choice(g, accepted); };
}

// ---- flag tables: one row per flag ---------------------------------------------------------------
// A program's flags are a table of Flag rows; its parsing, --help, config keys, config record and
// per-task refusals all walk the rows, so that a flag is declared in one place.

// A value as the command line takes it back ("true", "0.05", "0.5,0.4", "conv1,bn1"): what a
// config record holds, exact for doubles and floats.
std::string value_text(const std::string& v);
std::string value_text(bool v);
template <std::integral T>
std::string value_text(T v) {
  return std::to_string(v);
}
std::string value_text(double v);
std::string value_text(const std::vector<float>& v);
std::string value_text(const std::vector<std::string>& v);  // a comma list
std::string value_text(Task t);

// Where a flag's value lives in a program's options struct and how it gets there. Empty (no
// parse) for rows that hold no option value: help, config.
template <class Options>
struct Binding {
  std::function<void(Options&, const Given&)> parse;         // convert, check, store
  std::function<std::string(const Options&)> text;           // value_text of the field
  std::function<bool(const Options&, const Options&)> same;  // the field is equal in both
  explicit operator bool() const { return bool(parse); }
};

// Binds `field` to `convert`: a function of the value (const Given&), or of the value and the
// options parsed so far (const Given&, const Options&), returning what the field holds.
template <class Options, class T, class Convert>
Binding<Options> bind_to(T Options::*field, Convert convert) {
  Binding<Options> b;
  b.parse = [field, convert](Options& o, const Given& g) {
    if constexpr (std::is_invocable_v<const Convert&, const Given&, const Options&>)
      o.*field = convert(g, o);
    else
      o.*field = convert(g);
  };
  b.text = [field](const Options& o) { return value_text(o.*field); };
  b.same = [field](const Options& x, const Options& y) { return x.*field == y.*field; };
  return b;
}

// The tasks that take a flag (./train's --task). A task that does not take it refuses every value
// but the flag's default; flipping a row between tasks is changing this one word.
enum class Tasks { none = 0, classify = 1, detection = 2, both = 3 };
inline bool takes(Tasks tasks, Task t) {
  return (unsigned(tasks) >> unsigned(t)) & 1u;
}

// Values a task refuses although it takes the flag (value_text forms): --task detection takes
// --device, but not cuda yet.
struct Refusal {
  Task task = Task::Classify;
  std::vector<std::string> values;  // none: nothing refused
};

// A flag several programs take (core/common_flags.h): its name, help and conversion, declared
// once; each program binds it to a field of its own options struct.
template <class T>
struct Shared {
  OptionDef def;
  std::function<T(const Given&)> convert;
};

// One row of a program's flag table: everything about one flag.
template <class Options>
struct Flag {
  OptionDef def;
  Binding<Options> value;
  Tasks tasks = Tasks::none;  // ./train: the tasks that take it (none: not decided)
  Refusal refusal;
  // A valid value other than the default: the table's tests parse it under every task that takes
  // the flag. One value, or one per task in Task order when no one value fits both (--model).
  std::vector<std::string> samples;

  Flag(OptionDef d, Binding<Options> v = {}, Tasks t = Tasks::none, std::vector<std::string> s = {},
       Refusal r = {})
      : def(std::move(d)), value(std::move(v)), tasks(t), refusal(std::move(r)),
        samples(std::move(s)) {}
  // A shared flag bound to this program's `field`.
  template <class T>
  Flag(const Shared<T>& shared, T Options::*field, Tasks t = Tasks::none,
       std::vector<std::string> s = {}, Refusal r = {})
      : Flag(shared.def, bind_to(field, shared.convert), t, std::move(s), std::move(r)) {}

  const std::string& sample(Task t) const {
    return samples.size() == 1 ? samples[0] : samples.at(size_t(t));
  }

  // Whether task `t` refuses the value `o` holds: by value, not by presence (a resumed run's
  // recorded configuration holds every key), so the default is always taken.
  bool refuses(const Options& o, Task t) const {
    if (!value) return false;
    if (!takes(tasks, t)) return !value.same(o, Options{});
    const auto& v = refusal.values;
    return refusal.task == t && std::find(v.begin(), v.end(), value.text(o)) != v.end();
  }
};

// The rows' option definitions, in table order (a Program's options).
template <class Options>
std::vector<OptionDef> option_defs(const std::vector<Flag<Options>>& flags) {
  std::vector<OptionDef> defs;
  for (const Flag<Options>& f : flags) defs.push_back(f.def);
  return defs;
}

}  // namespace mpicnn::cli
