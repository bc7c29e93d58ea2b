// Fine-tuning in `./train`: --init-weights (a state dict loaded strictly by name and shape, the
// classifier re-initialised when the class count differs), and the frozen parameters, frozen
// BatchNorm statistics and head learning rate of --freeze, --freeze-backbone, --freeze-bn and
// --head-lr-mult. Not the trainer (trainer.cpp calls these on its replica) and no MPI.
#pragma once
#include <string>
#include <vector>

#include "models/model.h"
#include "train/options.h"

namespace mpicnn::train {

struct InitWeightsReport {
  std::string file;                     // the safetensors file read
  int loaded = 0;                       // tensors loaded
  std::vector<std::string> new_head;    // head entries whose shape differs: kept fresh
  std::vector<std::string> kept_fresh;  // --init-weights-partial entries missing or differing
  std::vector<std::string> ignored;     // --init-weights-partial tensors the model lacks
};

// The safetensors file --init-weights names: `path` itself, or the model.safetensors of a run
// directory or checkpoint (io/checkpoint.h resolve_checkpoint, as --resume resolves it).
std::string init_weights_file(const std::string& path);

// Loads every tensor of `path` (init_weights_file) into `model`, strictly by name and shape:
// the head (Model::head()) may differ in shape, then keeps the fresh model's initialisation
// (what torchvision's reset_parameters with this seed gives); `partial` names or prefixes may
// be missing, differ or be extra. Anything else throws one line naming the tensor and the file,
// before any value changes.
InitWeightsReport load_init_weights(Model& model, const std::string& path,
                                    const std::vector<std::string>& partial);
// "init weights: loaded 60 tensors from F, new head fc.weight/fc.bias for 5 classes".
std::string describe(const InitWeightsReport& r, int num_classes);

// --freeze, --freeze-backbone, --freeze-bn and --head-lr-mult on a freshly built model, before
// its optimizer and gradient sync are made. Errors name the flag: a prefix matching nothing,
// or nothing left to train.
void apply_finetune(Model& model, const TrainOptions& o);
// "frozen: 11176512 of 11179077 parameters (conv1, bn1, layer1, ...)", empty when none is.
std::string describe_frozen(const Model& model);
// ", head fc lr x10" for the optimizer's header line; empty when mult is 1.
std::string describe_head_lr(const Model& model, double mult);

}  // namespace mpicnn::train
