// ReLU: fast path vs reference loop, gradient check, in-place use.
#include "layers/relu.h"
#include "testing.h"

using namespace mpicnn;
using namespace mpicnn::testing;

static Vec relu_ref(const Vec& x) {
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] > 0 ? x[i] : 0;
  return y;
}

TEST_CASE("ReLU forward matches reference and gradient checks") {
  for (Shape s : {Shape{1, 3, 5, 7}, Shape{4, 2, 9, 9}, Shape{3, 17}}) {
    ReLU relu;
    Tensor x = random_tensor(s, 1), y = Tensor::empty(s);
    relu.forward(y, x);
    expect_close("relu forward " + s.str(), y, relu_ref(to_double(x)), 0, 0);

    Tensor w = random_tensor(s, 2), dx = Tensor::empty(s);
    relu.backward(dx, w, x, y);
    Vec wd = to_double(w);
    check_gradient("relu dx " + s.str(), dx,
                   [&](const Vec& v) { return dot(relu_ref(v), wd); }, to_double(x));
  }
}

TEST_CASE("ReLU runs in place") {
  Tensor x = random_tensor({2, 3, 4, 4}, 3);
  Vec want = relu_ref(to_double(x));
  ReLU relu;
  relu.forward(x, x);
  expect_close("relu in place", x, want, 0, 0);
}
