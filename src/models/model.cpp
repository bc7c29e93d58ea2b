// Model: registration, planning, and the state dict in safetensors.
#include "models/model.h"

#include <array>
#include <cstring>
#include <map>
#include <set>

#include "io/safetensors.h"
#include "layers/conv2d.h"
#include "layers/linear.h"
#include "layers/plan_mode.h"
#include "models/aux_net.h"

namespace mpicnn {

Model::Model(std::string name, std::unique_ptr<Module> root, ModelOptions options,
             const std::function<void(Model&, uint64_t)>& init, uint64_t seed)
    : name_(std::move(name)), root_(std::move(root)), options_(options) {
  CHECK(options.num_classes >= 1, "model ", name_, ": num_classes must be >= 1, got ",
        options.num_classes);
  CHECK(options.in_channels >= 1, "model ", name_, ": in_channels must be >= 1, got ",
        options.in_channels);
  root_->register_state(store_, "");
  store_.allocate();
  if (options.initialise) init(*this, seed);
  aux_net_ = dynamic_cast<AuxNet*>(root_.get());
  if (aux_net_)
    for (size_t i = 0; i < aux_net_->num_heads(); ++i)
      aux_heads_.push_back({aux_net_->head(i).name, aux_net_->head(i).weight, nullptr});
  // The default head: the layer of the last parameter ("fc" of "fc.bias").
  for (auto it = store_.entries().rbegin(); it != store_.entries().rend(); ++it)
    if (it->kind == StateKind::Param) {
      const size_t dot = it->name.rfind('.');
      head_ = {dot == std::string::npos ? it->name : it->name.substr(0, dot)};
      break;
    }
  refresh_layer_states();
}

bool param_under(const std::string& name, const std::string& prefix) {
  if (prefix.empty()) return false;
  if (prefix.back() == '.') return name.compare(0, prefix.size(), prefix) == 0;
  return name.compare(0, prefix.size(), prefix) == 0 &&
         (name.size() == prefix.size() || name[prefix.size()] == '.');
}

void Model::set_head(std::vector<std::string> prefixes) {
  for (const std::string& p : prefixes) {
    bool any = false;
    for (const StateEntry& e : store_.entries()) any = any || (e.kind == StateKind::Param && param_under(e.name, p));
    CHECK(any, "model ", name_, ": head prefix '", p, "' matches no parameter");
  }
  head_ = std::move(prefixes);
}

bool param_under_any(const std::string& name, const std::vector<std::string>& prefixes) {
  for (const std::string& p : prefixes)
    if (param_under(name, p)) return true;
  return false;
}

bool Model::in_head(const std::string& entry_name) const { return param_under_any(entry_name, head_); }

void Model::freeze(const std::vector<std::string>& prefixes) {
  const std::vector<StateEntry>& entries = store_.entries();
  for (const std::string& p : prefixes) {
    bool any = false;
    for (size_t i = 0; i < entries.size(); ++i)
      if (entries[i].kind == StateKind::Param && param_under(entries[i].name, p)) {
        store_.set_frozen(i, true);
        any = true;
      }
    CHECK(any, "--freeze: '", p, "' matches no parameter of ", name_);
  }
  refresh_layer_states();
}

void Model::refresh_layer_states() {
  std::map<std::string, std::pair<int, int>> per_layer;  // layer prefix -> (params, frozen)
  for (const StateEntry& e : store_.entries()) {
    if (e.kind != StateKind::Param) continue;
    const size_t dot = e.name.rfind('.');
    auto& [n, f] = per_layer[dot == std::string::npos ? std::string() : e.name.substr(0, dot + 1)];
    n += 1;
    f += e.frozen ? 1 : 0;
  }
  root_->for_each_layer([&](Layer& l, const std::string& prefix) {
    const auto it = per_layer.find(prefix);
    l.set_param_state(it != per_layer.end(), it != per_layer.end() && it->second.first == it->second.second);
  });
}

void Model::to(Device device) {
  CHECK(planned_.ndim == 0 || device == this->device(), "model ", name_,
        ": to(", device_name(device), ") after plan(); place the model first");
  store_.to(device);
}

Shape Model::plan(const Shape& input, const ExecConfig& exec) {
  CHECK(input.ndim == 4 && input[1] == options_.in_channels, "model ", name_,
        ": input must be (N, ", options_.in_channels, ", H, W), got ", input.str());
  CHECK(exec.device == device(), "model ", name_, " is on ", device_name(device()),
        ", planned for ", device_name(exec.device), " (place it with Model::to first)");
  ExecConfig cfg = exec;
  if (cfg.device == Device::CUDA) cfg.inference = false;  // a GPU model plans one way
  const DeviceScope scope(device());
  const plan_mode::Scope parity;
  const Shape out = root_->plan(input, cfg);
  CHECK(!root_->outputs_logits() || (out.ndim == 2 && out[1] == options_.num_classes), "model ",
        name_, ": produces ", out.str(), ", expected (N, ", options_.num_classes, ")");
  planned_ = input;
  exec_ = cfg;
  return out;
}

void Model::set_training(bool training) {
  training_ = training;
  root_->set_training(training);
}

const Tensor& Model::forward(const Tensor& x) {
  CHECK(planned_.ndim == 4, "model ", name_, ": forward before plan()");
  CHECK(x.dim() == 4 && x.size(1) == planned_[1] && x.size(2) == planned_[2] &&
            x.size(3) == planned_[3] && x.size(0) <= planned_[0],
        "model ", name_, ": input ", x.shape().str(), " does not fit the plan ", planned_.str());
  CHECK(x.device() == device(), "model ", name_, " is on ", device_name(device()), ", its input on ",
        device_name(x.device()), " (copy it with Tensor::copy_from)");
  CHECK(x.format() == exec_.format_for(x.shape()), "model ", name_, ": a ", format_name(x.format()),
        " input, planned for ", format_name(exec_.activations), " (InputStage puts inputs so)");
  aux_ran_ = false;
  const Tensor& logits = root_->forward(x);
  if (aux_net_ && aux_net_->heads_ran()) {
    for (size_t i = 0; i < aux_heads_.size(); ++i) aux_heads_[i].logits = &aux_net_->head_logits(i);
    aux_ran_ = true;
  }
  return logits;
}

const std::vector<AuxOutput>& Model::aux_outputs() const {
  static const std::vector<AuxOutput> none;
  return aux_ran_ ? aux_heads_ : none;
}

void Model::backward(const Tensor& dlogits, std::span<const Tensor* const> daux) {
  CHECK(!exec_.inference, "model ", name_,
        ": backward after an inference-only plan (plan it "
        "for training to train)");
  CHECK(daux.size() == aux_outputs().size(), "model ", name_, ": backward with ", daux.size(),
        " auxiliary gradients, the last forward computed ", aux_outputs().size(),
        " auxiliary outputs");
  Tensor none;
  auto run = [&] {
    if (aux_net_)
      aux_net_->backward(none, dlogits, daux);
    else
      root_->backward(none, dlogits);
  };
  if (!grad_ready_) {
    run();
    return;
  }
  // Restores the previous hook also when backward throws.
  struct Scope {
    const GradReadyFn* saved;
    explicit Scope(const GradReadyFn* f) : saved(detail::grad_ready_hook) { detail::grad_ready_hook = f; }
    ~Scope() { detail::grad_ready_hook = saved; }
  } scope(&grad_ready_);
  run();
  grad_ready_(0);
}

FileDigest Model::save_state_dict(const std::string& path,
                                  const std::map<std::string, std::string>& metadata) const {
  SafetensorsWriter w;  // copies the bytes it is given: host copies of GPU slabs suffice
  const Tensor values = to_host(store_.values()), buffers = to_host(store_.buffers());
  for (const StateEntry& e : store_.entries()) {
    if (e.kind == StateKind::BufferI64)
      w.add_i64_scalar(e.name, *e.i64);
    else
      w.add_floats(e.name, (e.kind == StateKind::Param ? values : buffers).data() + e.offset,
                   dims_of(e.shape), kRealDType);
  }
  for (const auto& [k, v] : metadata) w.set_metadata(k, v);
  return w.write(path);
}

void read_state_entry(const SafetensorsReader& r, const StateEntry& e) {
  if (e.kind == StateKind::BufferI64) {
    *e.i64 = r.read_i64_scalar(e.name);
  } else if (e.value->device() == Device::CPU) {
    r.read(*e.value, e.name);
  } else {
    Tensor host = Tensor::empty(e.shape, Device::CPU);
    r.read(host, e.name);
    e.value->copy_from(host);
  }
}

void Model::load_state_dict(const std::string& path) {
  SafetensorsReader r(path);
  std::set<std::string> expected;
  for (const StateEntry& e : store_.entries()) {
    expected.insert(e.name);
    CHECK(r.contains(e.name), path, ": no tensor '", e.name, "' (model ", name_, ")");
    read_state_entry(r, e);
  }
  for (const TensorInfo& t : r.tensors())
    CHECK(expected.count(t.name) || is_dropped_batchnorm_counter(store_, t.name), path,
          ": unexpected tensor '", t.name, "' for model ", name_);
  refresh_plan_copies();
}

void Model::refresh_plan_copies() {
  if (planned_.ndim == 4 && !training_) root_->set_training(false);
}

void Model::check_state(const SafetensorsReader& r) const {
  std::set<std::string> expected;
  for (const StateEntry& e : store_.entries()) {
    expected.insert(e.name);
    CHECK(r.contains(e.name), r.path(), ": no tensor '", e.name, "' (model ", name_, ")");
    const TensorInfo& t = r.info(e.name);
    const Dims want = e.kind == StateKind::BufferI64 ? Dims{} : dims_of(e.shape);
    CHECK(t.shape == want, r.path(), ": tensor '", e.name, "' has shape ", dims_str(t.shape),
          ", model ", name_, " needs ", dims_str(want));
    const bool int_ok = e.kind == StateKind::BufferI64 ? dtype_is_int(t.dtype) : dtype_is_float(t.dtype);
    CHECK(int_ok, r.path(), ": tensor '", e.name, "' has dtype ", dtype_name(t.dtype));
  }
  for (const TensorInfo& t : r.tensors())
    CHECK(expected.count(t.name), r.path(), ": unexpected tensor '", t.name, "' for model ", name_);
}

void Model::read_state(const SafetensorsReader& r) {
  for (const StateEntry& e : store_.entries()) read_state_entry(r, e);
  refresh_plan_copies();
}

bool is_dropped_batchnorm_counter(const ParamStore& store, const std::string& name) {
  const std::string counter = "num_batches_tracked";
  return name.ends_with(counter) && !store.find(name) &&
         store.find(name.substr(0, name.size() - counter.size()) + "running_mean");
}

}  // namespace mpicnn

namespace mpicnn {

std::string Model::explain_plan() {
  CHECK(planned_.ndim > 0, name_, ": explain_plan() before plan()");
  std::vector<std::array<std::string, 3>> rows;
  size_t width[2] = {0, 0};
  root_->for_each_layer([&](Layer& l, const std::string& prefix) {
    std::string note = l.plan_note();
    if (note.empty()) return;
    std::string name = prefix.empty() ? "(root)" : prefix.substr(0, prefix.size() - 1);
    width[0] = std::max(width[0], name.size());
    width[1] = std::max(width[1], std::strlen(l.kind()));
    rows.push_back({std::move(name), l.kind(), std::move(note)});
  });
  std::string s;
  for (const auto& [name, kind, note] : rows)
    s += name + std::string(width[0] + 2 - name.size(), ' ') + kind +
         std::string(width[1] + 2 - kind.size(), ' ') + note + "\n";
  return s;
}

int64_t Model::forward_macs() {
  CHECK(planned_.ndim > 0, name_, ": forward_macs() before plan()");
  int64_t macs = 0;
  root_->for_each_layer([&](Layer& l, const std::string&) {
    if (const auto* c = dynamic_cast<const Conv2d*>(&l)) {
      const ConvGeometry& g = c->geometry();
      const Conv2dOptions& o = c->options();
      macs += g.out_plane() * o.out_channels * (o.in_channels / o.groups) * g.taps();
    } else if (const auto* f = dynamic_cast<const Linear*>(&l)) {
      macs += int64_t(f->in_features()) * f->out_features();
    }
  });
  return macs;
}

}  // namespace mpicnn
