// Whether CPU models fuse neighbouring layers into one pass: BatchNorm + the ReLU after it
// (forward and backward), and a residual block's last BatchNorm + its add + its ReLU. Fused and
// unfused runs give bit-identical results (tests/test_fusion.cpp); fusion only saves passes over
// the activations. On by default; MPICNN_FUSION=0 in the environment or set_fusion(false)
// turns it off (the reference path for tests and benchmarks). Never on the GPU, whose layers
// run cuDNN's and our kernels one by one. Read by the modules when they plan.
#pragma once

namespace mpicnn {

bool fusion_enabled();  // the switch, and the model's device is the CPU
void set_fusion(bool on);

}  // namespace mpicnn
