// --init-weights loading and the frozen / head-lr marks of a fine-tuning run (finetune.h).
#include "train/finetune.h"
#include "core/text.h"

#include <filesystem>
#include <sstream>

#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "layers/batchnorm.h"

namespace mpicnn::train {
namespace fs = std::filesystem;

namespace {

Dims entry_dims(const StateEntry& e) { return e.kind == StateKind::BufferI64 ? Dims{} : dims_of(e.shape); }

}  // namespace

std::string init_weights_file(const std::string& path) {
  CHECK(fs::exists(path), "--init-weights: ", path, " does not exist");
  if (!fs::is_directory(path)) return path;
  try {
    return resolve_checkpoint(path).model;
  } catch (const Error& e) {
    FAIL("--init-weights: ", e.message());
  }
}

InitWeightsReport load_init_weights(Model& model, const std::string& path,
                                    const std::vector<std::string>& partial) {
  InitWeightsReport rep;
  rep.file = init_weights_file(path);
  const SafetensorsReader r = [&] {
    try {
      return SafetensorsReader(rep.file);
    } catch (const Error& e) {
      FAIL("--init-weights: ", e.message());
    }
  }();
  const std::string& f = rep.file;
  std::vector<const StateEntry*> load;
  for (const StateEntry& e : model.params().entries()) {
    const bool part = param_under_any(e.name, partial);
    if (!r.contains(e.name)) {
      CHECK(part, "--init-weights: ", f, " has no tensor '", e.name, "' (model ", model.name(),
            "; --init-weights-partial ", e.name, " keeps its fresh initialisation)");
      rep.kept_fresh.push_back(e.name);
      continue;
    }
    const Dims want = entry_dims(e), got = r.info(e.name).shape;
    if (got == want) {
      load.push_back(&e);
    } else if (part || model.in_head(e.name)) {
      (part ? rep.kept_fresh : rep.new_head).push_back(e.name);
    } else {
      // A first convolution that differs only in its input channels: the data's channel count
      // against the weights' (a gray model on RGB-loaded images, or the reverse).
      const bool channels_only = got.size() == 4 && want.size() == 4 && got[1] != want[1] &&
                                 got[0] == want[0] && got[2] == want[2] && got[3] == want[3];
      FAIL("--init-weights: ", f, ": tensor '", e.name, "' has shape ", dims_str(got), ", model ",
           model.name(), " has ", dims_str(want),
           channels_only ? detail::concat(": the weights take ", got[1], "-channel input; pass --in-channels ",
                                          got[1], " to train on the images that way")
                         : std::string());
    }
  }
  for (const TensorInfo& t : r.tensors()) {
    if (model.params().find(t.name) || is_dropped_batchnorm_counter(model.params(), t.name)) continue;
    CHECK(param_under_any(t.name, partial), "--init-weights: ", f, ": tensor '", t.name,
          "' belongs to no parameter or buffer of model ", model.name());
    rep.ignored.push_back(t.name);
  }
  for (const StateEntry* e : load) read_state_entry(r, *e);
  rep.loaded = int(load.size());
  return rep;
}

std::string describe(const InitWeightsReport& r, int num_classes) {
  std::string s = "init weights: loaded " + std::to_string(r.loaded) + " tensors from " + r.file;
  if (!r.new_head.empty())
    s += ", new head " + join(r.new_head, "/") + " for " + std::to_string(num_classes) + " classes";
  if (!r.kept_fresh.empty()) s += ", fresh (--init-weights-partial): " + join(r.kept_fresh, "/");
  if (!r.ignored.empty()) s += ", ignored (--init-weights-partial): " + join(r.ignored, "/");
  return s;
}

void apply_finetune(Model& model, const TrainOptions& o) {
  ParamStore& store = model.params();
  std::vector<std::string> frozen = o.freeze;
  if (o.freeze_backbone)
    for (const StateEntry& e : store.entries())
      if (e.kind == StateKind::Param && !model.in_head(e.name)) frozen.push_back(e.name);
  if (!frozen.empty()) model.freeze(frozen);
  CHECK(store.num_trainable() > 0, o.freeze_backbone ? "--freeze-backbone" : "--freeze",
        ": nothing left to train (every parameter of ", model.name(), " is frozen)");
  if (o.head_lr_mult != 1)
    for (size_t i = 0; i < store.entries().size(); ++i)
      if (store.entries()[i].kind == StateKind::Param && model.in_head(store.entries()[i].name))
        store.set_lr_mult(i, o.head_lr_mult);
  if (o.freeze_bn)
    model.root().for_each_layer([](Layer& l, const std::string&) {
      if (auto* bn = dynamic_cast<BatchNorm2d*>(&l)) bn->set_use_running_stats(true);
    });
}

std::string describe_frozen(const Model& model) {
  const ParamStore& store = model.params();
  const int64_t all = store.num_params(), frozen = all - store.num_trainable();
  if (frozen == 0) return "";
  // The frozen entries' top-level modules, in order ("conv1, bn1, layer1").
  std::vector<std::string> tops;
  for (const StateEntry& e : store.entries())
    if (e.kind == StateKind::Param && e.frozen) {
      const std::string top = e.name.substr(0, e.name.find('.'));
      if (tops.empty() || tops.back() != top) tops.push_back(top);
    }
  return "frozen: " + std::to_string(frozen) + " of " + std::to_string(all) + " parameters (" +
         join(tops, ", ") + ")";
}

std::string describe_head_lr(const Model& model, double mult) {
  if (mult == 1) return "";
  std::ostringstream s;
  s << ", head " << join(model.head(), "/") << " lr x" << mult;
  return s.str();
}

}  // namespace mpicnn::train
