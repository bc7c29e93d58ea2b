// A model or an optimizer as a checkpoint (io/checkpoint.h) sees it: a name recorded in
// trainer.json, its tensors written to one safetensors file, checked and read back. io knows
// models and optimizers only through this; Model (models/model.h) and Optimizer
// (optim/optimizer.h) implement it.
#pragma once
#include <map>
#include <string>

#include "io/safetensors.h"

namespace mpicnn {

class Stateful {
 public:
  virtual ~Stateful() = default;
  // The name trainer.json records ("resnet18", "sgd"); a load refuses another.
  virtual std::string state_name() const = 0;
  // Writes every tensor (and `metadata`) to the safetensors file `path`; its size and CRC-32.
  virtual FileDigest write_state(const std::string& path, const std::map<std::string, std::string>& metadata) const = 0;
  // Throws one line naming the file and the tensor if `r` cannot be read into this; changes
  // nothing. read_state after a check that passed does not fail.
  virtual void check_state(const SafetensorsReader& r) const = 0;
  virtual void read_state(const SafetensorsReader& r) = 0;
};

}  // namespace mpicnn
