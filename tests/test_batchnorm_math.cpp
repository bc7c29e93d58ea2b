// The GPU's BatchNorm math (layers/batchnorm_math.h, what kernels/batchnorm.cu computes per
// element) against the CPU layer, bit for bit, on the host: forward with and without the fused
// residual add and ReLU, and backward with and without the fused ReLU's mask, in training and
// eval mode. Compiled with -ffp-contract=off (the Makefile), so that the host rounds each
// operation as the functions say, as the device does. The functions spell out the FMAs GCC
// forms in the CPU layer at -O3 (the release build); the -O1 sanitizer builds form fewer, so
// tests/run_all.sh leaves this case out of the ASan run.
#include <cstring>

#include "layers/batchnorm.h"
#include "layers/batchnorm_math.h"
#include "testing.h"

using namespace mpicnn;
using mpicnn::testing::fill_uniform;
using mpicnn::testing::random_tensor;

namespace {

bool same(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

struct Bn {
  ParamStore store;
  BatchNorm2d bn;
  explicit Bn(int channels) : bn(channels) {
    bn.register_state(store, "bn.");
    store.allocate();
    bn.reset_parameters(0);
    fill_uniform(bn.weight, 11, 0.5f, 1.5f);
    fill_uniform(bn.bias, 12, -0.5f, 0.5f);
    fill_uniform(bn.running_mean, 13, -0.2f, 0.2f);
    fill_uniform(bn.running_var, 14, 0.5f, 1.5f);
  }
};

// Counts the elements of y where the CPU's value and f(n, c, i)'s differ in any bit.
template <typename F>
int64_t mismatches(const Tensor& y, F f) {
  const int64_t N = y.size(0), C = y.size(1), HW = y.size(2) * y.size(3);
  int64_t bad = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < HW; ++i) bad += !same(y.data()[(n * C + c) * HW + i], f(n, c, i));
  return bad;
}

}  // namespace

TEST_CASE("BatchNorm's GPU math equals the CPU layer bit for bit: forward with add and ReLU, backward with the ReLU mask") {
  // M = N * HW = 64 values per channel, a power of two: the CPU's mean(g) = float(sum / M) is
  // then its dbias = float(sum) divided by M exactly, and likewise mean(g * xhat).
  const Shape s{2, 5, 4, 8};
  const int64_t C = s[1], HW = s[2] * s[3], M = s[0] * HW;
  const Tensor x = random_tensor(s, 1), r = random_tensor(s, 2), dy = random_tensor(s, 3);
  auto at = [&](const Tensor& t, int64_t n, int64_t c, int64_t i) {
    return t.data()[(n * C + c) * HW + i];
  };
  for (bool training : {true, false}) {
    CAPTURE(training);
    for (int variant = 0; variant < 3; ++variant) {  // plain, fused ReLU, residual add + ReLU
      CAPTURE(variant);
      Bn b{int(C)};
      b.bn.set_training(training);
      b.bn.set_fused_relu(variant == 1);
      Tensor y = Tensor::empty(s);
      if (variant == 2) b.bn.forward(y, x, r);
      else b.bn.forward(y, x);
      const float* mean = b.bn.saved_mean().data();
      const float* invstd = b.bn.saved_invstd().data();
      CHECK(mismatches(y, [&](int64_t n, int64_t c, int64_t i) {
              const float sc = bn_math::scale(b.bn.weight.data()[c], invstd[c]);
              const float sh = bn_math::shift(b.bn.bias.data()[c], mean[c], sc);
              const float xv = at(x, n, c, i);
              if (variant == 0) return bn_math::apply<false, false>(xv, sc, sh, 0.f);
              if (variant == 1) return bn_math::apply<false, true>(xv, sc, sh, 0.f);
              return bn_math::apply<true, true>(xv, sc, sh, at(r, n, c, i));
            }) == 0);
      if (variant == 2) continue;  // its backward is the plain one (the block masks)
      // Backward (with the fused ReLU: dy masked by y > 0); the parameter gradients start at 0.
      Tensor dx = Tensor::empty(s);
      b.bn.backward(dx, dy, x, y);
      const float* dbias = b.bn.grad_bias.data();
      const float* dweight = b.bn.grad_weight.data();
      CHECK(mismatches(dx, [&](int64_t n, int64_t c, int64_t i) {
              const float g = variant == 1 ? bn_math::grad<true>(at(dy, n, c, i), at(y, n, c, i))
                                           : bn_math::grad<false>(at(dy, n, c, i), 0.f);
              const float k = bn_math::mul(b.bn.weight.data()[c], invstd[c]);
              const float mdy = training ? dbias[c] / float(M) : 0.f;
              const float mdyx = training ? dweight[c] / float(M) : 0.f;
              return bn_math::dx(g, bn_math::xhat(at(x, n, c, i), mean[c], invstd[c]), k, mdy,
                                 mdyx);
            }) == 0);
      if (variant == 1) {  // the mask was really applied somewhere, and not everywhere
        int64_t zeros = 0;
        for (int64_t i = 0; i < y.numel(); ++i) zeros += y.data()[i] == 0.f;
        CHECK((zeros > 0 && zeros < y.numel()));
      }
    }
  }
}
