// `./pipeline_eval` option parsing: Boost.ProgramOptions does the tokenising; every value is taken
// as a string and converted here, so each bad value gets one line naming the flag and what is
// accepted (the same scheme as ./train's, src/train/options.cpp). There is no config file. Not
// the evaluation and not its main: nothing here opens data, checkpoints or MPI.
#include "eval/options.h"

#include <algorithm>
#include <boost/program_options.hpp>
#include <cctype>
#include <charconv>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <sstream>

#include "core/check.h"
#include "data/dataset.h"
#include "data/transform.h"
#include "models/registry.h"

namespace mpicnn::eval {

namespace po = boost::program_options;

namespace {

// Value: takes an argument. Switch: "--x" alone means true; "--x=false|off|0" (or Boost's
// "--x false": a word that is not an option is taken as the value) sets it explicitly.
enum class Kind { Value, Switch, Help };

struct OptionDef {
  const char* name;        // long name
  const char* short_name;  // "" for none, else one letter
  const char* arg;         // placeholder in the help text
  Kind kind;
  const char* help;
};

const std::vector<OptionDef>& option_defs() {
  static const std::vector<OptionDef> defs = {
      {"checkpoint", "c", "RUN", Kind::Value,
       "the model to evaluate: a ./train run directory (its latest checkpoint), RUN/latest or a "
       "checkpoint directory; it names the model, class count and preprocessing"},
      {"weights", "", "FILE", Kind::Value,
       "instead of --checkpoint: a safetensors state dict with torchvision's parameter names "
       "(needs --model)"},
      {"model", "m", "NAME", Kind::Value,
       "with --weights: the architecture the weights belong to (see the list below)"},
      {"num-classes", "", "N", Kind::Value,
       "with --weights: classes of the model's last layer (>= 1; default: the dataset's count)"},
      {"in-channels", "", "N", Kind::Value,
       "with --weights: input channels of the model, 1 or 3 (default 3)"},
      {"data", "d", "PATH", Kind::Value,
       "dataset path: IDX folder, image folder (class subfolders, optional train/ and test/), "
       "CSV file, CIFAR binary folder; with --dataset fashion-mnist it may be left out (the "
       "Debian package's files, /usr/share/datasets/fashion-mnist)"},
      {"dataset", "", "KIND", Kind::Value,
       "auto, fashion-mnist, mnist, idx, imagefolder, csv, cifar10, cifar100 or synthetic; auto "
       "detects the format from --data"},
      {"split", "", "NAME", Kind::Value,
       "auto (test if the dataset has one, else all), train, test, val or all"},
      {"limit", "", "N", Kind::Value, "evaluate the first N samples only (0 = all)"},
      {"skip-bad", "", "[=BOOL]", Kind::Switch,
       "skip images that cannot be read or decoded (counted and listed in the report) instead "
       "of stopping"},
      {"image-size", "", "N", Kind::Value,
       "model input height = width, the center crop (>= 1; default: the checkpoint's, with "
       "--weights the model's default size)"},
      {"resize", "", "N", Kind::Value,
       "shorter image side before the center crop (>= 0; 0 = no resize; default: the "
       "checkpoint's, with --weights torchvision's 256 for 224 crops)"},
      {"mean", "", "LIST", Kind::Value,
       "normalisation means, 1 or 3 values, e.g. 0.485,0.456,0.406 (default: the "
       "checkpoint's, with --weights ImageNet's)"},
      {"std", "", "LIST", Kind::Value,
       "normalisation standard deviations, 1 or 3 values > 0 (default as for --mean)"},
      {"batch-size", "b", "N", Kind::Value, "images per predicted batch (>= 1)"},
      {"sequential", "", "[=BOOL]", Kind::Switch,
       "run every stage in rank 0 alone, one after the other (the baseline; other ranks idle)"},
      {"compare", "", "[=BOOL]", Kind::Switch,
       "run the sequential baseline first (rank 0 with all the node's cores), then the "
       "pipeline; report the speedup and whether the predictions are identical"},
      {"threads", "", "N", Kind::Value,
       "compute threads per predicting rank (>= 0; 0 = the node's cores / predicting ranks on the "
       "node: the other stages are light and sleep while they wait)"},
      {"credits", "", "N", Kind::Value,
       "samples allowed in flight between two stages (>= 0; 0 = 4 x batch size)"},
      {"batch-credits", "", "N", Kind::Value, "batches in flight per predicting rank (>= 1)"},
      {"output", "o", "DIR", Kind::Value,
       "write DIR/predictions.csv and DIR/report.json (default: write no files)"},
      {"json", "", "[=BOOL]", Kind::Switch,
       "print the JSON report on stdout instead of the text report"},
      {"device", "", "NAME", Kind::Value, "auto or cpu (this build has no CUDA backend)"},
      {"help", "h", "", Kind::Help, "print this help and exit"},
  };
  return defs;
}

const OptionDef& def_of(const std::string& name) {
  for (const OptionDef& d : option_defs())
    if (name == d.name) return d;
  FAIL("internal: no option '", name, "'");
}

// How a flag is named in errors: "-b/--batch-size", "--credits".
std::string flag_name(const OptionDef& d) {
  return (*d.short_name ? std::string("-") + d.short_name + "/" : std::string()) + "--" + d.name;
}

constexpr const char* kPositional = "positional-arguments";
constexpr const char* kSeeHelp = " (./pipeline_eval --help lists the options)";

po::options_description make_description() {
  po::options_description desc;
  for (const OptionDef& d : option_defs()) {
    std::string name = d.name;
    if (*d.short_name) name += std::string(",") + d.short_name;
    if (d.kind == Kind::Help)
      desc.add_options()(name.c_str(), "");
    else if (d.kind == Kind::Switch)
      desc.add_options()(name.c_str(), po::value<std::string>()->implicit_value("true"), "");
    else
      desc.add_options()(name.c_str(), po::value<std::string>(), "");
  }
  // Stray words are collected rather than left to Boost's "too many positional options".
  desc.add_options()(kPositional, po::value<std::vector<std::string>>(), "");
  return desc;
}

// One option's value and how to name it in an error.
struct Given {
  std::string value;
  std::string label;  // "-b/--batch-size"
};

// ---- value conversions: each failure is one line "LABEL: 'VALUE' is not EXPECTED" -------------

[[noreturn]] void bad(const Given& g, const std::string& expected) {
  FAIL(g.label, ": '", g.value, "' is not ", expected);
}

int64_t to_int(const Given& g, int64_t lo, int64_t hi = std::numeric_limits<int64_t>::max()) {
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

// An int field: the upper end is int's, but the message keeps the simple "an integer >= LO"
// form unless the value parsed and only overflowed.
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
  const std::vector<float> v = data::parse_float_list(g.value, g.label);
  if (v.size() != 1 && v.size() != 3) bad(g, "a list of 1 or 3 numbers (one per channel)");
  if (positive)
    for (float x : v)
      if (!(x > 0)) bad(g, "a list of numbers > 0");
  return v;
}

// Splits "--name=" into "--name" "": Boost refuses an empty value after '=', but an empty
// value ("--output=", "--mean=") is a value like any other.
std::vector<std::string> rewrite_args(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (const std::string& a : args) {
    if (a.size() > 3 && a.rfind("--", 0) == 0 && a.back() == '=' && a.find('=') == a.size() - 1) {
      out.push_back(a.substr(0, a.size() - 1));
      out.push_back("");
    } else {
      out.push_back(a);
    }
  }
  return out;
}

po::variables_map parse_command_line(const std::vector<std::string>& args) {
  const po::options_description desc = make_description();
  po::positional_options_description positional;
  positional.add(kPositional, -1);
  // No guessing: "--check" must not silently mean --checkpoint.
  const int style = po::command_line_style::default_style & ~po::command_line_style::allow_guessing;
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(rewrite_args(args))
                  .options(desc)
                  .positional(positional)
                  .style(style)
                  .run(),
              vm);
  } catch (const po::unknown_option& e) {
    FAIL("unknown option '", e.get_option_name(), "'", kSeeHelp);
  } catch (const po::error& e) {
    FAIL(e.what(), kSeeHelp);
  }
  if (vm.count(kPositional)) {
    const auto& words = vm[kPositional].as<std::vector<std::string>>();
    std::string list;
    for (size_t i = 0; i < words.size(); ++i) list += (i ? ", '" : "'") + words[i] + "'";
    FAIL("unexpected argument", words.size() > 1 ? "s " : " ", list,
         ": ./pipeline_eval takes only options (the dataset is -d PATH; a switch's value goes "
         "after '=', as in --skip-bad=false)");
  }
  return vm;
}

const std::vector<std::string> kDatasets = {"auto", "fashion-mnist", "mnist", "idx", "imagefolder",
                                            "csv", "cifar10", "cifar100", "synthetic"};

// The defaults the help shows, taken from EvalOptions itself so the two cannot drift. Options
// whose default is "decided later" (0 / empty) say so in their own help text instead.
std::map<std::string, std::string> shown_defaults() {
  const EvalOptions o;
  auto b = [](bool x) { return std::string(x ? "true" : "false"); };
  return {
      {"dataset", o.dataset},
      {"split", o.split},
      {"limit", std::to_string(o.limit)},
      {"skip-bad", b(o.skip_bad)},
      {"batch-size", std::to_string(o.batch_size)},
      {"sequential", b(o.sequential)},
      {"compare", b(o.compare)},
      {"threads", std::to_string(o.threads)},
      {"credits", std::to_string(o.credits)},
      {"batch-credits", std::to_string(o.batch_credits)},
      {"json", b(o.json)},
      {"device", o.device},
  };
}

}  // namespace

EvalOptions parse_eval_options(const std::vector<std::string>& args) {
  const po::variables_map cli = parse_command_line(args);
  EvalOptions o;
  if (cli.count("help")) {
    o.help = true;  // the rest is not validated: --help must work whatever else is on the line
    return o;
  }
  auto get = [&](const char* key) -> std::optional<Given> {
    if (!cli.count(key)) return std::nullopt;
    return Given{cli[key].as<std::string>(), flag_name(def_of(key))};
  };
  auto given = [&](const char* key) { return cli.count(key) > 0; };
  auto set = [&](const char* key, auto& field, auto convert) {
    if (const auto g = get(key)) field = convert(*g);
  };
  auto text = [](const Given& g) { return g.value; };
  auto int_from = [](int64_t lo) { return [lo](const Given& g) { return to_int(g, lo); }; };
  auto int32_from = [](int64_t lo) { return [lo](const Given& g) { return to_int32(g, lo); }; };

  set("checkpoint", o.checkpoint, text);
  set("weights", o.weights, text);
  set("model", o.model, [](const Given& g) {
    try {
      return model_spec(g.value).name;
    } catch (const Error& e) {
      FAIL(g.label, ": ", e.message());
    }
  });
  set("num-classes", o.num_classes, int32_from(1));
  set("in-channels", o.in_channels, [](const Given& g) {
    const int64_t c = to_int(g, 1, 3);
    if (c == 2) bad(g, "1 or 3 (grey or RGB input)");
    return int(c);
  });
  set("data", o.data, text);
  set("dataset", o.dataset, [](const Given& g) { return to_choice(g, kDatasets); });
  set("split", o.split,
      [](const Given& g) { return to_choice(g, {"auto", "train", "test", "val", "all"}); });
  set("limit", o.limit, to_uint64);
  set("skip-bad", o.skip_bad, to_bool);
  set("image-size", o.image_size, int32_from(1));
  set("resize", o.resize, int32_from(0));
  set("mean", o.mean, [](const Given& g) { return to_float_list(g, false); });
  set("std", o.std, [](const Given& g) { return to_float_list(g, true); });
  set("batch-size", o.batch_size, int_from(1));
  set("sequential", o.sequential, to_bool);
  set("compare", o.compare, to_bool);
  set("threads", o.threads, int32_from(0));
  set("credits", o.credits, int32_from(0));
  set("batch-credits", o.batch_credits, int32_from(1));
  set("output", o.output, text);
  set("json", o.json, to_bool);
  set("device", o.device, [](const Given& g) {
    if (g.value == "cuda") FAIL(g.label, " cuda: this build has no CUDA backend (CPU only)");
    return to_choice(g, {"auto", "cpu"});
  });

  // ---- checks across options ------------------------------------------------------------------
  // What to evaluate: a checkpoint (which names its model), or a state dict and a model name.
  const bool has_checkpoint = !o.checkpoint.empty(), has_weights = !o.weights.empty();
  CHECK(!(has_checkpoint && has_weights),
        "give --checkpoint RUN or --weights FILE --model NAME (not both)");
  CHECK(has_checkpoint || has_weights,
        "give --checkpoint RUN or --weights FILE --model NAME (nothing to evaluate)");
  if (has_checkpoint) {
    for (const char* key : {"model", "num-classes", "in-channels"})
      CHECK(!given(key), flag_name(def_of(key)), ": the checkpoint names the ",
            std::strcmp(key, "model") == 0         ? "model"
            : std::strcmp(key, "num-classes") == 0 ? "class count"
                                                   : "input channels",
            "; --", key, " goes with --weights");
  } else {
    CHECK(!o.model.empty(), "--weights needs --model NAME (the architecture of the state dict)");
  }
  CHECK(!(o.sequential && o.compare),
        "--sequential and --compare: --compare already runs the sequential baseline before the "
        "pipeline (give one of the two)");

  // The channel lists must fit the input channels when those are known here (--in-channels).
  if (o.in_channels == 1)
    for (const char* key : {"mean", "std"}) {
      const auto& list = std::strcmp(key, "mean") == 0 ? o.mean : o.std;
      CHECK(list.size() <= 1, flag_name(def_of(key)), ": ", list.size(),
            " values for --in-channels 1 (give 1 value)");
    }

  // The data: a path, or a kind that needs none. An empty --data= counts as none.
  if (o.data.empty()) {
    CHECK(given("dataset"), "-d/--data: no dataset given (a path, or --dataset fashion-mnist)");
    CHECK(o.dataset == "fashion-mnist" || o.dataset == "synthetic", "--dataset: '", o.dataset,
          "' needs -d/--data PATH (only fashion-mnist and synthetic have no path)");
  }
  return o;
}

std::string eval_help() {
  const std::map<std::string, std::string> defaults = shown_defaults();
  constexpr size_t kIndent = 30, kWidth = 100;
  std::ostringstream out;
  out << "Usage: mpiexec -n K ./pipeline_eval --checkpoint RUN -d DATA [options]\n"
         "       ./pipeline_eval --weights FILE --model NAME -d DATA [options]\n"
         "Evaluates a trained CNN on a dataset with the work pipelined across MPI ranks: reading,\n"
         "decoding and resizing, normalising and batching, and predicting run on different ranks\n"
         "at the same time. Rank 0 collects the predictions and prints the report (accuracy,\n"
         "top-5, per-class precision and recall, per-stage busy time, throughput, latency).\n"
         "\nOptions:\n";
  for (const OptionDef& d : option_defs()) {
    std::string head = "  ";
    head += *d.short_name ? std::string("-") + d.short_name + ", " : "    ";
    head += std::string("--") + d.name;
    if (*d.arg) head += std::string(d.arg[0] == '[' ? "" : " ") + d.arg;
    std::string help = d.help;
    const auto def = defaults.find(d.name);
    if (def != defaults.end() && !def->second.empty()) help += " [default " + def->second + "]";
    // Hanging-indent word wrap, so long descriptions stay readable in a 100-column terminal.
    std::string line = head.size() + 1 < kIndent ? head + std::string(kIndent - head.size(), ' ')
                                                 : head + "\n" + std::string(kIndent, ' ');
    size_t col = line.size() - (line.rfind('\n') == std::string::npos ? 0 : line.rfind('\n') + 1);
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
    out << line << '\n';
  }
  out << "\nModels (--model, with --weights):\n";
  for (const ModelSpec& s : model_specs())
    out << "  " << s.name << std::string(s.name.size() < 16 ? 16 - s.name.size() : 1, ' ')
        << s.description << " (" << s.default_size << "x" << s.default_size << ")\n";
  out << "\nSwitches (--skip-bad, --sequential, --compare, --json) alone mean true; a value sets\n"
         "them: --skip-bad=false, --json=on (true/on/yes/1, false/off/no/0).\n"
         "\nStages on K ranks (mpiexec -n K):\n"
         "  K >= 4   rank 0 reads the files (raw bytes) | rank 1 decodes and resizes | rank 2\n"
         "           normalises and batches | ranks 3..K-1 predict (each batch goes to whichever\n"
         "           predictor is free)\n"
         "  K = 3    rank 0 reads | rank 1 decodes, resizes, normalises and batches | rank 2 predicts\n"
         "  K = 2    rank 0 reads, decodes, resizes, normalises and batches | rank 1 predicts\n"
         "  K = 1    everything in one process\n"
         "Rank 0 also collects the predictions and prints the report. --credits and\n"
         "--batch-credits bound the samples and batches in flight, so a fast stage cannot run\n"
         "far ahead of a slow one.\n"
         "\nOutput:\n"
         "  stdout          the text report: top-1 and top-5 accuracy, confusion matrix, per-class\n"
         "                  precision and recall, skipped images, per-stage busy time and\n"
         "                  utilisation, throughput, per-image latency percentiles and, with\n"
         "                  --compare, the speedup over the sequential baseline (--json: the same\n"
         "                  as JSON)\n"
         "  --output DIR    DIR/predictions.csv (index, path, label, prediction, its probability,\n"
         "                  the top-5 class ids) and DIR/report.json\n"
         "\nExamples:\n"
         "  mpiexec -n 6 --oversubscribe ./pipeline_eval --checkpoint runs/lenet-x \\\n"
         "      -d /usr/share/datasets/fashion-mnist\n"
         "  mpiexec -n 4 ./pipeline_eval --checkpoint runs/r20 --dataset cifar10 \\\n"
         "      -d data/cifar-10-batches-bin --compare          pipeline vs. sequential, speedup\n"
         "  ./pipeline_eval --weights resnet18.safetensors --model resnet18 -d photos/ \\\n"
         "      --num-classes 1000 --skip-bad -o out/           ImageNet-style eval, files in out/\n"
         "  mpiexec -n 5 ./pipeline_eval -c runs/lenet-x --dataset fashion-mnist --json --limit 1000\n";
  return out.str();
}

}  // namespace mpicnn::eval
