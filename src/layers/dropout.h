// Dropout as torch.nn.Dropout: in training, zero each element with probability p and scale the
// rest by 1/(1-p); identity in eval mode. The mask is never stored: it is a pure function of
// (seed, layer name, step, global sample index, element), recomputed in backward, so it does
// not depend on thread count, batch split or rank count.
#pragma once
#include <string>

#include "layers/layer.h"

namespace mpicnn {

class Dropout : public UnaryLayer {
 public:
  explicit Dropout(real p = 0.5f);
  const char* kind() const override { return "Dropout"; }
  // Records the name so its draws get their own stream; Dropout has no parameters.
  void register_state(ParamStore& store, const std::string& prefix) override;
  Shape output_shape(const Shape& in) const override { return in; }
  void forward(Tensor& out, const Tensor& in) override;  // any shape, (N, ...); out may alias in
  // din '=' (may alias dout).
  void backward(Tensor& din, const Tensor& dout, const Tensor& in, const Tensor& out) override;

  // Key of the next training forward: `step` (distinct per optimizer step) and the global
  // index of the batch's first sample. Without calls, each forward advances step by one.
  void set_draw(uint64_t seed, uint64_t step, uint64_t first_sample);
  real p() const { return p_; }
  // Whether element `i` of sample `sample` is kept under the current key (for tests).
  bool keep(uint64_t sample, uint64_t i, uint64_t per_sample) const;

 private:
  // y = x masked and scaled, on the tensors' device (NHWC typed ones: the same mask, drawn by
  // each element's NCHW index).
  void apply(Tensor& y, const Tensor& x, bool gpu) const;
  real p_;
  uint64_t seed_ = 0, step_ = 0, first_sample_ = 0, name_stream_ = 0;
  bool pending_advance_ = false;
};

}  // namespace mpicnn
