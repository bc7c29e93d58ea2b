// What the plan being made is for, read by the layers and modules while they plan: an
// inference-only plan (Model::plan with PlanFor::kInference, CPU models) or a training one.
// Here in layers/ so that a layer can choose its algorithm by it (Conv2d's bf16 1x1 layers);
// the modules (models/module.h) use it for their buffers. Not the layer's training flag,
// which says how the next forward runs, not what was planned.
#pragma once

namespace mpicnn {

// Inference-only plans (Model::plan with PlanFor::kInference, CPU models): nothing runs
// backward, so no activation has to outlive its last reader. Planning then (a) runs every
// layer that declares kForwardMayAlias (BatchNorm2d) in place, overwriting its input, which
// no model reads again; (b) lets blocks put their layers' outputs in block_scratch slots
// shared by every block (Leaf::output_to_scratch); (c) allocates no gradient buffers; (d)
// lets layers pick the algorithm fastest forward (Conv2d's bf16 1x1 layers). The flag is set
// by Model::plan for the duration of one plan, on the planning thread.
namespace plan_mode {
bool inference();
// 0, 1, 0, ... over the calls within one plan: which of two output slots a residual block
// writes, so that a block never writes the slot holding its input (the previous block's
// output).
int next_parity();
class Scope {
 public:
  explicit Scope(bool inference);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  bool saved_inference_;
  int saved_parity_;
};
}  // namespace plan_mode

}  // namespace mpicnn
