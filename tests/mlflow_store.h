// A reader of MLflow's classic file store (mlruns/<experiment>/<run>/...) for the tests, written
// from the rules MLflow's FileStore (mlflow/store/tracking/file_store.py) reads it by, so that a
// layout MLflow would refuse or mistype fails here: mlflow itself is not installed. Not a general
// YAML parser: it reads the flat mappings FileStore writes, typed as yaml.safe_load types them.
#pragma once
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "testing.h"

namespace mpicnn::testing::mlflow {

// A YAML scalar as yaml.safe_load (YAML 1.1) types it. A plain `yes` or `1.5` is not a string:
// that is why user names and ids must be quoted.
struct Value {
  enum Kind { Null, Bool, Int, Float, Str, EmptyList } kind = Null;
  int64_t i = 0;
  std::string s;
  bool is_str() const { return kind == Str; }
};

// YAML 1.1's plain scalars as PyYAML's resolver types them (the patterns of yaml/resolver.py,
// as far as FileStore's values reach: no sexagesimal or base-prefixed numbers).
inline bool is_yaml_bool(const std::string& t) {
  static const char* const words[] = {"y",    "Y",    "yes",  "Yes",   "YES",   "n",     "N",
                                      "no",   "No",   "NO",   "true",  "True",  "TRUE",  "false",
                                      "False", "FALSE", "on",  "On",    "ON",    "off",   "Off", "OFF"};
  return std::find(std::begin(words), std::end(words), t) != std::end(words);
}
// [-+]?(0|[1-9][0-9_]*)
inline bool is_yaml_int(const std::string& t) {
  size_t i = (!t.empty() && (t[0] == '-' || t[0] == '+')) ? 1 : 0;
  if (i == t.size()) return false;
  if (t[i] == '0') return i + 1 == t.size();
  if (t[i] < '1' || t[i] > '9') return false;
  for (++i; i < t.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(t[i])) && t[i] != '_') return false;
  return true;
}
// [-+]?([0-9][0-9_]*)?\.[0-9.]*([eE][-+][0-9]+)?
inline bool is_yaml_float(const std::string& t) {
  size_t i = (!t.empty() && (t[0] == '-' || t[0] == '+')) ? 1 : 0;
  if (i < t.size() && std::isdigit(static_cast<unsigned char>(t[i])))
    while (i < t.size() && (std::isdigit(static_cast<unsigned char>(t[i])) || t[i] == '_')) ++i;
  if (i == t.size() || t[i] != '.') return false;
  for (++i; i < t.size() && (std::isdigit(static_cast<unsigned char>(t[i])) || t[i] == '.');) ++i;
  if (i == t.size()) return true;
  if (t[i] != 'e' && t[i] != 'E') return false;
  if (++i == t.size() || (t[i] != '-' && t[i] != '+')) return false;
  if (++i == t.size()) return false;
  for (; i < t.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(t[i]))) return false;
  return true;
}

inline Value scalar(const std::string& text) {
  Value v;
  if (text.empty() || text == "null" || text == "~" || text == "Null" || text == "NULL") return v;
  if (text == "[]") return {Value::EmptyList, 0, {}};
  if (text.front() == '\'') {  // single-quoted: '' is a quote, nothing else is special
    REQUIRE_MESSAGE((text.size() >= 2 && text.back() == '\''), "unterminated quoted scalar: ",
                    text);
    std::string s;
    for (size_t k = 1; k + 1 < text.size(); ++k) {
      if (text[k] == '\'') {
        REQUIRE_MESSAGE((k + 2 < text.size() && text[k + 1] == '\''), "lone quote in ", text);
        ++k;
      }
      s += text[k];
    }
    return {Value::Str, 0, s};
  }
  REQUIRE_MESSAGE(text.find_first_of("\"[]{}#&*!|>%@`") == std::string::npos,
                  "a scalar this reader does not type (FileStore writes none): ", text);
  if (is_yaml_bool(text)) return {Value::Bool, 0, text};
  if (is_yaml_int(text)) return {Value::Int, std::stoll(text), text};
  if (is_yaml_float(text)) return {Value::Float, 0, text};
  return {Value::Str, 0, text};
}

inline std::string read_all(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  REQUIRE_MESSAGE(in.is_open(), "cannot read ", p.string());
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// meta.yaml: one "key: value" a line (yaml.safe_dump of a flat dict), each key once.
inline std::map<std::string, Value> read_meta(const std::filesystem::path& p) {
  std::map<std::string, Value> m;
  std::istringstream in(read_all(p));
  for (std::string line; std::getline(in, line);) {
    const size_t c = line.find(": ");
    REQUIRE_MESSAGE(c != std::string::npos, p.string(), ": not a 'key: value' line: ", line);
    const std::string key = line.substr(0, c);
    REQUIRE_MESSAGE(!m.count(key), p.string(), ": key twice: ", key);
    m[key] = scalar(line.substr(c + 2));
  }
  return m;
}

struct Metric {
  int64_t timestamp = 0;  // Unix ms
  double value = 0;
  int64_t step = 0;
};

struct Run {
  std::filesystem::path dir;
  std::map<std::string, Value> meta;
  std::map<std::string, std::string> params, tags;
  std::map<std::string, std::vector<Metric>> metrics;
  std::map<std::string, uintmax_t> artifacts;  // path under the artifact root -> bytes
  int64_t status() const { return meta.at("status").i; }
};

struct Experiment {
  std::map<std::string, Value> meta;
  std::map<std::string, Run> runs;  // by run id
};

enum RunStatus { RUNNING = 1, SCHEDULED = 2, FINISHED = 3, FAILED = 4, KILLED = 5 };

// A param, tag or metric key as MLflow's validation takes it: letters, digits, '_', '-', '.',
// ' ', '/' (and ':' since MLflow 2.x), never a path that climbs out.
inline void check_key(const std::string& what, const std::string& key) {
  const bool ok = !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("_-. /:", c) != nullptr;
  });
  CHECK_MESSAGE(ok, what, " key not valid for MLflow: '", key, "'");
  CHECK_MESSAGE(key.find("..") == std::string::npos, what, " key climbs out: '", key, "'");
}

inline int64_t whole_int(const std::string& text, const std::string& what) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  REQUIRE_MESSAGE((ec == std::errc() && end == text.data() + text.size()), what, ": '", text,
                  "' is not an integer");
  return v;
}

// metrics/<key>: "<timestamp_ms> <value> <step>" a line, single spaces (FileStore splits on " "),
// the value as Python's float() reads it.
inline std::vector<Metric> read_metric(const std::filesystem::path& p) {
  std::vector<Metric> out;
  std::istringstream in(read_all(p));
  for (std::string line; std::getline(in, line);) {
    const size_t a = line.find(' '), b = line.find(' ', a + 1);
    REQUIRE_MESSAGE((a != std::string::npos && b != std::string::npos &&
                     line.find(' ', b + 1) == std::string::npos),
                    p.string(), ": not '<timestamp_ms> <value> <step>': '", line, "'");
    Metric m;
    m.timestamp = whole_int(line.substr(0, a), p.string() + " timestamp");
    const std::string value = line.substr(a + 1, b - a - 1);
    char* end = nullptr;
    m.value = std::strtod(value.c_str(), &end);
    REQUIRE_MESSAGE((!value.empty() && *end == '\0'), p.string(), ": value '", value, "'");
    m.step = whole_int(line.substr(b + 1), p.string() + " step");
    out.push_back(m);
  }
  return out;
}

// One file per key (the key is the file's name), the value its whole content.
inline std::map<std::string, std::string> read_key_files(const std::filesystem::path& dir,
                                                          const std::string& what) {
  std::map<std::string, std::string> out;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const std::string key = e.path().lexically_relative(dir).string();
    check_key(what, key);
    out[key] = read_all(e.path());
  }
  return out;
}

// The run's meta.yaml by FileStore's _read_persisted_run_info_dict and RunInfo: every field
// there, typed, consistent with the folders it sits in.
inline Run read_run(const std::filesystem::path& dir, const std::string& experiment_id) {
  namespace fs = std::filesystem;
  Run r;
  r.dir = dir;
  r.meta = read_meta(dir / "meta.yaml");
  const std::string id = dir.filename().string();
  for (const char* k : {"run_id", "run_uuid", "experiment_id", "user_id", "lifecycle_stage",
                        "artifact_uri", "run_name"})
    CHECK_MESSAGE(r.meta[k].is_str(), dir.string(), "/meta.yaml: ", k, " is not a string");
  for (const char* k : {"status", "start_time"})
    CHECK_MESSAGE(r.meta[k].kind == Value::Int, dir.string(), "/meta.yaml: ", k, " is not an int");
  CHECK(r.meta["run_id"].s == id);
  CHECK(r.meta["run_uuid"].s == id);
  CHECK(r.meta["experiment_id"].s == experiment_id);
  CHECK((r.meta["lifecycle_stage"].s == "active" || r.meta["lifecycle_stage"].s == "deleted"));
  const int64_t status = r.meta["status"].i;
  CHECK_MESSAGE((status >= RUNNING && status <= KILLED), "status ", status, " is not a RunStatus");
  // end_time: null while the run runs, its end (ms, not before the start) once it is over.
  const Value& end = r.meta["end_time"];
  if (status == RUNNING) {
    CHECK_MESSAGE(end.kind == Value::Null, "a RUNNING run with an end_time");
  } else {
    REQUIRE_MESSAGE(end.kind == Value::Int, "a finished run's end_time is not an int");
    CHECK(end.i >= r.meta["start_time"].i);
  }
  // Artifacts live where artifact_uri says (a local file: URI), listed as MLflow's
  // LocalArtifactRepository lists them.
  const std::string& uri = r.meta["artifact_uri"].s;
  REQUIRE_MESSAGE(uri.rfind("file://", 0) == 0, "artifact_uri '", uri, "' is not a file:// URI");
  const fs::path artifacts = uri.substr(7);
  CHECK_MESSAGE(artifacts.is_absolute(), "artifact_uri '", uri, "' is not absolute");
  REQUIRE_MESSAGE(fs::is_directory(artifacts), "artifact_uri '", uri, "' is not a directory");
  for (const auto& e : fs::recursive_directory_iterator(artifacts))
    if (e.is_regular_file())
      r.artifacts[e.path().lexically_relative(artifacts).string()] = e.file_size();
  r.params = read_key_files(dir / "params", "param");
  r.tags = read_key_files(dir / "tags", "tag");
  for (const auto& e : fs::directory_iterator(dir / "metrics")) {
    check_key("metric", e.path().filename().string());
    r.metrics[e.path().filename().string()] = read_metric(e.path());
  }
  return r;
}

// mlruns/<id>: the experiment's meta.yaml (FileStore's _get_experiment: its experiment_id must
// be the folder's) and every run folder in it.
inline Experiment read_experiment(const std::filesystem::path& mlruns, const std::string& id) {
  namespace fs = std::filesystem;
  Experiment x;
  x.meta = read_meta(mlruns / id / "meta.yaml");
  for (const char* k : {"experiment_id", "name", "artifact_location", "lifecycle_stage"})
    CHECK_MESSAGE(x.meta[k].is_str(), "experiment meta.yaml: ", k, " is not a string");
  for (const char* k : {"creation_time", "last_update_time"})
    CHECK_MESSAGE(x.meta[k].kind == Value::Int, "experiment meta.yaml: ", k, " is not an int");
  CHECK(x.meta["experiment_id"].s == id);
  CHECK(x.meta["lifecycle_stage"].s == "active");
  for (const auto& e : fs::directory_iterator(mlruns / id))
    if (e.is_directory()) x.runs[e.path().filename().string()] = read_run(e.path(), id);
  return x;
}

}  // namespace mpicnn::testing::mlflow
