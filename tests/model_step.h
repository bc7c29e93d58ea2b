// Test fixture: one training step of a planned model (forward, cross-entropy, backward with
// small random auxiliary-head gradients) and an eval forward, every result copied out, for tests
// that run a model two ways and compare the bits (fusion on and off, bf16 buffers shared or not).
#pragma once
#include <cstdint>
#include <cstring>
#include <vector>

#include "layers/softmax_xent.h"
#include "models/model.h"
#include "testing.h"

namespace mpicnn::testing {

struct StepResult {
  Tensor logits, grads, buffers, eval_logits;
};

// model planned for x's shape; the step starts from zeroed gradients.
inline StepResult step_and_eval(Model& model, const Tensor& x, const std::vector<int32_t>& targets,
                                const Shape& out) {
  auto copy = [](const Tensor& t) {
    Tensor c = Tensor::empty(t.shape());
    c.copy_from(t);
    return c;
  };
  model.set_training(true);
  model.params().zero_grad();
  StepResult r;
  r.logits = copy(model.forward(x));
  SoftmaxCrossEntropy loss;
  loss.plan(x.size(0), out[1]);
  loss.forward(r.logits, targets.data());
  Tensor dlogits = Tensor::empty(out);
  loss.backward(dlogits, targets.data());
  std::vector<Tensor> daux_t;
  std::vector<const Tensor*> daux;
  for (const AuxOutput& a : model.aux_outputs())
    daux_t.push_back(random_tensor(a.logits->shape(), 9, -0.1f, 0.1f));
  for (const Tensor& t : daux_t) daux.push_back(&t);
  model.backward(dlogits, daux);
  r.grads = copy(model.params().grads());
  r.buffers = copy(model.params().buffers());
  model.set_training(false);
  r.eval_logits = copy(model.forward(x));
  return r;
}

// Whether two tensors hold the same shape and bits.
inline bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() &&
         std::memcmp(a.data(), b.data(), size_t(a.numel()) * sizeof(real)) == 0;
}

// Every part of two steps, bit for bit.
inline void check_same_step(const StepResult& a, const StepResult& b) {
  CHECK(same_bits(a.logits, b.logits));
  CHECK(same_bits(a.grads, b.grads));
  CHECK(same_bits(a.buffers, b.buffers));
  CHECK(same_bits(a.eval_logits, b.eval_logits));
}

}  // namespace mpicnn::testing
