// Flatten: a reshape; copies only when the caller gave separate buffers. On the GPU's
// channels-last path it is where the typed NHWC activations end: its (N, C*H*W) output is
// plain float32 in NCHW order, as the classifier head and the loss take it.
#include "layers/flatten.h"

#include "core/gpu.h"

namespace mpicnn {

Shape Flatten::output_shape(const Shape& in) const {
  CHECK(in.ndim >= 1, "Flatten: input needs a batch dimension");
  return {in[0], in[0] ? in.numel() / in[0] : 0};
}

void Flatten::forward(Tensor& out, const Tensor& in) {
  CHECK(out.shape() == output_shape(in.shape()), "Flatten: out ", out.shape().str(),
        ", expected ", output_shape(in.shape()).str());
  if (on_gpu_as("Flatten", in.format(), {&in}, {&out}) && !in.format().plain()) {
    CHECK(in.dim() == 4, "Flatten: a ", format_name(in.format()), " input of ", in.dim(),
          " dimensions");
    return gpu::backend().convert(out.data(), Format{}, in.raw(), in.format(), in.size(0),
                                  in.size(1), in.size(2), in.size(3), /*accumulate=*/false);
  }
  (void)on_gpu("Flatten", {&out, &in});  // one device (copy_from would move between them)
  if (out.raw() != in.raw()) out.copy_from(in);
}

void Flatten::backward(Tensor& din, const Tensor& dout, const Tensor& in, const Tensor& /*out*/) {
  if (!din.defined()) return;
  CHECK(din.shape() == in.shape() && dout.numel() == in.numel(), "Flatten backward: din ",
        din.shape().str(), ", dout ", dout.shape().str());
  if (on_gpu_as("Flatten backward", din.format(), {&din}, {&dout}) && !din.format().plain())
    return gpu::backend().convert(din.raw(), din.format(), dout.data(), Format{}, din.size(0),
                                  din.size(1), din.size(2), din.size(3), /*accumulate=*/false);
  (void)on_gpu("Flatten backward", {&din, &dout});
  if (din.raw() != dout.raw()) din.copy_from(dout);
}

}  // namespace mpicnn
