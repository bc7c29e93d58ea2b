// The direct convolution's AVX-512 kernels: 16 channels per block, up to 28 accumulators a tile
// of the 32 vector registers. Compiled with AVX-512 flags on any x86-64 build machine (Makefile);
// conv_direct.cpp calls them only on a CPU that has AVX-512F.
#define MPICNN_DIRECT_NS direct_avx512
#include "layers/cpu/conv_direct_avx512_isa.h"

namespace mpicnn::direct::direct_avx512 {
using Isa = Avx512Isa;
}  // namespace mpicnn::direct::direct_avx512

#include "layers/cpu/conv_direct_impl.h"

namespace mpicnn::direct {
const Kernels* avx512_kernels() { return &direct_avx512::kKernels; }
}  // namespace mpicnn::direct
