// BatchNorm2d: reference loops for train/eval forward, PyTorch's running-stat formulas,
// gradient checks in both modes.
#include <cmath>
#include <cstring>

#include "layers/batchnorm.h"
#include "testing.h"

using namespace mpicnn;
using namespace mpicnn::testing;

namespace {

struct BnRef {
  Vec y, mean, var_biased;
};

// y = (x - mean) / sqrt(var + eps) * g + b with batch stats (train) or given stats (eval).
BnRef bn_ref(const Vec& x, const Vec& g, const Vec& b, const Shape& s, double eps, bool train,
             const Vec& rm, const Vec& rv) {
  const int64_t N = s[0], C = s[1], HW = s[2] * s[3];
  BnRef r{Vec(x.size()), Vec(size_t(C)), Vec(size_t(C))};
  for (int64_t c = 0; c < C; ++c) {
    double mean = 0, var = 0;
    if (train) {
      for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < HW; ++i) mean += x[size_t((n * C + c) * HW + i)];
      mean /= double(N * HW);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < HW; ++i) {
          double d = x[size_t((n * C + c) * HW + i)] - mean;
          var += d * d;
        }
      var /= double(N * HW);
    } else {
      mean = rm[size_t(c)];
      var = rv[size_t(c)];
    }
    r.mean[size_t(c)] = mean;
    r.var_biased[size_t(c)] = var;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < HW; ++i) {
        size_t k = size_t((n * C + c) * HW + i);
        r.y[k] = (x[k] - mean) / std::sqrt(var + eps) * g[size_t(c)] + b[size_t(c)];
      }
  }
  return r;
}

struct BnFixture {
  BatchNorm2d bn;
  ParamStore store;
  explicit BnFixture(int C) : bn(C) {
    bn.register_state(store, "bn.");
    store.allocate();
    bn.reset_parameters(0);
    fill_uniform(bn.weight, 11, 0.5f, 1.5f);
    fill_uniform(bn.bias, 12, -0.5f, 0.5f);
  }
};

}  // namespace

TEST_CASE("BatchNorm2d registers torchvision names and defaults") {
  BnFixture f(3);
  const auto& e = f.store.entries();
  REQUIRE(e.size() == 5);
  CHECK(e[0].name == "bn.weight");
  CHECK(e[1].name == "bn.bias");
  CHECK(e[2].name == "bn.running_mean");
  CHECK(e[3].name == "bn.running_var");
  CHECK(e[4].name == "bn.num_batches_tracked");
  CHECK(!e[0].decay);  // BatchNorm parameters are left out of weight decay on request
  CHECK(!e[1].decay);
  f.bn.reset_parameters(0);
  CHECK(f.bn.weight[0] == 1.f);
  CHECK(f.bn.bias[2] == 0.f);
  CHECK(f.bn.running_mean[1] == 0.f);
  CHECK(f.bn.running_var[1] == 1.f);
}

TEST_CASE("BatchNorm2d training forward, running stats and gradients") {
  for (Shape s : {Shape{2, 3, 5, 7}, Shape{1, 4, 3, 3}, Shape{5, 2, 1, 1}}) {
    const int C = int(s[1]);
    BnFixture f(C);
    fill_uniform(f.bn.running_mean, 13, -0.2f, 0.2f);
    fill_uniform(f.bn.running_var, 14, 0.5f, 2.f);
    Vec rm0 = to_double(f.bn.running_mean), rv0 = to_double(f.bn.running_var);
    Tensor x = random_tensor(s, 1, -2.f, 3.f), y = Tensor::empty(s);
    f.bn.forward(y, x);
    Vec g = to_double(f.bn.weight), b = to_double(f.bn.bias);
    BnRef ref = bn_ref(to_double(x), g, b, s, 1e-5, true, {}, {});
    expect_close("bn train forward " + s.str(), y, ref.y, 1e-4, 1e-5);

    // PyTorch: running = (1 - momentum) * running + momentum * stat, with the unbiased variance.
    const double M = double(s[0] * s[2] * s[3]);
    Vec want_rm(static_cast<size_t>(C), 0.0), want_rv(static_cast<size_t>(C), 0.0);
    for (int c = 0; c < C; ++c) {
      want_rm[size_t(c)] = 0.9 * rm0[size_t(c)] + 0.1 * ref.mean[size_t(c)];
      want_rv[size_t(c)] = 0.9 * rv0[size_t(c)] + 0.1 * ref.var_biased[size_t(c)] * M / (M - 1);
    }
    expect_close("running_mean", f.bn.running_mean, want_rm, 1e-5, 1e-6);
    expect_close("running_var", f.bn.running_var, want_rv, 1e-5, 1e-6);
    CHECK(f.bn.num_batches_tracked == 1);

    Tensor w = random_tensor(s, 2), dx = Tensor::empty(s);
    f.store.zero_grad();
    f.bn.backward(dx, w, x, y);
    Vec wd = to_double(w), xd = to_double(x);
    auto fx = [&](const Vec& v) { return dot(bn_ref(v, g, b, s, 1e-5, true, {}, {}).y, wd); };
    check_gradient("bn train dx " + s.str(), dx, fx, xd);
    check_gradient("bn train dweight " + s.str(), f.bn.grad_weight,
                   [&](const Vec& v) { return dot(bn_ref(xd, v, b, s, 1e-5, true, {}, {}).y, wd); },
                   g);
    check_gradient("bn train dbias " + s.str(), f.bn.grad_bias,
                   [&](const Vec& v) { return dot(bn_ref(xd, g, v, s, 1e-5, true, {}, {}).y, wd); },
                   b);
  }
}

TEST_CASE("BatchNorm2d eval uses running stats and leaves them alone") {
  Shape s{3, 4, 4, 5};
  BnFixture f(4);
  fill_uniform(f.bn.running_mean, 13, -0.5f, 0.5f);
  fill_uniform(f.bn.running_var, 14, 0.5f, 2.f);
  Vec rm = to_double(f.bn.running_mean), rv = to_double(f.bn.running_var);
  f.bn.set_training(false);
  Tensor x = random_tensor(s, 3), y = Tensor::empty(s);
  f.bn.forward(y, x);
  Vec g = to_double(f.bn.weight), b = to_double(f.bn.bias);
  expect_close("bn eval forward", y, bn_ref(to_double(x), g, b, s, 1e-5, false, rm, rv).y);
  expect_close("running_mean unchanged", f.bn.running_mean, rm, 0, 0);
  CHECK(f.bn.num_batches_tracked == 0);

  Tensor w = random_tensor(s, 4), dx = Tensor::empty(s);
  f.store.zero_grad();
  f.bn.backward(dx, w, x, y);
  Vec wd = to_double(w), xd = to_double(x);
  check_gradient("bn eval dx", dx,
                 [&](const Vec& v) { return dot(bn_ref(v, g, b, s, 1e-5, false, rm, rv).y, wd); },
                 xd);
  check_gradient("bn eval dweight", f.bn.grad_weight,
                 [&](const Vec& v) { return dot(bn_ref(xd, v, b, s, 1e-5, false, rm, rv).y, wd); },
                 g);
}

TEST_CASE("BatchNorm2d backward accumulates parameter gradients and allows din == dout") {
  Shape s{2, 3, 4, 4};
  BnFixture f(3);
  Tensor x = random_tensor(s, 5), y = Tensor::empty(s);
  f.bn.forward(y, x);
  Tensor w = random_tensor(s, 6), dx = Tensor::empty(s);
  f.store.zero_grad();
  f.bn.backward(dx, w, x, y);
  Vec g1 = to_double(f.bn.grad_weight), dx1 = to_double(dx);
  Tensor w2 = Tensor::empty(s);
  w2.copy_from(w);
  f.bn.backward(w2, w2, x, y);  // in place
  Vec twice = g1;
  for (double& v : twice) v *= 2;
  expect_close("grad_weight accumulates", f.bn.grad_weight, twice, 1e-6, 1e-7);
  expect_close("in-place din", w2, dx1, 1e-6, 1e-7);
}

TEST_CASE("BatchNorm2d recompute gives the last forward's output bit for bit") {
  // DenseNet recomputes norm1's outputs in backward: the same values, train or eval, with and
  // without the fused ReLU, and after the running statistics have moved.
  const Shape s{3, 4, 5, 6};
  const Tensor x = random_tensor(s, 7, -2.f, 2.f);
  for (bool training : {true, false})
    for (bool relu : {false, true}) {
      CAPTURE(training);
      CAPTURE(relu);
      BnFixture f(4);
      f.bn.set_fused_relu(relu);
      f.bn.set_training(training);
      Tensor y = Tensor::empty(s), again = Tensor::empty(s);
      f.bn.forward(y, x);
      f.bn.recompute(again, x);
      CHECK(std::memcmp(y.data(), again.data(), size_t(s.numel()) * sizeof(real)) == 0);
      fill_uniform(again, 8);
      f.bn.forward(y, random_tensor(s, 9));  // stale statistics must not be used after this
      f.bn.recompute(again, x);
      CHECK(std::memcmp(y.data(), again.data(), size_t(s.numel()) * sizeof(real)) != 0);
    }
}

TEST_CASE("BatchNorm2d backward_add adds backward's input gradient, parameter gradients alike") {
  // dacc + dx in one fused multiply-add per element: within a rounding of backward's dx added
  // to dacc's old values; the parameter gradients as backward's, bit for bit.
  const Shape s{3, 4, 5, 6};
  const Tensor x = random_tensor(s, 7, -2.f, 2.f), dy = random_tensor(s, 8);
  for (bool relu : {false, true}) {
    CAPTURE(relu);
    BnFixture a(4), b(4);
    Tensor ya = Tensor::empty(s), yb = Tensor::empty(s), dx = Tensor::empty(s);
    for (BnFixture* f : {&a, &b}) f->bn.set_fused_relu(relu);
    a.bn.forward(ya, x);
    b.bn.forward(yb, x);
    a.store.zero_grad();
    b.store.zero_grad();
    a.bn.backward(dx, dy, x, ya);
    const Tensor acc0 = random_tensor(s, 9);
    Tensor acc = Tensor::empty(s), dout = Tensor::empty(s);
    acc.copy_from(acc0);
    dout.copy_from(dy);
    b.bn.backward_add(acc, dout, x, yb);
    Vec want = to_double(acc0);
    const Vec dxd = to_double(dx);
    for (size_t i = 0; i < want.size(); ++i) want[i] += dxd[i];
    expect_close("dacc", acc, want, 1e-6, 1e-6);
    for (const auto& [ga, gb] : {std::pair{&a.bn.grad_weight, &b.bn.grad_weight},
                                 std::pair{&a.bn.grad_bias, &b.bn.grad_bias}})
      CHECK(std::memcmp(ga->data(), gb->data(), size_t(ga->numel()) * sizeof(real)) == 0);
    CHECK_THROWS_AS(b.bn.backward_add(dout, dout, x, yb), Error);  // dacc must not be dout
  }
}

TEST_CASE("BatchNorm2d rejects bad shapes") {
  BnFixture f(3);
  Tensor x = Tensor::zeros({2, 4, 3, 3}), y = Tensor::zeros({2, 4, 3, 3});
  CHECK_THROWS_AS(f.bn.forward(y, x), Error);
  Tensor one = Tensor::zeros({1, 3, 1, 1});
  CHECK_THROWS_AS(f.bn.forward(one, one), Error);  // one value per channel in training
  CHECK_THROWS_AS(BatchNorm2d(0), Error);
}
