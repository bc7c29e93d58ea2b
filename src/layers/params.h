// ParamStore: the network's parameters, gradients and buffers as views into contiguous slabs.
// One slab of weights, one of gradients (same offsets), one of float buffers (BatchNorm
// running stats); int64 buffers (num_batches_tracked) stay in their layers. Registration order
// is torchvision's state_dict order, so names round-trip through safetensors unchanged.
// Not an optimizer and not a serializer: those read the slabs and entries from here.
#pragma once
#include <string>
#include <vector>

#include "core/tensor.h"

namespace mpicnn {

enum class StateKind { Param, Buffer, BufferI64 };

struct StateEntry {
  std::string name;
  StateKind kind;
  Shape shape;
  int64_t offset = 0;      // into the param slab (Param) or buffer slab (Buffer)
  // Param only: false for BatchNorm parameters and biases, which optimizers leave out of
  // weight decay when asked to (--no-decay-bn-bias); true for conv/linear weights.
  bool decay = true;
  Tensor* value = nullptr; // bound to a slab view by allocate()
  Tensor* grad = nullptr;  // Param only
  int64_t* i64 = nullptr;  // BufferI64 only
  // Param only, for fine-tuning: a frozen parameter is never updated and its gradient never
  // computed nor summed over ranks; lr_mult scales the learning rate of this parameter.
  bool frozen = false;
  double lr_mult = 1;
};

class ParamStore {
 public:
  // Declaration phase. The pointed-to tensors are rebound as slab views by allocate(), so the
  // layers that own them must not move afterwards (hold layers by unique_ptr or in place).
  void param(const std::string& name, const Shape& shape, Tensor* value, Tensor* grad,
             bool decay = true);
  void buffer(const std::string& name, const Shape& shape, Tensor* value);
  void buffer_i64(const std::string& name, int64_t* value);

  // Allocates the slabs (zeroed), binds every declared tensor to its range. Once only.
  void allocate(Device device = Device::CPU);
  bool allocated() const { return allocated_; }
  // Moves the slabs (values, gradients, buffers) to `device` and rebinds every entry's views:
  // an explicit copy, made once when the model is placed, never during training.
  void to(Device device);
  Device device() const { return values_.device(); }

  // Whole slabs as 1-D tensors. Each entry starts on a 64-byte boundary; the padding between
  // entries stays zero in every slab, so whole-slab updates and reductions are safe.
  Tensor& values() { return values_; }
  Tensor& grads() { return grads_; }
  Tensor& buffers() { return buffers_; }
  const Tensor& values() const { return values_; }
  const Tensor& buffers() const { return buffers_; }

  void zero_grad();
  int64_t num_params() const;  // sum of parameter numels (no padding)
  const std::vector<StateEntry>& entries() const { return entries_; }
  const StateEntry* find(const std::string& name) const;
  // Fine-tuning marks on entry i (a Param), read by optimizers and gradient sync when they are
  // built: set them before.
  void set_frozen(size_t i, bool frozen);
  void set_lr_mult(size_t i, double mult);
  int64_t num_trainable() const;  // sum of numels of parameters not frozen

 private:
  void check_new_name(const std::string& name) const;
  void bind();  // points every declared tensor at its range of the current slabs
  std::vector<StateEntry> entries_;
  int64_t param_floats_ = 0, buffer_floats_ = 0;
  bool allocated_ = false;
  Tensor values_, grads_, buffers_;
};

}  // namespace mpicnn
