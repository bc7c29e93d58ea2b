// Optimizer base: chunking of the parameter slab, state slabs, and state save / load.
#include "optim/optimizer.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <unordered_map>

namespace mpicnn {

std::string exact_double(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);  // shortest form that round-trips
  return std::string(buf, r.ptr);
}

// Parses a whole string as a double; false on anything else (trailing junk included).
static bool parse_double(const std::string& s, double& v) {
  const char* end = s.data() + s.size();
  const auto r = std::from_chars(s.data(), end, v);
  return r.ec == std::errc() && r.ptr == end && !s.empty();
}

Optimizer::Optimizer(ParamStore& store, double lr, const char* who) : store_(store), who_(who) {
  CHECK(store.allocated(), who, ": allocate() the ParamStore before building the optimizer");
  CHECK(store.values().device() == Device::CPU, who,
        ": parameters on ", device_name(store.values().device()),
        " need the GPU optimizer kernels; this optimizer runs on the CPU");
  set_lr(lr);
}

void Optimizer::set_lr(double lr) {
  CHECK(std::isfinite(lr) && lr >= 0, who_, ": invalid learning rate ", lr,
        " (must be finite and >= 0)");
  lr_ = lr;
}

void Optimizer::build_chunks(bool exclude_no_decay) {
  chunks_.clear();
  for (const StateEntry& e : store_.entries()) {
    if (e.kind != StateKind::Param) continue;
    const bool decay = e.decay || !exclude_no_decay;
    const int64_t end = e.offset + e.shape.numel();
    for (int64_t b = e.offset; b < end; b += kChunkFloats)
      chunks_.push_back({b, std::min(b + kChunkFloats, end), decay});
  }
}

std::vector<Tensor> Optimizer::state_slabs() const {
  std::vector<Tensor> out;
  for (const StateSlab& s : slabs_) out.push_back(s.slab);
  return out;
}

void Optimizer::set_steps(int64_t steps) {
  CHECK(steps >= 0, who_, ": step count must be >= 0, got ", steps);
  steps_ = steps;
}

Tensor Optimizer::add_state_slab(const std::string& slab_name) {
  slabs_.push_back({slab_name, Tensor::zeros(store_.values().shape())});
  return slabs_.back().slab;
}

void Optimizer::save_state(SafetensorsWriter& out, const std::string& prefix) const {
  CHECK(!prefix.empty(), who_, ": the optimizer state needs a name prefix (e.g. \"optim.\")");
  out.set_metadata(prefix + "type", name());
  out.set_metadata(prefix + "lr", exact_double(lr_));
  for (const auto& [key, value] : options()) out.set_metadata(prefix + key, exact_double(value));
  out.add_i64_scalar(prefix + "step", steps_);
  for (const StateSlab& s : slabs_)
    for (const StateEntry& e : store_.entries())
      if (e.kind == StateKind::Param)
        out.add_f32(prefix + s.name + "." + e.name, s.slab.data() + e.offset, dims_of(e.shape));
}

void Optimizer::load_state(const SafetensorsReader& in, const std::string& prefix) {
  const std::string& f = in.path();
  CHECK(!prefix.empty(), who_, ": the optimizer state needs a name prefix (e.g. \"optim.\")");
  const std::string& type = in.metadata(prefix + "type");
  CHECK(type == name(), f, ": the optimizer state is ", type, ", this run uses ", name());
  for (const auto& [key, value] : options()) {
    const std::string& saved = in.metadata(prefix + key);
    double v = 0;
    CHECK(parse_double(saved, v), f, ": optimizer option ", prefix, key, " = '", saved,
          "' is not a number");
    CHECK(v == value, f, ": the optimizer state was saved with ", key, " = ", saved,
          ", this run uses ", exact_double(value), " (resuming with other options would not be"
          " a resume; drop the optimizer state to change them)");
  }
  double lr = 0;
  const std::string& saved_lr = in.metadata(prefix + "lr");
  CHECK(parse_double(saved_lr, lr) && std::isfinite(lr) && lr >= 0, f, ": optimizer ", prefix,
        "lr = '", saved_lr, "' is not a valid learning rate");
  const int64_t steps = in.read_i64_scalar(prefix + "step");
  CHECK(steps >= 0, f, ": optimizer ", prefix, "step is negative (", steps, ")");

  // Every expected tensor, checked before any slab changes.
  std::unordered_map<std::string, std::pair<float*, Dims>> want;
  for (StateSlab& s : slabs_)
    for (const StateEntry& e : store_.entries()) {
      if (e.kind != StateKind::Param) continue;
      const std::string key = prefix + s.name + "." + e.name;
      CHECK(in.contains(key), f, ": no optimizer state '", key,
            "' (saved for another model or another optimizer?)");
      const TensorInfo& t = in.info(key);
      CHECK(t.dtype == DType::F32, f, ": optimizer state '", key, "' has dtype ",
            dtype_name(t.dtype), ", expected F32");
      CHECK(t.shape == dims_of(e.shape), f, ": optimizer state '", key, "' has shape ",
            dims_str(t.shape), ", the parameter has ", dims_str(dims_of(e.shape)));
      want.emplace(key, std::pair{s.slab.data() + e.offset, dims_of(e.shape)});
    }
  for (const TensorInfo& t : in.tensors())
    CHECK(t.name.rfind(prefix, 0) != 0 || t.name == prefix + "step" || want.count(t.name), f,
          ": optimizer state '", t.name, "' belongs to no parameter of this model");

  for (const auto& [key, dest] : want) in.read_f32(dest.first, key, dest.second);
  lr_ = lr;
  steps_ = steps;
}

}  // namespace mpicnn
