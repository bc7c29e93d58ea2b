// `./train` option parsing: Boost.ProgramOptions does the tokenising (command line and config
// file); every value is taken as a string and converted here, so each bad value gets one line
// naming the flag (or file:line: key) and what is accepted. Not the trainer and not its main.
#include "train/options.h"

#include <algorithm>
#include <boost/program_options.hpp>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <sstream>

#include "core/check.h"
#include "data/dataset.h"
#include "data/transform.h"
#include "models/registry.h"
#include "optim/schedule.h"

namespace mpicnn::train {

namespace po = boost::program_options;

namespace {

// Value: takes an argument. Switch: "--x" alone means true; "--x=false|off|0" (or Boost's
// "--x false": a word that is not an option is taken as the value) sets it explicitly.
enum class Kind { Value, Switch, Help };

struct OptionDef {
  const char* name;   // long name, and the config file key
  const char* short_name;  // "" for none; "lr" is the single-dash multi-letter -lr
  const char* arg;    // placeholder in the help text
  Kind kind;
  const char* help;
};

const std::vector<OptionDef>& option_defs() {
  static const std::vector<OptionDef> defs = {
      {"model", "m", "NAME", Kind::Value, "model to train (see the list below)"},
      {"data", "d", "PATH", Kind::Value,
       "dataset path: IDX folder, image folder (class subfolders, optional train/ and test/), "
       "CSV file, CIFAR binary folder; fashion-mnist defaults to the Debian package's files"},
      {"dataset", "", "KIND", Kind::Value,
       "auto, fashion-mnist, mnist, idx, imagefolder, csv, cifar10, cifar100 or synthetic; "
       "auto detects the format from --data. Without --data and --dataset: fashion-mnist; "
       "with --data only: auto"},
      {"batch-size", "b", "N", Kind::Value, "images per step on each rank (>= 1)"},
      {"epochs", "e", "N", Kind::Value, "passes over the training data (>= 1)"},
      {"learning-rate", "lr", "LR", Kind::Value,
       "base learning rate (> 0); also -lr LR or -lr=LR"},
      {"momentum", "", "M", Kind::Value, "SGD momentum, in [0, 1); AdamW ignores it"},
      {"weight-decay", "", "WD", Kind::Value, "L2 penalty (SGD) or decoupled decay (AdamW), >= 0"},
      {"optimizer", "", "NAME", Kind::Value, "sgd or adamw"},
      {"nesterov", "", "[=BOOL]", Kind::Switch, "Nesterov momentum (SGD with momentum > 0)"},
      {"schedule", "", "SPEC", Kind::Value,
       "learning-rate schedule: constant | step:SIZE:GAMMA | multistep:M1,M2,...:GAMMA | "
       "cosine[:ETA_MIN], optionally after warmup:W[:START]+ (e.g. step:30:0.1, "
       "warmup:5+cosine); epochs count after the warmup"},
      {"warmup-epochs", "", "N", Kind::Value,
       "linear warmup epochs before the schedule (>= 0; same as a warmup:N+ prefix)"},
      {"scale-lr", "", "[=BOOL]", Kind::Switch,
       "linear scaling rule: lr x global batch (batch-size x ranks) / 256"},
      {"workers", "w", "N", Kind::Value, "data loader threads per rank (>= 0; 0 = none)"},
      {"mean", "", "LIST", Kind::Value,
       "normalisation means per channel, e.g. 0.485,0.456,0.406 (empty = the dataset's)"},
      {"std", "", "LIST", Kind::Value,
       "normalisation standard deviations per channel, > 0 (empty = the dataset's)"},
      {"augment", "", "NAME", Kind::Value,
       "training augmentation: none, flip (horizontal), crop-flip (padded random crop + flip, "
       "CIFAR style) or imagenet (random resized crop + flip)"},
      {"image-size", "", "N", Kind::Value,
       "model input height and width; 0 = the dataset's size for fixed-size datasets, else "
       "the model's default size"},
      {"skip-bad", "", "[=BOOL]", Kind::Switch,
       "skip images that cannot be read or decoded (counted and reported) instead of stopping"},
      {"distribute-data", "", "[=BOOL]", Kind::Switch,
       "split each epoch's data between the ranks; --distribute-data=false: every rank trains "
       "on the whole dataset"},
      {"save-dir", "s", "DIR", Kind::Value, "run directory (default: runs/<model>-<timestamp>)"},
      {"resume", "", "PATH", Kind::Value, "continue from a checkpoint or a run directory's latest"},
      {"seed", "", "N", Kind::Value, "seed of every random draw (>= 0)"},
      {"threads", "", "N", Kind::Value,
       "compute threads per rank (>= 0; 0 = cores per node / ranks per node)"},
      {"eval-every", "", "N", Kind::Value, "evaluate on the test split every N epochs (0 = never)"},
      {"checkpoint-every", "", "N", Kind::Value,
       "checkpoint every N epochs (0 = only at the end)"},
      {"keep-checkpoints", "", "N", Kind::Value, "newest checkpoints kept (0 = all)"},
      {"progress", "", "MODE", Kind::Value,
       "auto (bar on a terminal, plain lines in batch logs), bar, plain or none"},
      {"check-sync", "", "N", Kind::Value,
       "every N steps check that all ranks hold the same weights (0 = off)"},
      {"bucket-mb", "", "MB", Kind::Value, "gradient allreduce bucket size in MiB (> 0)"},
      {"device", "", "NAME", Kind::Value, "auto or cpu (this build has no CUDA backend)"},
      {"config", "", "FILE", Kind::Value,
       "read options from FILE (format below); command-line values override the file's"},
      {"help", "h", "", Kind::Help, "print this help and exit"},
  };
  return defs;
}

const OptionDef& def_of(const std::string& name) {
  for (const OptionDef& d : option_defs())
    if (name == d.name) return d;
  FAIL("internal: no option '", name, "'");
}

// How a flag is named in errors: "-b/--batch-size", "--momentum".
std::string flag_name(const OptionDef& d) {
  return (*d.short_name ? std::string("-") + d.short_name + "/" : std::string()) + "--" + d.name;
}

bool in_file(const OptionDef& d) { return d.kind != Kind::Help && std::strcmp(d.name, "config"); }

constexpr const char* kPositional = "positional-arguments";

po::options_description make_description(bool for_file) {
  po::options_description desc;
  for (const OptionDef& d : option_defs()) {
    if (for_file && !in_file(d)) continue;
    std::string name = d.name;
    // Boost knows only one-letter short names; -lr is rewritten to --learning-rate beforehand.
    if (!for_file && std::strlen(d.short_name) == 1) name += std::string(",") + d.short_name;
    if (d.kind == Kind::Help)
      desc.add_options()(name.c_str(), "");
    else if (d.kind == Kind::Switch)
      desc.add_options()(name.c_str(), po::value<std::string>()->implicit_value("true"), "");
    else
      desc.add_options()(name.c_str(), po::value<std::string>(), "");
  }
  // Stray words are collected rather than left to Boost's "too many positional options".
  if (!for_file) desc.add_options()(kPositional, po::value<std::vector<std::string>>(), "");
  return desc;
}

std::string file_keys() {
  std::string keys;
  for (const OptionDef& d : option_defs())
    if (in_file(d)) keys += (keys.empty() ? "" : ", ") + std::string(d.name);
  return keys;
}

// The 1-based line of `key = ...` in a config file's text; 0 when not found (e.g. in a section).
int key_line(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const size_t b = line.find_first_not_of(" \t");
    if (b == std::string::npos || line.compare(b, key.size(), key) != 0) continue;
    const size_t e = line.find_first_not_of(" \t", b + key.size());
    if (e != std::string::npos && line[e] == '=') return n;
  }
  return 0;
}

// One option's value and how to name it in an error.
struct Given {
  std::string value;
  std::string label;  // "-b/--batch-size" or "train.cfg:3: batch-size"
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

uint64_t to_uint64(const Given& g) {
  uint64_t v = 0;
  const char* end = g.value.data() + g.value.size();
  const auto [p, ec] = std::from_chars(g.value.data(), end, v);
  if (g.value.empty() || ec != std::errc() || p != end) bad(g, "an integer from 0 to 2^64-1");
  return v;
}

// `ok` decides the range; `expected` says it ("a number > 0").
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
  const std::vector<float> v = data::parse_float_list(g.value, g.label);
  if (v.size() != 1 && v.size() != 3) bad(g, "a list of 1 or 3 numbers (one per channel)");
  if (positive)
    for (float x : v)
      if (!(x > 0)) bad(g, "a list of numbers > 0");
  return v;
}

std::string format_double(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);  // shortest form that reads back exact
  return std::string(buf, r.ptr);
}

std::string format_list(const std::vector<float>& v) {
  std::string s;
  for (float x : v) {
    char buf[32];
    const auto r = std::to_chars(buf, buf + sizeof buf, x);
    if (!s.empty()) s += ',';
    s.append(buf, r.ptr);
  }
  return s;
}

// Rewrites the single-dash multi-letter -lr, which Boost would read as -l with the value "r",
// and splits "--name=" into "--name" "": Boost refuses an empty value after '=', but to_config
// writes empty values (no --mean, no --save-dir) and they must read back.
std::vector<std::string> rewrite_args(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (const std::string& a : args) {
    if (a == "-lr") {
      out.push_back("--learning-rate");
    } else if (a.rfind("-lr=", 0) == 0) {
      out.push_back("--learning-rate=" + a.substr(4));
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

po::variables_map parse_command_line(const std::vector<std::string>& args) {
  const po::options_description desc = make_description(false);
  po::positional_options_description positional;
  positional.add(kPositional, -1);
  // No guessing: "--epoch" must not silently mean --epochs, nor "--check" be ambiguous.
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
    const std::string name = e.get_option_name();
    FAIL("unknown option '", name, "'",
         name.rfind("-l", 0) == 0 ? " (the learning rate is -lr LR, -lr=LR or --learning-rate LR)"
                      : " (./train --help lists the options)");
  } catch (const po::error& e) {
    FAIL(e.what(), " (./train --help lists the options)");
  }
  if (vm.count(kPositional)) {
    const std::string word = vm[kPositional].as<std::vector<std::string>>().front();
    FAIL("unexpected argument '", word,
         "': ./train takes only options (a switch's value goes after '=', as in "
         "--distribute-data=false)");
  }
  return vm;
}

struct ConfigFile {
  std::string path, text;
  po::variables_map vm;
};

ConfigFile read_config(const std::string& path) {
  ConfigFile cf;
  cf.path = path;
  std::ifstream in(path, std::ios::binary);
  CHECK(in.is_open(), "--config: cannot read '", path, "' (", std::strerror(errno), ")");
  std::ostringstream ss;
  ss << in.rdbuf();
  CHECK(!in.bad(), "--config: cannot read '", path, "'");
  cf.text = ss.str();
  std::istringstream text(cf.text);
  try {
    po::store(po::parse_config_file(text, make_description(true), false), cf.vm);
  } catch (const po::unknown_option& e) {
    const std::string key = e.get_option_name();
    const int line = key_line(cf.text, key);
    FAIL(path, line ? ":" + std::to_string(line) : std::string(), ": unknown key '", key,
         "' (keys are the long option names: ", file_keys(), ")");
  } catch (const po::error& e) {
    FAIL(path, ": ", e.what(), " (expected 'key = value' lines and # comments)");
  }
  return cf;
}

// Command-line values first, then the config file's, then the base configuration's (a resumed
// checkpoint's recorded options).
class Values {
 public:
  Values(const po::variables_map& cli, const ConfigFile* file, const Config* base, std::string base_name)
      : cli_(cli), file_(file), base_(base), base_name_(std::move(base_name)) {}

  std::optional<Given> get(const std::string& key) const {
    const OptionDef& d = def_of(key);
    if (cli_.count(key)) return Given{cli_[key].as<std::string>(), flag_name(d)};
    if (file_ && file_->vm.count(key)) {
      const int line = key_line(file_->text, key);
      return Given{file_->vm[key].as<std::string>(),
                   file_->path + (line ? ":" + std::to_string(line) : std::string()) + ": " + key};
    }
    if (base_) {
      const auto it = base_->find(key);
      if (it != base_->end()) return Given{it->second, base_name_ + ": " + key};
    }
    return std::nullopt;
  }
  // The label for errors about a value that may be the default.
  std::string label(const std::string& key) const {
    const auto g = get(key);
    return g ? g->label : flag_name(def_of(key));
  }

 private:
  const po::variables_map& cli_;
  const ConfigFile* file_;
  const Config* base_;
  std::string base_name_;
};

const std::vector<std::string> kDatasets = {"auto", "fashion-mnist", "mnist", "idx", "imagefolder",
                                            "csv", "cifar10", "cifar100", "synthetic"};

}  // namespace

std::string TrainOptions::schedule_spec() const {
  return warmup_epochs > 0 ? "warmup:" + std::to_string(warmup_epochs) + "+" + schedule : schedule;
}

TrainOptions parse_train_options(const std::vector<std::string>& args) {
  return parse_train_options(args, nullptr, "");
}

TrainOptions parse_train_options(const std::vector<std::string>& args, const Config* base,
                                 const std::string& base_name) {
  const po::variables_map cli = parse_command_line(args);
  TrainOptions o;
  if (cli.count("help")) {
    o.help = true;  // the rest is not validated: --help must work whatever else is on the line
    return o;
  }
  std::optional<ConfigFile> file;
  if (cli.count("config")) {
    o.config = cli["config"].as<std::string>();
    file = read_config(o.config);
  }
  const Values v(cli, file ? &*file : nullptr, base, base_name);
  auto set = [&](const char* key, auto& field, auto convert) {
    if (const auto g = v.get(key)) field = convert(*g);
  };
  auto text = [](const Given& g) { return g.value; };
  auto int_from = [](int64_t lo) { return [lo](const Given& g) { return to_int(g, lo); }; };
  auto int32_from = [](int64_t lo) {
    return [lo](const Given& g) { return int(to_int(g, lo, std::numeric_limits<int>::max())); };
  };

  set("model", o.model, [](const Given& g) {
    try {
      return model_spec(g.value).name;
    } catch (const Error& e) {
      FAIL(g.label, ": ", e.message());
    }
  });
  set("data", o.data, text);
  set("dataset", o.dataset, [](const Given& g) { return to_choice(g, kDatasets); });
  set("batch-size", o.batch_size, int_from(1));
  set("epochs", o.epochs, int_from(1));
  set("learning-rate", o.learning_rate, [](const Given& g) {
    return to_double(g, [](double x) { return x > 0; }, "a number > 0");
  });
  set("momentum", o.momentum, [](const Given& g) {
    return to_double(g, [](double x) { return x >= 0 && x < 1; }, "a number in [0, 1)");
  });
  set("weight-decay", o.weight_decay, [](const Given& g) {
    return to_double(g, [](double x) { return x >= 0; }, "a number >= 0");
  });
  set("optimizer", o.optimizer, [](const Given& g) { return to_choice(g, {"sgd", "adamw"}); });
  set("nesterov", o.nesterov, to_bool);
  set("schedule", o.schedule, text);
  set("warmup-epochs", o.warmup_epochs, int_from(0));
  set("scale-lr", o.scale_lr, to_bool);
  set("workers", o.workers, int32_from(0));
  set("mean", o.mean, [](const Given& g) { return to_float_list(g, false); });
  set("std", o.std, [](const Given& g) { return to_float_list(g, true); });
  set("augment", o.augment,
      [](const Given& g) { return to_choice(g, {"none", "flip", "crop-flip", "imagenet"}); });
  set("image-size", o.image_size, int32_from(0));
  set("skip-bad", o.skip_bad, to_bool);
  set("distribute-data", o.distribute_data, to_bool);
  set("save-dir", o.save_dir, text);
  set("resume", o.resume, text);
  set("seed", o.seed, to_uint64);
  set("threads", o.threads, int32_from(0));
  set("eval-every", o.eval_every, int_from(0));
  set("checkpoint-every", o.checkpoint_every, int_from(0));
  set("keep-checkpoints", o.keep_checkpoints, int32_from(0));
  set("progress", o.progress,
      [](const Given& g) { return to_choice(g, {"auto", "bar", "plain", "none"}); });
  set("check-sync", o.check_sync, int_from(0));
  set("bucket-mb", o.bucket_mb, [](const Given& g) {
    return to_double(g, [](double x) { return x > 0 && x <= 1 << 20; }, "a number > 0 (MiB)");
  });
  set("device", o.device, [](const Given& g) {
    if (g.value == "cuda") FAIL(g.label, ": this build has no CUDA backend (accepted: auto, cpu)");
    return to_choice(g, {"auto", "cpu"});
  });

  // ---- checks across options ------------------------------------------------------------------
  // Fashion-MNIST is the default only when the user named no data at all; a path alone means
  // "detect its format". An empty --data= (as to_config writes for synthetic) counts as none.
  const bool data_given = !o.data.empty(), kind_given = v.get("dataset").has_value();
  if (!kind_given) o.dataset = data_given ? "auto" : "fashion-mnist";
  if (!data_given) {
    if (o.dataset == "fashion-mnist")
      o.data = data::kFashionMnistDefaultPath;
    else
      CHECK(o.dataset == "synthetic", v.label("dataset"), ": '", o.dataset,
            "' needs -d/--data PATH (only fashion-mnist and synthetic have no path)");
  }
  if (o.image_size > 0) {
    const ModelSpec& m = model_spec(o.model);
    CHECK(o.image_size >= m.min_size, v.label("image-size"), ": '", o.image_size,
          "' is below ", m.name, "'s smallest input (expected 0 = auto, or >= ", m.min_size, ")");
  }
  if (o.nesterov)
    CHECK(o.optimizer == "sgd" && o.momentum > 0, v.label("nesterov"),
          ": Nesterov momentum needs --optimizer sgd and --momentum > 0");
  CHECK(o.warmup_epochs == 0 || o.schedule.rfind("warmup", 0) != 0, v.label("warmup-epochs"),
        ": the schedule '", o.schedule, "' has its own warmup (use one of the two)");
  try {
    (void)parse_lr_schedule(o.schedule_spec(), o.learning_rate, o.epochs);
  } catch (const Error& e) {
    FAIL(v.get("schedule") ? v.label("schedule") : v.label("warmup-epochs"), ": ", e.message());
  }
  return o;
}

TrainOptions parse_train_options(int argc, const char* const* argv) {
  CHECK(argc >= 1 && argv != nullptr, "parse_train_options: argv must hold the program name");
  return parse_train_options(std::vector<std::string>(argv + 1, argv + argc));
}

std::map<std::string, std::string> to_config(const TrainOptions& o) {
  auto b = [](bool x) { return std::string(x ? "true" : "false"); };
  auto i = [](auto x) { return std::to_string(x); };
  return {
      {"model", o.model},
      {"data", o.data},
      {"dataset", o.dataset},
      {"batch-size", i(o.batch_size)},
      {"epochs", i(o.epochs)},
      {"learning-rate", format_double(o.learning_rate)},
      {"momentum", format_double(o.momentum)},
      {"weight-decay", format_double(o.weight_decay)},
      {"optimizer", o.optimizer},
      {"nesterov", b(o.nesterov)},
      {"schedule", o.schedule},
      {"warmup-epochs", i(o.warmup_epochs)},
      {"scale-lr", b(o.scale_lr)},
      {"workers", i(o.workers)},
      {"mean", format_list(o.mean)},
      {"std", format_list(o.std)},
      {"augment", o.augment},
      {"image-size", i(o.image_size)},
      {"skip-bad", b(o.skip_bad)},
      {"distribute-data", b(o.distribute_data)},
      {"save-dir", o.save_dir},
      {"resume", o.resume},
      {"seed", i(o.seed)},
      {"threads", i(o.threads)},
      {"eval-every", i(o.eval_every)},
      {"checkpoint-every", i(o.checkpoint_every)},
      {"keep-checkpoints", i(o.keep_checkpoints)},
      {"progress", o.progress},
      {"check-sync", i(o.check_sync)},
      {"bucket-mb", format_double(o.bucket_mb)},
      {"device", o.device},
  };
}

std::string train_help() {
  // Defaults shown are the parser's own (parsing no arguments), so the help cannot drift.
  const std::map<std::string, std::string> defaults = to_config(parse_train_options({}));
  constexpr size_t kIndent = 30, kWidth = 100;
  std::ostringstream out;
  out << "Usage: mpiexec -n RANKS ./train [options]     (or ./train [options] for one rank)\n"
         "Trains a CNN data-parallel over MPI ranks: each rank runs --batch-size images per step\n"
         "and gradients are averaged across ranks. The defaults train lenet on Fashion-MNIST\n"
         "(SGD lr 0.05, momentum 0.9, weight decay 5e-4, cosine schedule, 10 epochs of batches of\n"
         "64): about 91% test accuracy at the end, >= 90% from epoch 7 (one rank).\n\nOptions:\n";
  for (const OptionDef& d : option_defs()) {
    std::string head = "  ";
    head += *d.short_name ? std::string("-") + d.short_name + ", " : "    ";
    head += std::string("--") + d.name;
    if (*d.arg) head += std::string(d.arg[0] == '[' ? "" : " ") + d.arg;
    std::string help = d.help;
    const auto def = defaults.find(d.name);
    if (def != defaults.end() && !def->second.empty()) help += " [default " + def->second + "]";
    // Hanging-indent word wrap, so long descriptions stay readable in an 100-column terminal.
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
  out << "\nModels (--model):\n";
  for (const ModelSpec& s : model_specs())
    out << "  " << s.name << std::string(s.name.size() < 16 ? 16 - s.name.size() : 1, ' ')
        << s.description << " (" << s.default_size << "x" << s.default_size << ")\n";
  out << "\nSwitches (--nesterov, --scale-lr, --skip-bad, --distribute-data) alone mean true; a\n"
         "value sets them: --nesterov=false, --distribute-data off (true/on/yes/1, false/off/no/0).\n"
         "\nConfig file (--config FILE): one 'key = value' per line, keys are the long option\n"
         "names without dashes (every option except config and help), '#' starts a comment;\n"
         "options given on the command line override the file's. For example:\n"
         "    # runs/r18.cfg\n"
         "    model = resnet18\n"
         "    data = data/faces\n"
         "    batch-size = 64\n"
         "    learning-rate = 0.1\n"
         "    schedule = warmup:5+cosine\n"
         "    nesterov = true\n"
         "\nExamples:\n"
         "  ./train                                     lenet on Fashion-MNIST with the defaults\n"
         "  mpiexec -n 4 ./train -m resnet18 -d data/faces --epochs 10 -b 64 -lr 0.1 -s runs/r18\n"
         "  mpiexec -n 2 ./train -m resnet20 --dataset cifar10 -d data/cifar-10-batches-bin \\\n"
         "      --augment crop-flip -e 100 -lr 0.1 --weight-decay 1e-4 --schedule warmup:5+cosine\n"
         "  ./train --config runs/r18.cfg -lr=0.2        the file's options, another lr\n"
         "  ./train --resume runs/r18                    continue runs/r18 from its latest checkpoint\n"
         "  ./train --dataset synthetic --distribute-data=false --check-sync 10 --progress plain\n";
  return out.str();
}

}  // namespace mpicnn::train
