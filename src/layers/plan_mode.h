// Planning state that spans a model's blocks while one plan is made (not configuration: how the
// plan runs is the ExecConfig's, core/exec.h): which of two output slots the next residual block
// of an inference plan writes, so that a block never writes the slot holding its input (the
// previous block's output). Model::plan opens a Scope for the duration of one plan, on the
// planning thread.
#pragma once

namespace mpicnn::plan_mode {

// 0, 1, 0, ... over the calls within one plan.
int next_parity();

class Scope {
 public:
  Scope();
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  int saved_parity_;
};

}  // namespace mpicnn::plan_mode
