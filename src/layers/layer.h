// Layer interfaces. Layers own their parameter *views* (bound into the network's slabs by
// ParamStore) and their planned workspaces; they never own activations, which the caller
// plans once per batch size and passes in. Multi-input layers (Add, Concat) and the loss have
// their own signatures in their headers; single-input layers implement UnaryLayer.
//
// Conventions (llm.c): outputs first, then inputs. forward writes `out` with '='. backward
// writes `din` with '=' (skipped when din is undefined, e.g. for the first layer) and
// accumulates parameter gradients with '+=' (the caller zeroes the grad slab once per step).
#pragma once
#include <initializer_list>
#include <string>

#include "core/exec.h"
#include "core/tensor.h"
#include "layers/params.h"

namespace mpicnn {

class Layer {
 public:
  Layer() = default;
  Layer(const Layer&) = delete;  // registered by address in a ParamStore: never copied/moved
  Layer& operator=(const Layer&) = delete;
  virtual ~Layer() = default;

  virtual const char* kind() const = 0;
  // Declare parameters and buffers as prefix + torchvision name ("layer1.0.bn1." + "weight").
  virtual void register_state(ParamStore& /*store*/, const std::string& /*prefix*/) {}
  // Fill parameters and buffers (already bound to the slabs) with PyTorch's default
  // initialisation for this layer kind. Draws are keyed by (seed, parameter name).
  virtual void reset_parameters(uint64_t /*seed*/) {}
  void set_training(bool training) { training_ = training; }
  bool training() const { return training_; }
  // Fine-tuning (Model::freeze): a frozen layer's backward computes no parameter gradients (they
  // stay as they are: zero) and, given an undefined din, nothing at all. Set by the Model:
  // has_params says whether the layer registered any parameter.
  void set_param_state(bool has_params, bool frozen) {
    has_params_ = has_params;
    frozen_ = has_params && frozen;
  }
  bool frozen() const { return frozen_; }
  bool trainable() const { return has_params_ && !frozen_; }
  // What the last plan chose to run and, where there was a choice, why, in a few words for
  // --explain-plan ("direct avx512 fp32"); empty for a layer with one way to run.
  virtual std::string plan_note() const { return {}; }

 protected:
  bool training_ = true;
  bool frozen_ = false;
  bool has_params_ = true;  // until the Model says otherwise: trainable() stays conservative
};

class UnaryLayer : public Layer {
 public:
  virtual Shape output_shape(const Shape& in) const = 0;
  // Size internal workspaces for inputs of this shape, and choose how to run from cfg (device,
  // precision, kernels); forward then accepts any batch size up to in[0] without allocating.
  // Called outside the training step.
  virtual void plan(const Shape& /*in*/, const ExecConfig& /*cfg*/) {}
  virtual void forward(Tensor& out, const Tensor& in) = 0;
  // `in` and `out` are the tensors of the matching forward call, unchanged since.
  virtual void backward(Tensor& din, const Tensor& dout, const Tensor& in, const Tensor& out) = 0;
};

// Whether a layer call runs on the GPU: true when the tensors (undefined ones skipped) are all
// on CUDA, false when all on the CPU, an error naming `who` when they are mixed. Layers take
// their GPU path (kernels/, through core/gpu.h) on true; there is no fallback between the two.
// Every tensor must be plain (core/format.h): a layer without a channels-last path refuses
// the GPU's typed activations here, by name.
bool on_gpu(const char* who, std::initializer_list<const Tensor*> tensors);
// on_gpu for a layer that also runs the channels-last typed path: the activations (undefined
// ones skipped) must all be in `format` (the one the layer planned for), the parameters plain.
bool on_gpu_as(const char* who, Format format, std::initializer_list<const Tensor*> activations,
               std::initializer_list<const Tensor*> params = {});

}  // namespace mpicnn
