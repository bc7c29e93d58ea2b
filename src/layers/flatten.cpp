// Flatten: a reshape; copies only when the caller gave separate buffers.
#include "layers/flatten.h"

namespace mpicnn {

Shape Flatten::output_shape(const Shape& in) const {
  CHECK(in.ndim >= 1, "Flatten: input needs a batch dimension");
  return {in[0], in[0] ? in.numel() / in[0] : 0};
}

void Flatten::forward(Tensor& out, const Tensor& in) {
  CHECK(out.shape() == output_shape(in.shape()), "Flatten: out ", out.shape().str(),
        ", expected ", output_shape(in.shape()).str());
  (void)on_gpu("Flatten", {&out, &in});  // one device (copy_from would move between them)
  if (out.data() != in.data()) out.copy_from(in);
}

void Flatten::backward(Tensor& din, const Tensor& dout, const Tensor& in, const Tensor& /*out*/) {
  if (!din.defined()) return;
  CHECK(din.shape() == in.shape() && dout.numel() == in.numel(), "Flatten backward: din ",
        din.shape().str(), ", dout ", dout.shape().str());
  (void)on_gpu("Flatten backward", {&din, &dout});
  if (din.data() != dout.data()) din.copy_from(dout);
}

}  // namespace mpicnn
