// The execution config's vocabulary (core/exec.h): names, parsing and what this CPU has. Built
// into both engines (the float64 one has no direct kernels: kNone).
#include "core/exec.h"

#include "core/check.h"

namespace mpicnn {

const char* conv_algorithm_name(ConvAlgorithm a) {
  switch (a) {
    case ConvAlgorithm::kDirect: return "direct";
    case ConvAlgorithm::kIm2col: return "im2col";
    case ConvAlgorithm::kWinograd: return "winograd";
  }
  return "direct";
}

ConvAlgorithm parse_conv_algorithm(const std::string& name) {
  if (name == "direct") return ConvAlgorithm::kDirect;
  if (name == "im2col") return ConvAlgorithm::kIm2col;
  if (name == "winograd") return ConvAlgorithm::kWinograd;
  FAIL("MPICNN_CONV: unknown convolution algorithm '", name, "' (direct, im2col, winograd)");
}

const char* direct_isa_name(DirectIsa isa) {
  switch (isa) {
    case DirectIsa::kAvx512: return "avx512";
    case DirectIsa::kAvx2: return "avx2";
    case DirectIsa::kNone: return "none";
  }
  return "none";
}

DirectIsa parse_direct_isa(const std::string& name) {
  if (name == "avx512") return DirectIsa::kAvx512;
  if (name == "avx2") return DirectIsa::kAvx2;
  FAIL("MPICNN_CONV_ISA: unknown instruction set '", name, "' (avx2, avx512)");
}

bool cpu_has(DirectIsa isa) {
#if defined(MPICNN_F64) && MPICNN_F64
  return isa == DirectIsa::kNone;
#else
  __builtin_cpu_init();
  switch (isa) {
    case DirectIsa::kAvx512: return __builtin_cpu_supports("avx512f");
    case DirectIsa::kAvx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case DirectIsa::kNone: return true;
  }
  return false;
#endif
}

DirectIsa best_direct_isa() {
  if (cpu_has(DirectIsa::kAvx512)) return DirectIsa::kAvx512;
  if (cpu_has(DirectIsa::kAvx2)) return DirectIsa::kAvx2;
  return DirectIsa::kNone;
}

}  // namespace mpicnn
