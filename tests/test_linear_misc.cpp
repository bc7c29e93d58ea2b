// Linear, Dropout, Flatten, Add, Concat and softmax cross-entropy: reference loops and
// finite-difference gradient checks.
#include <cmath>
#include <fstream>

#include "core/threads.h"
#include "layers/add.h"
#include "layers/concat.h"
#include "layers/dropout.h"
#include "layers/flatten.h"
#include "layers/linear.h"
#include "layers/softmax_xent.h"
#include "testing.h"

using namespace mpicnn;
using namespace mpicnn::testing;

static Vec linear_ref(const Vec& x, const Vec& w, const Vec& b, int64_t N, int64_t in,
                      int64_t out) {
  Vec y(size_t(N * out));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < out; ++j) {
      double s = b.empty() ? 0 : b[size_t(j)];
      for (int64_t k = 0; k < in; ++k) s += x[size_t(n * in + k)] * w[size_t(j * in + k)];
      y[size_t(n * out + j)] = s;
    }
  return y;
}

TEST_CASE("Linear forward and gradients, with and without bias") {
  for (bool with_bias : {true, false})
    for (auto [N, in, out] : {std::tuple{1, 7, 3}, std::tuple{4, 33, 10}, std::tuple{5, 1, 2}}) {
      Linear fc(in, out, with_bias);
      ParamStore store;
      fc.register_state(store, "fc.");
      store.allocate();
      fc.reset_parameters(3);
      const float bound = 1.f / std::sqrt(float(in));
      for (int64_t i = 0; i < fc.weight.numel(); ++i) REQUIRE(std::fabs(fc.weight[i]) <= bound);
      Tensor x = random_tensor({N, in}, 1), y = Tensor::empty(fc.output_shape(x.shape()));
      fc.forward(y, x);
      Vec xd = to_double(x), wd = to_double(fc.weight), bd = with_bias ? to_double(fc.bias) : Vec{};
      expect_close("linear forward", y, linear_ref(xd, wd, bd, N, in, out));

      Tensor r = random_tensor(y.shape(), 2), dx = Tensor::empty(x.shape());
      store.zero_grad();
      fc.backward(dx, r, x, y);
      Vec rd = to_double(r);
      check_gradient("linear dx", dx,
                     [&](const Vec& v) { return dot(linear_ref(v, wd, bd, N, in, out), rd); }, xd);
      check_gradient("linear dweight", fc.grad_weight,
                     [&](const Vec& v) { return dot(linear_ref(xd, v, bd, N, in, out), rd); }, wd);
      if (with_bias)
        check_gradient("linear dbias", fc.grad_bias,
                       [&](const Vec& v) { return dot(linear_ref(xd, wd, v, N, in, out), rd); }, bd);
    }
  Linear fc(4, 2);
  CHECK_THROWS_AS(fc.output_shape({3, 5}), Error);
  CHECK(fc.output_shape({3, 4}) == Shape{3, 2});
}

TEST_CASE("Dropout: seeded mask, scaling, batch-split and thread invariance, eval identity") {
  const float p = 0.3f;
  Dropout drop(p);
  ParamStore store;
  drop.register_state(store, "classifier.0.");
  Shape s{8, 5, 6};
  Tensor x = random_tensor(s, 1), y = Tensor::empty(s);
  drop.set_draw(42, 7, 100);
  drop.forward(y, x);
  const int64_t per = 30;
  int64_t kept = 0;
  for (int64_t n = 0; n < 8; ++n)
    for (int64_t i = 0; i < per; ++i) {
      float want = drop.keep(uint64_t(n), uint64_t(i), per) ? x[n * per + i] / (1 - p) : 0.f;
      REQUIRE(y[n * per + i] == doctest::Approx(want).epsilon(1e-6));
      kept += drop.keep(uint64_t(n), uint64_t(i), per);
    }
  CHECK(std::fabs(double(kept) / 240 - (1 - p)) < 0.1);

  // Same samples in two halves (first_sample 100 and 104) give the same mask.
  Tensor y2 = Tensor::empty(s);
  for (int half = 0; half < 2; ++half) {
    drop.set_draw(42, 7, uint64_t(100 + 4 * half));
    Tensor xi = x.slice0(4 * half, 4 * half + 4), yi = y2.slice0(4 * half, 4 * half + 4);
    drop.forward(yi, xi);
  }
  expect_close("batch split", y2, to_double(y), 0, 0);

  // Thread count does not change the mask.
  int before = num_threads();
  set_num_threads(1);
  Tensor y1 = Tensor::empty(s);
  drop.set_draw(42, 7, 100);
  drop.forward(y1, x);
  set_num_threads(before);
  expect_close("one thread", y1, to_double(y), 0, 0);

  // Backward applies the same mask; gradient check against the masked reference.
  Tensor r = random_tensor(s, 2), dx = Tensor::empty(s);
  drop.backward(dx, r, x, y1);
  Vec mask(size_t(s.numel()));
  for (int64_t n = 0; n < 8; ++n)
    for (int64_t i = 0; i < per; ++i) mask[size_t(n * per + i)] = drop.keep(uint64_t(n), uint64_t(i), per) / (1 - p);
  Vec rd = to_double(r);
  check_gradient("dropout dx", dx, [&](const Vec& v) {
    double sum = 0;
    for (size_t i = 0; i < v.size(); ++i) sum += v[i] * mask[i] * rd[i];
    return sum;
  }, to_double(x));

  // A new step draws a new mask; eval is the identity.
  Tensor y3 = Tensor::empty(s);
  drop.forward(y3, x);  // advances the step automatically
  drop.forward(y3, x);
  bool differs = false;
  for (int64_t i = 0; i < s.numel(); ++i) differs |= (y3[i] != y1[i]);
  CHECK(differs);
  drop.set_training(false);
  drop.forward(y3, x);
  expect_close("eval identity", y3, to_double(x), 0, 0);
  CHECK_THROWS_AS(Dropout(1.f), Error);
}

TEST_CASE("Flatten copies or aliases") {
  Flatten fl;
  Tensor x = random_tensor({2, 3, 4, 5}, 1);
  CHECK(fl.output_shape(x.shape()) == Shape{2, 60});
  Tensor y = Tensor::empty({2, 60});
  fl.forward(y, x);
  expect_close("flatten", y, to_double(x), 0, 0);
  Tensor alias = x.reshape({2, 60});
  fl.forward(alias, x);
  Tensor dx = Tensor::empty(x.shape());
  fl.backward(dx, y, x, y);
  expect_close("flatten backward", dx, to_double(y), 0, 0);
  Tensor bad = Tensor::empty({2, 59});
  CHECK_THROWS_AS(fl.forward(bad, x), Error);
}

TEST_CASE("Add forward/backward and accumulate") {
  Add add;
  Tensor a = random_tensor({2, 3, 4, 4}, 1), b = random_tensor({2, 3, 4, 4}, 2);
  Tensor y = Tensor::empty(a.shape());
  add.forward(y, a, b);
  Vec want = to_double(a);
  Vec bd = to_double(b);
  for (size_t i = 0; i < want.size(); ++i) want[i] += bd[i];
  expect_close("add", y, want, 0, 0);
  Tensor da = Tensor::empty(a.shape()), db = Tensor::empty(a.shape()), none;
  add.backward(da, db, y);
  expect_close("add da", da, to_double(y), 0, 0);
  expect_close("add db", db, to_double(y), 0, 0);
  add.backward(none, db, a);
  expect_close("add db only", db, to_double(a), 0, 0);
  accumulate(da, b);
  for (size_t i = 0; i < want.size(); ++i) want[i] += bd[i];
  expect_close("accumulate", da, want, 1e-6, 0);
  Tensor c = Tensor::empty({2, 3, 4, 5});
  CHECK_THROWS_AS(add.forward(y, a, c), Error);
}

TEST_CASE("Concat forward matches reference; backward splits; gradient check") {
  Concat cat;
  Tensor a = random_tensor({2, 3, 4, 5}, 1), b = random_tensor({2, 1, 4, 5}, 2),
         c = random_tensor({2, 2, 4, 5}, 3);
  Shape os = Concat::output_shape({a.shape(), b.shape(), c.shape()});
  CHECK(os == Shape{2, 6, 4, 5});
  Tensor y = Tensor::empty(os);
  cat.forward(y, {&a, &b, &c});
  auto ref = [&](const Vec& av, const Vec& bv, const Vec& cv) {
    Vec out;
    for (int n = 0; n < 2; ++n)
      for (auto [v, ch] : {std::pair{&av, 3}, std::pair{&bv, 1}, std::pair{&cv, 2}})
        for (int i = 0; i < ch * 20; ++i) out.push_back((*v)[size_t(n * ch * 20 + i)]);
    return out;
  };
  Vec ad = to_double(a), bd = to_double(b), cd = to_double(c);
  expect_close("concat", y, ref(ad, bd, cd), 0, 0);
  Tensor r = random_tensor(os, 4);
  Tensor da = Tensor::empty(a.shape()), db = Tensor::empty(b.shape()), dc = Tensor::empty(c.shape());
  cat.backward({&da, &db, &dc}, r);
  Vec rd = to_double(r);
  check_gradient("concat da", da, [&](const Vec& v) { return dot(ref(v, bd, cd), rd); }, ad);
  check_gradient("concat dc", dc, [&](const Vec& v) { return dot(ref(ad, bd, v), rd); }, cd);
  Tensor bad = random_tensor({2, 1, 4, 4}, 5);
  CHECK_THROWS_AS(Concat::output_shape({a.shape(), bad.shape()}), Error);
}

static double xent_ref(const Vec& z, const std::vector<int32_t>& t, int64_t N, int64_t C,
                       double eps) {
  double total = 0;
  for (int64_t n = 0; n < N; ++n) {
    double mx = -1e300;
    for (int64_t c = 0; c < C; ++c) mx = std::max(mx, z[size_t(n * C + c)]);
    double s = 0;
    for (int64_t c = 0; c < C; ++c) s += std::exp(z[size_t(n * C + c)] - mx);
    double lse = std::log(s) + mx, smooth = 0;
    for (int64_t c = 0; c < C; ++c) smooth += lse - z[size_t(n * C + c)];
    total += (1 - eps) * (lse - z[size_t(n * C + t[size_t(n)])]) + eps * smooth / double(C);
  }
  return total / double(N);
}

TEST_CASE("Softmax cross-entropy loss and gradient, with label smoothing") {
  for (float eps : {0.f, 0.1f})
    for (auto [N, C] : {std::pair{1, 2}, std::pair{4, 10}, std::pair{3, 1000}}) {
      SoftmaxCrossEntropy loss(eps);
      loss.plan(N + 2, C);
      Tensor z = random_tensor({N, C}, 1, -4.f, 4.f);
      std::vector<int32_t> t;
      for (int n = 0; n < N; ++n) t.push_back(int32_t((n * 7 + 3) % C));
      loss.forward(z, t.data());
      const double got = loss.loss();
      Vec zd = to_double(z);
      double want = xent_ref(zd, t, N, C, eps);
      CHECK(got == doctest::Approx(want).epsilon(1e-6));
      double prob_sum = 0;
      for (int c = 0; c < C; ++c) prob_sum += loss.probabilities()[c];
      CHECK(prob_sum == doctest::Approx(1.0).epsilon(1e-5));
      Tensor dz = Tensor::empty(z.shape());
      loss.backward(dz, t.data(), 2.f);
      check_gradient("xent dlogits", dz,
                     [&](const Vec& v) { return 2 * xent_ref(v, t, N, C, eps); }, zd);
    }
}

TEST_CASE("Softmax cross-entropy with label smoothing matches torch's CrossEntropyLoss(label_smoothing=E)") {
  // torch 1.13's loss and logit gradient, computed at test time by tests/python/xent_torch.py
  // on the logits and labels written here: the mean loss against torch's float64 computation,
  // the gradient (our backward at scale 1) against torch's float32 autograd. E = 0 is the plain
  // loss; E = 1 leaves only the uniform target.
  struct Case {
    const char* name;
    int N, C;
    float eps;
  };
  const Case cases[] = {{"plain", 4, 10, 0.f}, {"imagenet", 5, 7, 0.1f}, {"wide", 3, 1000, 0.3f}, {"uniform", 2, 5, 1.f}};
  TempDir dir;
  std::ofstream list(dir.path / "cases.txt");
  std::vector<Tensor> zs;
  std::vector<std::vector<int32_t>> ts;
  for (const Case& c : cases) {
    zs.push_back(random_tensor({c.N, c.C}, uint64_t(11 + zs.size()), -4.f, 4.f));
    std::vector<int32_t> t;
    for (int n = 0; n < c.N; ++n) t.push_back(int32_t((n * 5 + 2) % c.C));
    ts.push_back(t);
    std::ofstream(dir.path / (std::string(c.name) + ".z.f32"), std::ios::binary)
        .write(reinterpret_cast<const char*>(zs.back().data()), std::streamsize(zs.back().numel() * 4));
    std::ofstream(dir.path / (std::string(c.name) + ".t.i32"), std::ios::binary)
        .write(reinterpret_cast<const char*>(t.data()), std::streamsize(t.size() * 4));
    list << c.name << ' ' << c.N << ' ' << c.C << ' ' << c.eps << '\n';
  }
  list.close();
  REQUIRE(list.good());
  run_python("xent_torch.py", shell_quote(dir.path.string()));
  for (size_t k = 0; k < std::size(cases); ++k) {
    const Case& c = cases[k];
    CAPTURE(c.name);
    SoftmaxCrossEntropy loss(c.eps);
    loss.plan(c.N, c.C);
    loss.forward(zs[k], ts[k].data());
    Tensor dz = Tensor::empty(zs[k].shape());
    loss.backward(dz, ts[k].data(), 1.f);
    double torch64 = NAN, torch32 = NAN;
    std::ifstream(dir.path / (std::string(c.name) + ".loss.txt")) >> torch64 >> torch32;
    REQUIRE(std::isfinite(torch64));
    CHECK(loss.loss() == doctest::Approx(torch64).epsilon(1e-6));
    Vec want(size_t(c.N * c.C));
    std::ifstream in(dir.path / (std::string(c.name) + ".dz.f32"), std::ios::binary);
    std::vector<float> raw(want.size());
    in.read(reinterpret_cast<char*>(raw.data()), std::streamsize(raw.size() * 4));
    REQUIRE(in.gcount() == std::streamsize(raw.size() * 4));
    for (size_t i = 0; i < raw.size(); ++i) want[i] = raw[i];
    expect_close(std::string(c.name) + " dlogits", dz, want, 1e-5, 1e-6);
  }
}

TEST_CASE("Softmax cross-entropy is stable for huge logits and checks labels") {
  SoftmaxCrossEntropy loss;
  loss.plan(2, 3);
  Tensor z = Tensor::empty({2, 3});
  float vals[] = {1000.f, -1000.f, 0.f, 88.f, 89.f, 90.f};
  for (int i = 0; i < 6; ++i) z[i] = vals[i];
  int32_t t[] = {0, 2};
  loss.forward(z, t);
  const double l = loss.loss();
  CHECK(std::isfinite(l));
  CHECK(l == doctest::Approx(0.5 * std::log(1 + std::exp(-1.0) + std::exp(-2.0))).epsilon(1e-6));
  int32_t bad[] = {0, 3};
  CHECK_THROWS_AS(loss.forward(z, bad), Error);
  SoftmaxCrossEntropy fresh;
  fresh.plan(2, 3);
  CHECK_THROWS_AS(fresh.loss(), Error);  // nothing to report before a forward
  Tensor big = Tensor::empty({3, 3});
  CHECK_THROWS_AS(loss.forward(big, t), Error);  // more rows than planned
}
