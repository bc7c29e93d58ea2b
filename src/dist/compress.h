// Gradient compression for the allreduce (--grad-compression), as Horovod's fp16 compression:
// each bucket is cast to a 16-bit format before the allreduce, the sums run on the 16-bit
// values (each pair added in float and rounded back: the user-defined MPI op of HalfSum), and
// the result is cast back to float32 after, where the optimizer accumulates it. Halves the
// bytes on the wire; costs a rounding of every gradient and of every partial sum.
#pragma once
#include <mpi.h>

#include <cstdint>

#include "dist/grad_compression.h"

namespace mpicnn::dist {

// float32 -> the 16-bit format, round to nearest even (fp16: magnitudes past 65504 become inf,
// as a cast in PyTorch does), and back (exact). c must not be None.
void compress(GradCompression c, const float* in, uint16_t* out, int64_t n);
void decompress(GradCompression c, const uint16_t* in, float* out, int64_t n);

// The MPI sum of two arrays of the 16-bit format (datatype MPI_UINT16_T): inout[i] =
// round(float(in[i]) + float(inout[i])). Commutative. Created in the constructor (MPI must be
// initialised), freed in the destructor (before MPI_Finalize).
class HalfSum {
 public:
  explicit HalfSum(GradCompression c);
  ~HalfSum();
  HalfSum(const HalfSum&) = delete;
  HalfSum& operator=(const HalfSum&) = delete;
  MPI_Op op() const { return op_; }

 private:
  MPI_Op op_ = MPI_OP_NULL;
};

}  // namespace mpicnn::dist
