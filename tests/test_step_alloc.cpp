// "A training step allocates nothing": a small network using every layer kind is planned once,
// then whole training steps (forward, loss, backward) run while host tensor allocations and
// global operator new calls are counted. Both counts must stay at zero.
#include <atomic>
#include <cstdlib>
#include <new>

#include "layers/adaptive_avgpool2d.h"
#include "layers/add.h"
#include "layers/avgpool2d.h"
#include "layers/batchnorm.h"
#include "layers/concat.h"
#include "layers/conv2d.h"
#include "layers/dropout.h"
#include "layers/flatten.h"
#include "layers/linear.h"
#include "layers/maxpool2d.h"
#include "layers/relu.h"
#include "layers/softmax_xent.h"
#include "testing.h"

static std::atomic<long> g_new_calls{0};

// AddressSanitizer brings its own operator new family; replacing part of it makes ASan report
// mismatched frees. Under ASan only the engine's own allocation counter is checked (the
// normal build, which `make test` runs, checks both).
#ifndef __SANITIZE_ADDRESS__
#define COUNT_OPERATOR_NEW 1
void* operator new(std::size_t n) {
  g_new_calls.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#endif

using namespace mpicnn;
using namespace mpicnn::testing;

namespace {

// conv-bn-relu -> maxpool -> [conv-bn + identity] -> relu -> concat(with pool) -> avgpool
// -> adaptive avgpool -> flatten -> dropout -> linear -> cross-entropy
struct TinyNet {
  static constexpr int N = 4, C = 8, classes = 10;
  Conv2d conv1{{.in_channels = 3, .out_channels = C, .kernel = 3, .padding = 1, .bias = false}};
  BatchNorm2d bn1{C};
  ReLU relu;
  MaxPool2d pool{3, 2, 1};
  Conv2d conv2{{.in_channels = C, .out_channels = C, .kernel = 3, .padding = 1}};
  BatchNorm2d bn2{C};
  Add add;
  Concat cat;
  AvgPool2d avg{2};
  AdaptiveAvgPool2d gap{1};
  Flatten flat;
  Dropout drop{0.2f};
  Linear fc{2 * C, classes};
  SoftmaxCrossEntropy loss;
  ParamStore store;

  // Activations and their gradients, planned once.
  Tensor x, a1, b1, r1, p1, a2, b2, s2, r2, c2, v2, g2, f2, d2, logits;
  Tensor da1, db1, dr1, dp1, da2, db2, ds2, dr2, dc2, dv2, dg2, df2, dd2, dlogits, dp1_skip;
  std::vector<int32_t> targets;

  TinyNet() {
    conv1.register_state(store, "conv1.");
    bn1.register_state(store, "bn1.");
    conv2.register_state(store, "conv2.");
    bn2.register_state(store, "bn2.");
    drop.register_state(store, "drop.");
    fc.register_state(store, "fc.");
    store.allocate();
    for (Layer* l : std::initializer_list<Layer*>{&conv1, &bn1, &conv2, &bn2, &fc}) l->reset_parameters(1);

    x = random_tensor({N, 3, 16, 16}, 1);
    auto plan = [](UnaryLayer& l, const Tensor& in, Tensor& out, Tensor& dout) {
      l.plan(in.shape(), exec());
      out = Tensor::empty(l.output_shape(in.shape()));
      dout = Tensor::empty(out.shape());
    };
    plan(conv1, x, a1, da1);
    plan(bn1, a1, b1, db1);
    plan(relu, b1, r1, dr1);
    plan(pool, r1, p1, dp1);
    dp1_skip = Tensor::empty(p1.shape());
    plan(conv2, p1, a2, da2);
    plan(bn2, a2, b2, db2);
    s2 = Tensor::empty(b2.shape());
    ds2 = Tensor::empty(b2.shape());
    plan(relu, s2, r2, dr2);
    c2 = Tensor::empty(Concat::output_shape({r2.shape(), p1.shape()}));
    dc2 = Tensor::empty(c2.shape());
    plan(avg, c2, v2, dv2);
    plan(gap, v2, g2, dg2);
    f2 = g2.reshape(flat.output_shape(g2.shape()));  // flatten as a view: no copy
    df2 = dg2.reshape(f2.shape());
    plan(drop, f2, d2, dd2);
    plan(fc, d2, logits, dlogits);
    loss.plan(N, classes);
    for (int n = 0; n < N; ++n) targets.push_back(n % classes);
  }

  double step() {
    store.zero_grad();
    conv1.forward(a1, x);
    bn1.forward(b1, a1);
    relu.forward(r1, b1);
    pool.forward(p1, r1);
    conv2.forward(a2, p1);
    bn2.forward(b2, a2);
    add.forward(s2, b2, p1);
    relu.forward(r2, s2);
    cat.forward(c2, {&r2, &p1});
    avg.forward(v2, c2);
    gap.forward(g2, v2);
    flat.forward(f2, g2);
    drop.forward(d2, f2);
    fc.forward(logits, d2);
    loss.forward(logits, targets.data());
    double l = loss.loss();

    loss.backward(dlogits, targets.data());
    fc.backward(dd2, dlogits, d2, logits);
    drop.backward(df2, dd2, f2, d2);
    flat.backward(dg2, df2, g2, f2);
    gap.backward(dv2, dg2, v2, g2);
    avg.backward(dc2, dv2, c2, v2);
    cat.backward({&dr2, &dp1_skip}, dc2);
    relu.backward(ds2, dr2, s2, r2);
    Tensor none;
    add.backward(db2, none, ds2);  // the identity branch's gradient is ds2 itself
    accumulate(dp1_skip, ds2);
    bn2.backward(da2, db2, a2, b2);
    conv2.backward(dp1, da2, p1, a2);
    accumulate(dp1, dp1_skip);
    pool.backward(dr1, dp1, r1, p1);
    relu.backward(db1, dr1, b1, r1);
    bn1.backward(da1, db1, a1, b1);
    conv1.backward(none, da1, x, a1);
    return l;
  }
};

}  // namespace

TEST_CASE("a planned training step allocates nothing") {
  TinyNet net;
  const int64_t host_before = host_allocation_count();
  const long new_before = g_new_calls.load();
  double l1 = net.step();
  double l2 = net.step();
  const int64_t host_allocs = host_allocation_count() - host_before;
  const long news = g_new_calls.load() - new_before;
  CHECK(host_allocs == 0);
#ifdef COUNT_OPERATOR_NEW
  CHECK(news == 0);
#else
  MESSAGE("operator new is not counted under AddressSanitizer (", news, ")");
#endif
  CHECK(std::isfinite(l1));
  CHECK(std::isfinite(l2));
  // The counter itself works: a tensor allocates.
  const int64_t h0 = host_allocation_count();
  const Tensor probe = Tensor::empty({2, 3, 9, 9});
  CHECK(host_allocation_count() > h0);
}
