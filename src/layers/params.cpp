// Slab allocation and view binding for ParamStore.
#include "layers/params.h"

#include <cmath>
#include <cstring>

namespace mpicnn {

static int64_t align16(int64_t n) { return (n + 15) / 16 * 16; }

void ParamStore::check_new_name(const std::string& name) const {
  CHECK(!allocated_, "cannot declare '", name, "' after the slabs were allocated");
  CHECK(find(name) == nullptr, "state entry '", name, "' declared twice");
}

void ParamStore::param(const std::string& name, const Shape& shape, Tensor* value, Tensor* grad,
                       bool decay) {
  check_new_name(name);
  CHECK(value && grad, "param '", name, "' needs value and grad tensors");
  entries_.push_back({name, StateKind::Param, shape, param_floats_, decay, value, grad, nullptr});
  param_floats_ += align16(shape.numel());
}

void ParamStore::buffer(const std::string& name, const Shape& shape, Tensor* value) {
  check_new_name(name);
  CHECK(value, "buffer '", name, "' needs a tensor");
  entries_.push_back({name, StateKind::Buffer, shape, buffer_floats_, false, value, nullptr,
                      nullptr});
  buffer_floats_ += align16(shape.numel());
}

void ParamStore::buffer_i64(const std::string& name, int64_t* value) {
  check_new_name(name);
  CHECK(value, "buffer '", name, "' needs an int64 slot");
  entries_.push_back({name, StateKind::BufferI64, Shape{}, 0, false, nullptr, nullptr, value});
}

void ParamStore::allocate(Device device) {
  CHECK(!allocated_, "ParamStore::allocate called twice");
  // A zero-length slab still gets one padded block so data pointers are never null.
  values_ = Tensor::zeros(Shape{std::max<int64_t>(param_floats_, 16)}, device);
  grads_ = Tensor::zeros(Shape{std::max<int64_t>(param_floats_, 16)}, device);
  buffers_ = Tensor::zeros(Shape{std::max<int64_t>(buffer_floats_, 16)}, device);
  bind();
  allocated_ = true;
}

void ParamStore::to(Device device) {
  CHECK(allocated_, "ParamStore::to before allocate");
  if (device == values_.device()) return;
  for (Tensor* slab : {&values_, &grads_, &buffers_}) {
    Tensor moved = Tensor::empty(slab->shape(), device);
    moved.copy_from(*slab);
    *slab = moved;
  }
  bind();
}

void ParamStore::bind() {
  const Device device = values_.device();
  for (StateEntry& e : entries_) {
    if (e.kind == StateKind::Param) {
      *e.value = Tensor::view(values_.data() + e.offset, e.shape, device);
      *e.grad = Tensor::view(grads_.data() + e.offset, e.shape, device);
    } else if (e.kind == StateKind::Buffer) {
      *e.value = Tensor::view(buffers_.data() + e.offset, e.shape, device);
    }
  }
}

void ParamStore::zero_grad() {
  CHECK(allocated_, "zero_grad before allocate");
  grads_.fill(0.f);
}

int64_t ParamStore::num_params() const {
  int64_t n = 0;
  for (const StateEntry& e : entries_)
    if (e.kind == StateKind::Param) n += e.shape.numel();
  return n;
}

const StateEntry* ParamStore::find(const std::string& name) const {
  for (const StateEntry& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

void ParamStore::set_frozen(size_t i, bool frozen) {
  CHECK(i < entries_.size() && entries_[i].kind == StateKind::Param, "ParamStore: entry ", i,
        " is not a parameter");
  entries_[i].frozen = frozen;
}

void ParamStore::set_lr_mult(size_t i, double mult) {
  CHECK(i < entries_.size() && entries_[i].kind == StateKind::Param, "ParamStore: entry ", i,
        " is not a parameter");
  CHECK(std::isfinite(mult) && mult > 0, "ParamStore: learning-rate multiplier of '",
        entries_[i].name, "' must be finite and > 0, got ", mult);
  entries_[i].lr_mult = mult;
}

int64_t ParamStore::num_trainable() const {
  int64_t n = 0;
  for (const StateEntry& e : entries_)
    if (e.kind == StateKind::Param && !e.frozen) n += e.shape.numel();
  return n;
}

}  // namespace mpicnn
