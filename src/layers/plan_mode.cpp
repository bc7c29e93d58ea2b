// The parity of layers/plan_mode.h, per planning thread.
#include "layers/plan_mode.h"

namespace mpicnn::plan_mode {

namespace {
thread_local int t_parity = 0;
}  // namespace

int next_parity() { return t_parity++ % 2; }
Scope::Scope() : saved_parity_(t_parity) { t_parity = 0; }
Scope::~Scope() { t_parity = saved_parity_; }

}  // namespace mpicnn::plan_mode
