// Whether models fuse neighbouring layers into one pass: BatchNorm + the ReLU after it
// (forward and backward), and a residual block's last BatchNorm + its add + its ReLU. Fused and
// unfused runs give bit-identical results (tests/test_fusion.cpp); fusion only saves passes over
// the activations. On the CPU on by default; MPICNN_FUSION=0 in the environment or
// set_fusion(false) turns it off (the reference path for tests and benchmarks). On the GPU
// (kernels/batchnorm.cu) off until it has passed the GPU checks on a real GPU: opt in with
// MPICNN_GPU_FUSION=1 or set_gpu_fusion(true). Read by the modules when they plan.
// Folding (GPU inference only, layers/fold.h): an eval-mode BatchNorm2d right after a Conv2d is
// folded into the convolution's weights and bias, which then runs with the ReLU (and a residual
// block's add) in one cuDNN call. Off until it has passed the GPU checks on a real GPU: opt in
// with MPICNN_GPU_FOLD=1 or set_gpu_fold(true). Never on the CPU, whose engine it leaves as is.
#pragma once

namespace mpicnn {

bool fusion_enabled();  // the switch, and for a model on the GPU the GPU opt-in
void set_fusion(bool on);
void set_gpu_fusion(bool on);
bool fold_enabled();  // the GPU opt-in, for a model on the GPU (false on the CPU)
void set_gpu_fold(bool on);

}  // namespace mpicnn
