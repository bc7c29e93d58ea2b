// One parity case set up on the engine the including file is compiled against: the float32
// engine in tests/test_model_parity.cpp, the float64 one in tests/f64/ (there the namespace
// mpicnn is renamed mpicnn_f64 by the F64 build's -D flag, so this same text names the other
// engine's types, and its functions are that engine's own: no clash between the two).
#pragma once
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "layers/softmax_xent.h"
#include "model_parity.h"
#include "models/aux_loss.h"
#include "models/registry.h"
#include "optim/adamw.h"
#include "optim/sgd.h"
#if !(defined(MPICNN_F64) && MPICNN_F64)
#include "testing.h"  // testing::exec(): the float32 engine plans as every test does
#endif

namespace mpicnn::parity_run {

// The case's model from PyTorch's initial weights (TAG.init.safetensors in `dir`), planned for
// its batch, in training mode, with its input, targets, loss and optimizer.
struct CaseRun {
  CaseRun(const parity::Case& c, const std::string& dir)
      : ref(dir + "/" + c.tag + ".ref.safetensors"),
        model(build_model(c.model, {.num_classes = c.classes, .in_channels = c.in_channels,
                                    .dropout = 0.f, .aux_dropout = 0.f,
                                    .initialise = false})) {
    model->load_state_dict(dir + "/" + c.tag + ".init.safetensors");
    const Tensor& values = model->params().values();
    init.assign(values.data(), values.data() + values.numel());
    const Shape in_shape{c.batch, c.in_channels, c.size, c.size};
#if defined(MPICNN_F64) && MPICNN_F64
    dlogits = Tensor::empty(model->plan(in_shape, ExecConfig{}));  // the float64 engine's one way
#else
    dlogits = Tensor::empty(model->plan(in_shape, testing::exec()));
#endif
    model->set_training(true);
    x = Tensor::empty(in_shape);
    ref.read(x, "input");
    for (int64_t t : ref.read_i64("target")) targets.push_back(int32_t(t));
    loss.plan(c.batch, c.classes);
    aux.plan(*model, c.batch, 0.f, Device::CPU);
    if (c.optimizer == "sgd")
      opt = std::make_unique<SGD>(model->params(),
                                  SgdOptions{.lr = c.lr, .momentum = c.momentum,
                                             .weight_decay = c.weight_decay,
                                             .nesterov = c.nesterov,
                                             .exclude_bn_bias = c.exclude_bn_bias});
    else
      opt = std::make_unique<AdamW>(model->params(),
                                    AdamWOptions{.lr = c.lr, .weight_decay = c.weight_decay,
                                                 .exclude_bn_bias = c.exclude_bn_bias});
  }

  // Zeroes the gradients, runs forward, the loss (with the auxiliary heads' share, as
  // training computes it) and backward; returns the main logits.
  const Tensor& forward_backward() {
    model->params().zero_grad();
    const Tensor& logits = model->forward(x);
    loss.forward(logits, targets.data());
    aux.forward(*model, targets.data());
    loss.backward(dlogits, targets.data());
    model->backward(dlogits, aux.backward(targets.data(), 1.f));
    return logits;
  }

  // The last forward_backward's training loss: main + the weighted auxiliary losses.
  double total_loss() { return loss.loss() + aux.weighted_loss(); }

  // Reference F64 tensor `name`, in place.
  parity::F64View view(const std::string& name) const {
    MPICNN_CHECK(ref.info(name).dtype == DType::F64, ref.path(), ": ", name, " is not F64");
    const std::span<const uint8_t> b = ref.bytes(name);
    return {b.data(), b.size() / 8};
  }

  // The norm of the whole reference tensor family `prefix` + parameter name (for floors).
  double reference_norm(const std::string& prefix) const {
    double total = 0;
    for (const StateEntry& e : model->params().entries())
      if (e.kind == StateKind::Param) {
        const parity::F64View v = view(prefix + e.name);
        for (size_t i = 0; i < v.size(); ++i) total += v[i] * v[i];
      }
    return std::sqrt(total);
  }

  // Parameter `e`'s initial values.
  const real* initial(const StateEntry& e) const { return init.data() + e.offset; }
  // Parameter `e`'s values now minus its initial ones, in double.
  auto update(const StateEntry& e) const {
    return parity::diff_view(e.value->data(), initial(e), size_t(e.shape.numel()));
  }

  SafetensorsReader ref;
  std::unique_ptr<Model> model;
  std::vector<real> init;  // the parameter slab as loaded
  Tensor x, dlogits;       // (N, C, H, W), (N, classes)
  std::vector<int32_t> targets;
  SoftmaxCrossEntropy loss;
  AuxLosses aux;  // nothing for models without auxiliary heads
  std::unique_ptr<Optimizer> opt;
};

}  // namespace mpicnn::parity_run
