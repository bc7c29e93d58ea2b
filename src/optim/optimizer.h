// Optimizer: what SGD and AdamW share. They update a ParamStore's whole parameter slab in one
// pass, keep their state in slabs of the same layout, and save / load it per parameter name.
// Not a learning-rate schedule (optim/schedule.h) and not a checkpoint policy (io/checkpoint).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/gpu.h"
#include "io/safetensors.h"
#include "io/stateful.h"
#include "layers/params.h"

namespace mpicnn {

class Optimizer : public Stateful {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter from store.grads(), on the store's device (one fused kernel
  // over the slab on the GPU). Allocates nothing.
  virtual void step() = 0;
  // Gradients are multiplied by this before the update (1 / loss scale for fp16 training on
  // the GPU; 1 otherwise, which leaves results bit-identical).
  void set_grad_scale(real scale);
  real grad_scale() const { return grad_scale_; }

  double lr() const { return lr_; }
  void set_lr(double lr);          // finite and >= 0
  int64_t steps() const { return steps_; }  // steps taken so far (torch's state['step'])
  virtual const char* name() const = 0;     // "sgd", "adamw": the type recorded in the state

  // The state slabs in creation order (handles sharing their memory) and the step count: what
  // a trainer replicates from rank 0 to the other ranks after loading a checkpoint there.
  std::vector<Tensor> state_slabs() const;
  void set_steps(int64_t steps);  // >= 0

  // State as tensors named `prefix + slab + "." + parameter name` (F32, the parameter's shape),
  // `prefix + "step"` (I64 scalar) and metadata `prefix + "type"` / `prefix + option`, e.g.
  // optim.momentum_buffer.layer1.0.conv1.weight, optim.step, optim.lr. Metadata values print
  // doubles in shortest round-trip form, so they are exact.
  void save_state(SafetensorsWriter& out, const std::string& prefix = "optim.") const;
  // Restores the slabs, the step count and lr (as torch's load_state_dict does). Everything is
  // validated before anything changes: the type, every option other than lr (a resumed run
  // with different hyperparameters would silently not be a resume), every name and shape,
  // and no stray tensor under `prefix`. Errors name the file and the tensor or option.
  void load_state(const SafetensorsReader& in, const std::string& prefix = "optim.");

  // A checkpoint's optimizer.safetensors (io/stateful.h): save_state's tensors; load_state
  // checks everything before it changes anything, so there is no separate check.
  std::string state_name() const override { return name(); }
  FileDigest write_state(const std::string& path, const std::map<std::string, std::string>& metadata) const override;
  void check_state(const SafetensorsReader&) const override {}
  void read_state(const SafetensorsReader& r) override { load_state(r); }

 protected:
  Optimizer(ParamStore& store, double lr, const char* who);

  // A run of parameter floats [begin, end) that takes weight decay or not. Runs never cover
  // the padding between entries, so it stays zero whatever the gradient slab holds there.
  // Entries are split into runs of at most kChunkFloats so the OpenMP loop over runs is
  // balanced and each run's inner loop vectorises.
  struct Chunk {
    int64_t begin, end;
    bool decay;
  };
  static constexpr int64_t kChunkFloats = 16384;
  // Chunks chunks_[first, last) whose parameters take lr * lr_mult (StateEntry::lr_mult).
  struct ChunkGroup {
    int64_t first, last;
    double lr_mult;
  };
  // Builds chunks_ and groups_ (and the chunks' device copy for a GPU store): an entry decays
  // unless exclude_no_decay and its `decay` flag is false. Frozen entries get no chunk: they
  // are never read nor written, and their state stays zero. Chunks are ordered by group.
  void build_chunks(bool exclude_no_decay);
  const gpu::SlabChunk* gpu_chunks(const ChunkGroup& g) const {
    return static_cast<const gpu::SlabChunk*>(gpu_chunks_.get()) + g.first;
  }

  // A state slab with the parameter slab's layout, zeroed, saved and loaded under `slab_name`.
  // The returned handle shares the slab's memory.
  Tensor add_state_slab(const std::string& slab_name);
  // Options recorded in the state and checked on load, as (name, value), lr excluded.
  virtual std::vector<std::pair<std::string, double>> options() const = 0;

  ParamStore& store_;
  std::vector<Chunk> chunks_;
  std::vector<ChunkGroup> groups_;
  std::shared_ptr<void> gpu_chunks_;  // chunks_ as gpu::SlabChunk on the device (GPU store)
  real grad_scale_ = 1.f;
  double lr_ = 0;
  int64_t steps_ = 0;
  const char* who_;  // "SGD", "AdamW": the word that starts our error messages

 private:
  struct StateSlab {
    std::string name;
    Tensor slab;  // (param slab floats)
  };
  std::vector<StateSlab> slabs_;
};

// Formats a double so that parsing it back gives the same bits ("0.1", "1e-08").
std::string exact_double(double v);

}  // namespace mpicnn
