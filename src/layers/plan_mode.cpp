// The flag and parity of layers/plan_mode.h, per planning thread.
#include "layers/plan_mode.h"

namespace mpicnn {

namespace plan_mode {
namespace {
thread_local bool t_inference = false;
thread_local int t_parity = 0;
}  // namespace
bool inference() { return t_inference; }
int next_parity() { return t_parity++ % 2; }
Scope::Scope(bool inference) : saved_inference_(t_inference), saved_parity_(t_parity) {
  t_inference = inference;
  t_parity = 0;
}
Scope::~Scope() {
  t_inference = saved_inference_;
  t_parity = saved_parity_;
}
}  // namespace plan_mode

}  // namespace mpicnn
