// The element type of tensors, layers, models and optimizers: float in every build that users
// run. The test suite also compiles that numerical core a second time with MPICNN_F64=1, where
// `real` is double and the namespace mpicnn is renamed mpicnn_f64 (Makefile, F64_SRC), to
// compare it with PyTorch float64, where rounding cannot flip a ReLU or max-pool decision
// (tests/test_model_parity.cpp). Code outside that core (data, dist, io, train) stays float.
#pragma once

namespace mpicnn {

#if defined(MPICNN_F64) && MPICNN_F64
using real = double;
#else
using real = float;
#endif

}  // namespace mpicnn
