// trainer.json's fields, written and read (trainer_record.h).
#include "io/trainer_record.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

#include "core/check.h"
#include "io/safetensors.h"

namespace mpicnn::trainer_record {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::vector<uint8_t> read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  CHECK(in, path.string(), ": missing or unreadable");
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void check_own_crc(json j, const std::string& path) {
  const auto it = j.find("crc32");
  CHECK(it != j.end() && it->is_string(), path, ": field 'crc32' missing or not a string: the file is corrupt");
  const std::string stored = *it;
  j.erase("crc32");
  const std::string got = crc32_hex(own_crc(j));
  CHECK(stored == got, path, ": fails its CRC32 check (stored ", stored, ", computed ", got,
        "): the file is corrupt");
}

// A JSON integer that fits T; nothing for a float or one out of T's range (nlohmann's get<int>
// of 1e300 would be a float-to-int conversion out of range: undefined behaviour, found by
// tests/fuzz/fuzz_trainer_json).
template <typename T>
std::optional<T> as_integer(const json& v) {
  if (v.is_number_unsigned()) {
    const uint64_t x = v.get<uint64_t>();
    if (x <= uint64_t(std::numeric_limits<T>::max())) return T(x);
  } else if (v.is_number_integer()) {
    const int64_t x = v.get<int64_t>();
    if constexpr (std::is_signed_v<T>)
      if (x >= int64_t(std::numeric_limits<T>::min()) && x <= int64_t(std::numeric_limits<T>::max())) return T(x);
  }
  return std::nullopt;
}

template <typename T>
T field(const json& j, const char* key, const std::string& path) {
  auto it = j.find(key);
  CHECK(it != j.end(), path, ": field '", key, "' missing");
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    const std::optional<T> x = as_integer<T>(*it);
    CHECK(x.has_value(), path, ": field '", key, "' is not an integer in [", +std::numeric_limits<T>::min(),
          ", ", +std::numeric_limits<T>::max(), "]");
    return *x;
  } else if constexpr (std::is_same_v<T, std::vector<float>>) {
    // Each element a finite number within float's range (a larger double cast to float is
    // undefined behaviour).
    CHECK(it->is_array(), path, ": field '", key, "' is not an array");
    std::vector<float> out;
    for (const json& v : *it) {
      CHECK(v.is_number() && std::isfinite(v.get<double>()) &&
                std::abs(v.get<double>()) <= double(std::numeric_limits<float>::max()),
            path, ": field '", key, "' holds a value that is not a finite float");
      out.push_back(float(v.get<double>()));
    }
    return out;
  } else {
    try {
      return it->get<T>();
    } catch (const json::exception&) {
      FAIL(path, ": field '", key, "' has the wrong type (", it->type_name(), ")");
    }
  }
}

}  // namespace

json to_json(const TrainerState& s) {
  json j;
  j["format"] = "mpicnn-checkpoint";
  j["format_version"] = kCheckpointFormatVersion;
  j["model"] = s.model;
  j["optimizer"] = s.optimizer;
  j["epoch"] = s.epoch;
  j["step_in_epoch"] = s.step_in_epoch;
  j["global_step"] = s.global_step;
  j["samples_seen"] = s.samples_seen;
  j["seed"] = s.seed;  // nlohmann keeps uint64 exact
  j["rng_counters"] = s.rng_counters;
  j["ranks"] = s.ranks;
  j["config"] = s.config;
  if (!s.data_path.empty()) j["data_path"] = s.data_path;
  if (s.val_held_out > 0)
    j["validation"] = {{"fraction", s.val_fraction}, {"held_out", s.val_held_out}, {"stratified", true}};
  if (!s.test_data_path.empty()) j["test_data_path"] = s.test_data_path;
  j["run_started"] = s.run_started;
  if (!s.input.geometry.empty()) {
    const InputRecord& in = s.input;
    j["input"] = {{"geometry", in.geometry}, {"channels", in.channels}, {"height", in.height},
                  {"width", in.width},       {"resize", in.resize},     {"mean", in.mean},
                  {"std", in.stddev},        {"classes", in.class_names}};
  }
  if (!s.model_options.is_null()) j["model_options"] = s.model_options;
  if (!s.execution.is_null()) j["execution"] = s.execution;
  if (s.loss_scale > 0)
    j["loss_scale"] = {{"scale", s.loss_scale},
                       {"clean_steps", s.scale_clean_steps},
                       {"skipped_steps", s.scale_skipped_steps}};
  j["saved_at"] = s.saved_at;
  j["saved_unix_ms"] = s.saved_unix_ms;
  return j;
}

// trainer.json's own CRC-32 is over the compact dump of everything else in it: a bit flip
// that still parses (a digit of a counter, a letter of a path) changes that dump.
uint32_t own_crc(const json& without_crc) {
  const std::string text = without_crc.dump();
  return crc32_of({reinterpret_cast<const uint8_t*>(text.data()), text.size()});
}

// trainer.json parsed and version-checked; the state plus its "files" record.
std::pair<TrainerState, json> parse(const std::string& path) {
  const std::vector<uint8_t> bytes = read_all(path);
  json j;
  try {
    // A depth limit: a file nested thousands deep would overflow the stack when copied.
    j = json::parse(bytes.begin(), bytes.end(), [&](int depth, json::parse_event_t, json&) {
      CHECK(depth <= 16, path, ": nested more than 16 levels deep (not a trainer.json)");
      return true;
    });
  } catch (const json::parse_error& e) {
    FAIL(path, ": not valid JSON (truncated or corrupt) at byte ", e.byte);
  } catch (const json::exception& e) {
    FAIL(path, ": not valid JSON (truncated or corrupt)");
  }
  CHECK(j.is_object(), path, ": not a JSON object");
  const std::string format = field<std::string>(j, "format", path);
  CHECK(format == "mpicnn-checkpoint", path, ": not an mpicnn checkpoint (format '", format, "')");
  const int version = field<int>(j, "format_version", path);
  CHECK(version >= kOldestCheckpointFormatVersion && version <= kCheckpointFormatVersion, path,
        ": checkpoint format version ", version, ", this build reads versions ",
        kOldestCheckpointFormatVersion, " to ", kCheckpointFormatVersion);
  if (version >= 2) check_own_crc(j, path);
  TrainerState s;
  s.model = field<std::string>(j, "model", path);
  s.optimizer = field<std::string>(j, "optimizer", path);
  s.epoch = field<int64_t>(j, "epoch", path);
  s.step_in_epoch = field<int64_t>(j, "step_in_epoch", path);
  s.global_step = field<int64_t>(j, "global_step", path);
  s.samples_seen = field<int64_t>(j, "samples_seen", path);
  s.seed = field<uint64_t>(j, "seed", path);
  const json counters = field<json>(j, "rng_counters", path);
  CHECK(counters.is_object(), path, ": field 'rng_counters' is not an object");
  for (const auto& [name, value] : counters.items()) {
    const std::optional<uint64_t> n = as_integer<uint64_t>(value);
    CHECK(n.has_value(), path, ": rng_counters '", name, "' is not an integer in [0, 2^64-1]");
    s.rng_counters[name] = *n;
  }
  s.ranks = field<int>(j, "ranks", path);
  s.config = field<std::map<std::string, std::string>>(j, "config", path);
  if (j.contains("data_path")) s.data_path = field<std::string>(j, "data_path", path);
  if (j.contains("validation")) {
    const json v = field<json>(j, "validation", path);
    CHECK(v.is_object(), path, ": field 'validation' is not an object");
    s.val_fraction = field<double>(v, "fraction", path + " validation");
    s.val_held_out = field<uint64_t>(v, "held_out", path + " validation");
    CHECK(s.val_fraction > 0 && s.val_fraction < 1, path, ": validation fraction ", s.val_fraction,
          " is not in (0, 1)");
  }
  if (j.contains("test_data_path")) s.test_data_path = field<std::string>(j, "test_data_path", path);
  s.run_started = field<std::string>(j, "run_started", path);
  if (j.contains("input")) {
    const json in = field<json>(j, "input", path);
    const std::string where = path + " input";
    CHECK(in.is_object(), path, ": field 'input' is not an object");
    InputRecord& r = s.input;
    r.geometry = field<std::string>(in, "geometry", where);
    r.channels = field<int>(in, "channels", where);
    r.height = field<int>(in, "height", where);
    r.width = field<int>(in, "width", where);
    r.resize = field<int>(in, "resize", where);
    r.mean = field<std::vector<float>>(in, "mean", where);
    r.stddev = field<std::vector<float>>(in, "std", where);
    r.class_names = field<std::vector<std::string>>(in, "classes", where);
    CHECK(!r.geometry.empty() && r.channels > 0 && r.height >= 0 && r.width >= 0 &&
              (r.height > 0) == (r.width > 0) && r.resize >= 0 && !r.class_names.empty(),
          path, ": field 'input' holds an impossible input (", r.channels, "x", r.height, "x", r.width,
          ", ", r.class_names.size(), " classes)");
  }
  if (j.contains("model_options")) {
    s.model_options = field<json>(j, "model_options", path);
    CHECK(s.model_options.is_object(), path, ": field 'model_options' is not an object");
  }
  if (j.contains("execution")) {
    s.execution = field<json>(j, "execution", path);
    CHECK(s.execution.is_object(), path, ": field 'execution' is not an object");
  }
  if (j.contains("loss_scale")) {
    const json ls = field<json>(j, "loss_scale", path);
    const std::string where = path + " loss_scale";
    CHECK(ls.is_object(), path, ": field 'loss_scale' is not an object");
    s.loss_scale = field<double>(ls, "scale", where);
    s.scale_clean_steps = field<int64_t>(ls, "clean_steps", where);
    s.scale_skipped_steps = field<int64_t>(ls, "skipped_steps", where);
    CHECK(s.loss_scale >= 1 && std::isfinite(s.loss_scale) && s.scale_clean_steps >= 0 &&
              s.scale_skipped_steps >= 0,
          path, ": field 'loss_scale' holds an impossible state (scale ", s.loss_scale, ")");
  }
  s.saved_at = field<std::string>(j, "saved_at", path);
  s.saved_unix_ms = field<int64_t>(j, "saved_unix_ms", path);
  CHECK(s.epoch >= 0 && s.step_in_epoch >= 0 && s.global_step >= 0 && s.samples_seen >= 0 &&
            s.ranks >= 1,
        path, ": negative counter or ranks < 1");
  json files = field<json>(j, "files", path);
  CHECK(files.is_object(), path, ": field 'files' is not an object");
  return {s, files};
}

// A tensor file of the checkpoint, read and verified (its own CRC-32s name a damaged tensor),
// then compared with trainer.json's record of it: a complete, valid file from elsewhere (another
// checkpoint's) is refused too.

SafetensorsReader open_recorded(const std::filesystem::path& file, const json& files, const std::string& trainer_path) {
  const std::string name = file.filename().string();
  CHECK(files.contains(name) && files[name].is_object(), trainer_path, ": no record of ", name);
  const auto size = field<uint64_t>(files[name], "bytes", trainer_path);
  const auto crc = field<uint32_t>(files[name], "crc32", trainer_path);
  CHECK(fs::exists(file), file.string(), ": missing");
  SafetensorsReader r(file.string());
  const FileDigest d = r.digest();
  CHECK(d.bytes == size && d.crc32 == crc, file.string(), ": ", d.bytes, " bytes with CRC-32 ",
        crc32_hex(d.crc32), ", but ", trainer_path, " records ", size, " bytes with CRC-32 ",
        crc32_hex(crc), ": the file was replaced or is corrupt");
  return r;
}

}  // namespace mpicnn::trainer_record
