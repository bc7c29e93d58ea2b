// Model: a named module tree with its parameter slabs, planned for one input shape, plus the
// state dict as safetensors with torchvision's names. Not a trainer: the loss, optimizer and
// data live elsewhere; this is what they drive.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "layers/params.h"
#include "models/module.h"

namespace mpicnn {

struct ModelOptions {
  int num_classes = 1000;
  int in_channels = 3;
  // Dropout probability of the classifiers that have one (AlexNet, VGG, SqueezeNet), as
  // torchvision 0.14's `dropout` argument. Parity tests set 0: masks cannot match torch's.
  real dropout = 0.5f;
};

// Whether state entry `name` lies under `prefix`: the prefix is the whole name or ends at one of
// its dots ("layer1" covers "layer1.0.conv1.weight", not "layer10.0.conv1.weight").
bool param_under(const std::string& name, const std::string& prefix);

class Model {
 public:
  // Registers the tree's state (in torchvision order), allocates the slabs and initialises
  // with `init` (the model family's torchvision initialisation) from `seed`.
  Model(std::string name, std::unique_ptr<Module> root, ModelOptions options,
        const std::function<void(Model&, uint64_t)>& init, uint64_t seed);

  const std::string& name() const { return name_; }
  const ModelOptions& options() const { return options_; }
  ParamStore& params() { return store_; }
  const ParamStore& params() const { return store_; }
  Module& root() { return *root_; }

  // Places the model on `device` (its slabs move; see ParamStore::to). Once, before plan():
  // the device is chosen when the model is built, and every layer then runs there or fails.
  void to(Device device);
  Device device() const { return store_.device(); }
  // Plans for inputs of this shape (N, C, H, W) on the model's device (every layer's buffers
  // and workspaces); returns the logits shape (N, classes).
  Shape plan(const Shape& input);
  const Shape& planned_input() const { return planned_; }
  void set_training(bool training);
  bool training() const { return training_; }
  // Logits (N, classes) for x (N, C, H, W) on the model's device, N up to the planned batch.
  const Tensor& forward(const Tensor& x);
  // Parameter gradients '+=' from dlogits of the last forward (the caller zeroes them).
  void backward(const Tensor& dlogits);
  // Called during backward with offsets such that every gradient at grad-slab offset >= it is
  // final (non-increasing; the last call, after backward, is 0). See GradReadyFn in
  // module.h. An empty function removes the hook.
  void set_grad_ready(GradReadyFn fn) { grad_ready_ = std::move(fn); }

  // State dict (parameters and buffers) by torchvision name. load is strict: every entry must
  // be present with its shape, and no other tensor may be in the file. On a GPU model both
  // stage through host copies.
  // The classifier: the prefixes of its layers ("fc", "classifier.6"), what a new class count
  // re-initialises (--init-weights) and --freeze-backbone leaves trainable. Set by the model
  // family's make_*; by default the layer of the last registered parameter.
  const std::vector<std::string>& head() const { return head_; }
  void set_head(std::vector<std::string> prefixes);
  bool in_head(const std::string& entry_name) const;
  // Freezes the parameters under each prefix (param_under), once, before the optimizer and
  // gradient sync are built: their layers then skip the parameter gradients in backward, and
  // backward stops below the lowest trainable layer. Errors name a prefix that matches nothing.
  void freeze(const std::vector<std::string>& prefixes);

  void save_state_dict(const std::string& path,
                       const std::map<std::string, std::string>& metadata = {}) const;
  void load_state_dict(const std::string& path);

 private:
  std::string name_;
  std::unique_ptr<Module> root_;
  ModelOptions options_;
  ParamStore store_;
  void refresh_layer_states();  // each layer's has-params and frozen flags from the entries

  std::vector<std::string> head_;
  Shape planned_;
  bool training_ = true;
  GradReadyFn grad_ready_;
};

}  // namespace mpicnn
