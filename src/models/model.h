// Model: a named module tree with its parameter slabs, planned for one input shape, plus the
// state dict as safetensors with torchvision's names. Not a trainer: the loss, optimizer and
// data live elsewhere; this is what they drive.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "io/safetensors.h"  // FileDigest
#include "io/stateful.h"
#include "layers/params.h"
#include "models/module.h"

namespace mpicnn {

struct ModelOptions {
  int num_classes = 1000;
  int in_channels = 3;
  // Dropout probability of the classifiers that have one (AlexNet, VGG, SqueezeNet, Inception
  // v3, GoogLeNet), as torchvision 0.14's `dropout` argument; unset, the family's torchvision
  // default (0.5; GoogLeNet 0.2). Parity tests set 0: masks cannot match torch's.
  std::optional<real> dropout = std::nullopt;
  // GoogLeNet's auxiliary classifiers' dropout, torchvision's `dropout_aux`; unset, its 0.7.
  // Separate from `dropout` as in torchvision (the heads' default differs); parity sets both 0.
  std::optional<real> aux_dropout = std::nullopt;
  // false: skip the family's initialisation (parameters and buffers stay zero) for a caller
  // that loads a whole state dict next; the VGGs' 130 M random draws take seconds.
  bool initialise = true;

  real dropout_or(real family_default) const { return dropout.value_or(family_default); }
  real aux_dropout_or(real family_default) const { return aux_dropout.value_or(family_default); }
};

// Whether state entry `name` lies under `prefix`: the prefix is the whole name or ends at one of
// its dots ("layer1" covers "layer1.0.conv1.weight", not "layer10.0.conv1.weight").
bool param_under(const std::string& name, const std::string& prefix);
// Whether a saved tensor `name` is a BatchNorm counter ("X.num_batches_tracked") that `store`
// keeps none of beside a BatchNorm it has ("X.running_mean"): FrozenBatchNorm2d's, which drops
// it on load as torchvision does (detection backbones). Loaders skip such tensors.
bool is_dropped_batchnorm_counter(const ParamStore& store, const std::string& name);
// Whether `name` lies under any of `prefixes` (param_under).
bool param_under_any(const std::string& name, const std::vector<std::string>& prefixes);

// An auxiliary classifier head's output (Inception v3's AuxLogits, GoogLeNet's aux1 and aux2):
// the reference training recipe's loss is main + sum weight * cross_entropy(logits).
struct AuxOutput {
  std::string name;             // the head's module name ("AuxLogits", "aux1")
  real weight;                  // its loss weight (0.4 for Inception v3, 0.3 for GoogLeNet's)
  const Tensor* logits = nullptr;  // (N, classes) of the last training forward
};

class AuxNet;
class SafetensorsReader;

// State entry e's value from r (its name and shape already checked), staged through a host copy
// when e lives on the GPU: what load_state_dict and --init-weights read each tensor with.
void read_state_entry(const SafetensorsReader& r, const StateEntry& e);

class Model : public Stateful {
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
  // Plans for inputs of this shape (N, C, H, W) as cfg says (core/exec.h: every layer's
  // buffers and workspaces, and how each runs); cfg.device must be the model's. An inference
  // plan (cfg.inference: evaluation, pipeline_eval, inference benchmarks) shares activation
  // buffers on the CPU and backward() then fails; a GPU model plans it as for training.
  // Returns the logits shape (N, classes).
  Shape plan(const Shape& input, const ExecConfig& cfg);
  const Shape& planned_input() const { return planned_; }
  // The config of the last plan (as the model took it).
  const ExecConfig& exec() const { return exec_; }
  // What the last plan chose, one line per layer that had a choice (Layer::plan_note):
  // "layer1.0.conv1  Conv2d  direct avx512 fp32". For --explain-plan.
  std::string explain_plan();
  // Multiply-adds of one image's forward pass at the planned input size: every convolution's
  // and linear layer's (other layers are not counted), auxiliary heads included. After plan().
  int64_t forward_macs();
  void set_training(bool training);
  bool training() const { return training_; }
  // Logits (N, classes) for x (N, C, H, W) on the model's device, N up to the planned batch.
  const Tensor& forward(const Tensor& x);
  // The auxiliary heads' outputs of the last forward: every head of the model after a
  // training-mode forward, none in eval mode (the heads are not computed) or for models
  // without heads. Their logits are valid until the next forward.
  const std::vector<AuxOutput>& aux_outputs() const;
  // Every auxiliary head the model has (logits unset): what a loss plans for.
  const std::vector<AuxOutput>& aux_heads() const { return aux_heads_; }
  // Parameter gradients '+=' from dlogits of the last forward (the caller zeroes them) and,
  // when it computed auxiliary outputs, from one gradient per aux_outputs() entry (daux[i]:
  // (N, classes), in that order); daux must be empty otherwise.
  void backward(const Tensor& dlogits, std::span<const Tensor* const> daux = {});
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

  // Returns the written file's size and CRC-32 (io/safetensors.h), for a checkpoint's record.
  FileDigest save_state_dict(const std::string& path,
                             const std::map<std::string, std::string>& metadata = {}) const;
  void load_state_dict(const std::string& path);

  // A checkpoint's model.safetensors (io/stateful.h): the state dict; the check is strict as
  // load_state_dict is, and runs before any tensor changes.
  std::string state_name() const override { return name_; }
  FileDigest write_state(const std::string& path, const std::map<std::string, std::string>& metadata) const override {
    return save_state_dict(path, metadata);
  }
  void check_state(const SafetensorsReader& r) const override;
  void read_state(const SafetensorsReader& r) override;

 private:
  std::string name_;
  std::unique_ptr<Module> root_;
  ModelOptions options_;
  ParamStore store_;
  void refresh_layer_states();  // each layer's has-params and frozen flags from the entries
  // After new weights were read into a planned model in eval mode: the plan's copies made from
  // them (folded BatchNorm, layers/fold.h) are made again, by entering eval mode again.
  void refresh_plan_copies();

  std::vector<std::string> head_;
  Shape planned_;
  ExecConfig exec_;  // of the last plan: activations' format (the input's included), inference
  bool training_ = true;
  GradReadyFn grad_ready_;
  AuxNet* aux_net_ = nullptr;          // the root, when it has auxiliary heads
  std::vector<AuxOutput> aux_heads_;   // one per head; logits set by forward
  bool aux_ran_ = false;               // the last forward computed them
};

}  // namespace mpicnn
