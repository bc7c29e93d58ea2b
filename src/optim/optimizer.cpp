// Optimizer base: chunking of the parameter slab, state slabs, and state save / load.
#include "optim/optimizer.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <unordered_map>
#include "core/mutant.h"

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
  set_lr(lr);
}

void Optimizer::set_lr(double lr) {
  CHECK(std::isfinite(lr) && lr >= 0, who_, ": invalid learning rate ", lr,
        " (must be finite and >= 0)");
  lr_ = lr;
}

void Optimizer::build_chunks(bool exclude_no_decay) {
  chunks_.clear();
  groups_.clear();
  std::vector<double> mults;  // the groups' multipliers, in order of first appearance
  for (const StateEntry& e : store_.entries())
    if (e.kind == StateKind::Param && !e.frozen &&
        std::find(mults.begin(), mults.end(), e.lr_mult) == mults.end())
      mults.push_back(e.lr_mult);
  for (const double mult : mults) {
    const int64_t first = int64_t(chunks_.size());
    for (const StateEntry& e : store_.entries()) {
      if (e.kind != StateKind::Param || e.frozen || e.lr_mult != mult) continue;
      const bool decay = e.decay || !exclude_no_decay || MUTANT(5);
      const int64_t end = e.offset + e.shape.numel();
      for (int64_t b = e.offset; b < end; b += kChunkFloats)
        chunks_.push_back({b, std::min(b + kChunkFloats, end), decay});
    }
    groups_.push_back({first, int64_t(chunks_.size()), mult});
  }
  if (store_.device() == Device::CUDA && !chunks_.empty()) {  // the fused kernels read the table there
    std::vector<gpu::SlabChunk> table;
    for (const Chunk& c : chunks_) table.push_back({c.begin, c.end, c.decay ? 1 : 0});
    const size_t bytes = table.size() * sizeof(gpu::SlabChunk);
    gpu_chunks_ = gpu::backend().alloc(bytes);
    gpu::backend().copy(gpu_chunks_.get(), true, table.data(), false, bytes);
  }
}

void Optimizer::set_grad_scale(real scale) {
  CHECK(std::isfinite(scale) && scale > 0, who_, ": gradient scale must be finite and > 0, got ",
        scale);
  CHECK(scale == 1.f || store_.device() == Device::CUDA, who_,
        ": loss scaling (fp16) is a GPU feature; the CPU optimizers take unscaled gradients");
  grad_scale_ = scale;
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
  slabs_.push_back({slab_name, Tensor::zeros(store_.values().shape(), store_.device())});
  return slabs_.back().slab;
}

void Optimizer::save_state(SafetensorsWriter& out, const std::string& prefix) const {
  CHECK(!prefix.empty(), who_, ": the optimizer state needs a name prefix (e.g. \"optim.\")");
  out.set_metadata(prefix + "type", name());
  out.set_metadata(prefix + "lr", exact_double(lr_));
  for (const auto& [key, value] : options()) out.set_metadata(prefix + key, exact_double(value));
  out.add_i64_scalar(prefix + "step", steps_);
  for (const StateSlab& s : slabs_) {
    const Tensor host = to_host(s.slab);  // the writer copies the bytes
    for (const StateEntry& e : store_.entries())
      if (e.kind == StateKind::Param)
        out.add_floats(prefix + s.name + "." + e.name, host.data() + e.offset, dims_of(e.shape),
                       kRealDType);
  }
}

FileDigest Optimizer::write_state(const std::string& path, const std::map<std::string, std::string>& metadata) const {
  SafetensorsWriter w;
  save_state(w);
  for (const auto& [k, v] : metadata) w.set_metadata(k, v);
  return w.write(path);
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

  // Every expected tensor, checked before any slab changes. GPU slabs are read into host
  // copies first and copied up once all reads succeeded.
  std::unordered_map<std::string, std::pair<real*, Dims>> want;
  std::vector<Tensor> hosts;
  for (StateSlab& s : slabs_) {
    hosts.push_back(s.slab.device() == Device::CPU ? s.slab : Tensor::zeros(s.slab.shape(), Device::CPU));
    for (const StateEntry& e : store_.entries()) {
      if (e.kind != StateKind::Param) continue;
      const std::string key = prefix + s.name + "." + e.name;
      CHECK(in.contains(key), f, ": no optimizer state '", key,
            "' (saved for another model or another optimizer?)");
      const TensorInfo& t = in.info(key);
      CHECK(t.dtype == kRealDType, f, ": optimizer state '", key, "' has dtype ",
            dtype_name(t.dtype), ", expected ", dtype_name(kRealDType));
      CHECK(t.shape == dims_of(e.shape), f, ": optimizer state '", key, "' has shape ",
            dims_str(t.shape), ", the parameter has ", dims_str(dims_of(e.shape)));
      want.emplace(key, std::pair{hosts.back().data() + e.offset, dims_of(e.shape)});
    }
  }
  for (const TensorInfo& t : in.tensors())
    CHECK(t.name.rfind(prefix, 0) != 0 || t.name == prefix + "step" || want.count(t.name), f,
          ": optimizer state '", t.name, "' belongs to no parameter of this model");

  for (const auto& [key, dest] : want) in.read_floats(dest.first, key, dest.second);
  for (size_t i = 0; i < slabs_.size(); ++i)
    if (slabs_[i].slab.data() != hosts[i].data()) slabs_[i].slab.copy_from(hosts[i]);
  lr_ = lr;
  steps_ = steps;
}

}  // namespace mpicnn
