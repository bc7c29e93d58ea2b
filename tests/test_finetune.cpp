// Tests of fine-tuning (train/finetune.h, Model::head/freeze, frozen layers, optimizer chunk
// groups): --init-weights loads by name and shape, re-initialises a new head as a fresh model
// has it, names the tensor and file of a mismatch, honours --init-weights-partial; frozen
// parameters get no gradient, no update, no optimizer state; backward stops below the lowest
// trainable layer; --freeze-bn keeps running statistics; --head-lr-mult scales only the head.
// Multi-rank behaviour (gradient sync bytes, identical replicas) is in tests/mpi.
#include <cmath>
#include <cstring>
#include <set>

#include "layers/batchnorm.h"
#include "layers/linear.h"
#include "layers/softmax_xent.h"
#include "models/aux_net.h"
#include "models/registry.h"
#include "optim/adamw.h"
#include "optim/sgd.h"
#include "io/safetensors.h"
#include "testing.h"
#include "train/finetune.h"

using namespace mpicnn;
using mpicnn::testing::expect_error;
using mpicnn::testing::TempDir;

namespace {

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && std::memcmp(a.data(), b.data(), size_t(a.numel()) * sizeof(real)) == 0;
}

std::unique_ptr<Model> resnet20(int classes, uint64_t seed, int in_channels = 3) {
  ModelOptions mo;
  mo.num_classes = classes;
  mo.in_channels = in_channels;
  return build_model("resnet20", mo, seed);
}

// One forward and backward of a random batch (N, C, 8, 8), gradients zeroed first.
void forward_backward(Model& m, uint64_t seed, int n = 4) {
  const int c = m.options().in_channels;
  if (m.planned_input().ndim == 0) m.plan(Shape{n, c, 8, 8}, testing::exec());
  const Tensor x = testing::random_tensor(Shape{n, c, 8, 8}, seed);
  const Tensor& logits = m.forward(x);
  SoftmaxCrossEntropy xent;
  xent.plan(n, m.options().num_classes);
  std::vector<int32_t> y;
  for (int i = 0; i < n; ++i) y.push_back(i % m.options().num_classes);
  xent.forward(logits, y.data());
  Tensor dl = Tensor::zeros(logits.shape());
  xent.backward(dl, y.data());
  m.params().zero_grad();
  m.backward(dl);
}

bool all_zero(const StateEntry& e) {
  for (int64_t i = 0; i < e.grad->numel(); ++i)
    if (e.grad->data()[i] != 0.f) return false;
  return true;
}

// A layer that counts its backward calls and passes the gradient through.
class CountingLayer : public UnaryLayer {
 public:
  const char* kind() const override { return "Counting"; }
  Shape output_shape(const Shape& in) const override { return in; }
  void forward(Tensor& out, const Tensor& in) override { out.copy_from(in); }
  void backward(Tensor& din, const Tensor& dout, const Tensor&, const Tensor&) override {
    ++calls;
    if (din.defined()) din.copy_from(dout);
  }
  int calls = 0;
};

}  // namespace

TEST_CASE("finetune: model heads are the classifiers, default the last parameter's layer") {
  CHECK(resnet20(10, 1)->head() == std::vector<std::string>{"fc"});
  CHECK(build_model("lenet", {10, 1}, 1)->head() == std::vector<std::string>{"fc3"});
  CHECK(build_model("squeezenet1_1", {10, 3}, 1)->head() == std::vector<std::string>{"classifier.1"});
  CHECK(param_under("layer1.0.conv1.weight", "layer1"));
  CHECK(!param_under("layer10.0.conv1.weight", "layer1"));
  CHECK(param_under("fc.weight", "fc.weight"));
  CHECK(param_under("fc.weight", "fc."));
}

TEST_CASE("finetune: init weights load every tensor; a new class count gets a fresh head") {
  TempDir dir;
  const auto src = resnet20(10, 3);
  forward_backward(*src, 5);  // running statistics move away from their initial values
  src->save_state_dict(dir / "r20.safetensors");

  SUBCASE("same classes: every tensor, bit-identical") {
    const auto m = resnet20(10, 7);
    const train::InitWeightsReport r = train::load_init_weights(*m, dir / "r20.safetensors", {});
    CHECK(r.loaded == int(m->params().entries().size()));
    CHECK(r.new_head.empty());
    CHECK(bit_equal(m->params().values(), src->params().values()));
    CHECK(bit_equal(m->params().buffers(), src->params().buffers()));
  }
  SUBCASE("5 classes: fc re-initialised as a fresh model with the run's seed") {
    const auto m = resnet20(5, 7), fresh = resnet20(5, 7);
    const train::InitWeightsReport r = train::load_init_weights(*m, dir / "r20.safetensors", {});
    CHECK(r.new_head == std::vector<std::string>{"fc.weight", "fc.bias"});
    CHECK(r.loaded == int(m->params().entries().size()) - 2);
    CHECK(train::describe(r, 5) == "init weights: loaded " + std::to_string(r.loaded) + " tensors from " +
                                       (dir / "r20.safetensors") + ", new head fc.weight/fc.bias for 5 classes");
    for (const StateEntry& e : m->params().entries()) {
      if (e.kind != StateKind::Param) continue;
      const Tensor& want = m->in_head(e.name) ? *fresh->params().find(e.name)->value
                                              : *src->params().find(e.name)->value;
      CHECK_MESSAGE(bit_equal(*e.value, want), e.name);
    }
  }
}

TEST_CASE("finetune: init weights mismatches are one line naming the tensor and the file") {
  TempDir dir;
  resnet20(10, 3, /*in_channels=*/1)->save_state_dict(dir / "gray.safetensors");
  const auto m = resnet20(10, 7);
  Tensor before = Tensor::empty(m->params().values().shape());
  before.copy_from(m->params().values());
  expect_error([&] { train::load_init_weights(*m, dir / "gray.safetensors", {}); },
               dir / "gray.safetensors" + ": tensor 'conv1.weight' has shape [16, 1, 3, 3]");
  CHECK(bit_equal(m->params().values(), before));  // nothing changed

  // A file without bn1's tensors, and one with a tensor the model lacks.
  const auto src = resnet20(10, 3);
  const SafetensorsReader full = [&] {
    src->save_state_dict(dir / "full.safetensors");
    return SafetensorsReader(dir / "full.safetensors");
  }();
  SafetensorsWriter missing, extra;
  for (const TensorInfo& t : full.tensors()) {
    extra.add(t.name, t.dtype, t.shape, full.bytes(t.name));
    if (!param_under(t.name, "bn1")) missing.add(t.name, t.dtype, t.shape, full.bytes(t.name));
  }
  extra.add_i64_scalar("AuxLogits.num_batches_tracked", 1);
  missing.write(dir / "missing.safetensors");
  extra.write(dir / "extra.safetensors");
  expect_error([&] { train::load_init_weights(*m, dir / "missing.safetensors", {}); },
               dir / "missing.safetensors" + " has no tensor 'bn1.weight'");
  expect_error([&] { train::load_init_weights(*m, dir / "extra.safetensors", {}); },
               "tensor 'AuxLogits.num_batches_tracked' belongs to no parameter or buffer");
  expect_error([&] { train::load_init_weights(*m, dir / "none.safetensors", {}); },
               "--init-weights: " + (dir / "none.safetensors") + " does not exist");

  SUBCASE("--init-weights-partial lets the listed ones be missing, differ or be extra") {
    const auto fresh = resnet20(10, 7);
    const train::InitWeightsReport r = train::load_init_weights(*m, dir / "missing.safetensors", {"bn1"});
    CHECK(r.kept_fresh == std::vector<std::string>{"bn1.weight", "bn1.bias", "bn1.running_mean",
                                                  "bn1.running_var", "bn1.num_batches_tracked"});
    CHECK(bit_equal(*m->params().find("bn1.weight")->value, *fresh->params().find("bn1.weight")->value));
    CHECK(bit_equal(*m->params().find("conv1.weight")->value, *src->params().find("conv1.weight")->value));
    CHECK(train::describe(r, 10).find("fresh (--init-weights-partial): bn1.weight/") != std::string::npos);
    CHECK(train::load_init_weights(*m, dir / "extra.safetensors", {"AuxLogits"}).ignored.size() == 1);
    CHECK(train::load_init_weights(*m, dir / "gray.safetensors", {"conv1"}).kept_fresh ==
          std::vector<std::string>{"conv1.weight"});
  }
}

TEST_CASE("finetune: frozen parameters get no gradient; backward computes the rest") {
  const auto m = resnet20(10, 3);
  m->freeze({"conv1", "bn1", "layer1"});
  forward_backward(*m, 9);
  int frozen = 0, trained = 0;
  for (const StateEntry& e : m->params().entries()) {
    if (e.kind != StateKind::Param) continue;
    const bool under = param_under(e.name, "conv1") || param_under(e.name, "bn1") || param_under(e.name, "layer1");
    CHECK(e.frozen == under);
    if (under) frozen += all_zero(e) ? 1 : 0;
    else trained += all_zero(e) ? 0 : 1;
    CHECK_MESSAGE(all_zero(e) == under, e.name);
  }
  CHECK(frozen > 0);
  CHECK(trained > 0);
  expect_error([&] { m->freeze({"layer9"}); }, "--freeze: 'layer9' matches no parameter of resnet20");
}

TEST_CASE("finetune: backward stops below the lowest trainable layer; a frozen layer in between passes din") {
  Sequential seq;
  auto& a = seq.add(leaf<Linear>(4, 4)).layer;
  auto& counter = seq.add(leaf<CountingLayer>()).layer;
  auto& b = seq.add(leaf<Linear>(4, 4)).layer;
  auto& c = seq.add(leaf<Linear>(4, 3)).layer;
  ParamStore store;
  seq.register_state(store, "");
  store.allocate();
  for (Layer* l : {static_cast<Layer*>(&a), static_cast<Layer*>(&b), static_cast<Layer*>(&c)})
    l->reset_parameters(1);
  counter.set_param_state(false, false);
  seq.plan(Shape{2, 4}, testing::exec());
  const Tensor x = testing::random_tensor(Shape{2, 4}, 3);
  const Tensor dy = testing::random_tensor(Shape{2, 3}, 4);
  auto step = [&] {
    store.zero_grad();
    seq.forward(x);
    Tensor none;
    seq.backward(none, dy);
  };
  // a and b frozen: backward runs c only (counter, between them, never called).
  a.set_param_state(true, true);
  b.set_param_state(true, true);
  step();
  CHECK(counter.calls == 0);
  CHECK(all_zero(store.entries()[0]));
  CHECK(all_zero(store.entries()[2]));
  CHECK(!all_zero(store.entries()[4]));
  // a trainable, b frozen: b passes the input gradient down without its own parameter grads.
  a.set_param_state(true, false);
  step();
  CHECK(counter.calls == 1);
  CHECK(!all_zero(store.entries()[0]));
  CHECK(all_zero(store.entries()[2]));
  CHECK(all_zero(store.entries()[3]));
}

TEST_CASE("finetune: optimizers leave frozen parameters and their state untouched (decay included)") {
  for (const char* which : {"sgd", "adamw"}) {
    CAPTURE(which);
    const auto m = resnet20(10, 3);
    m->freeze({"conv1", "layer2"});
    forward_backward(*m, 9);
    Tensor before = Tensor::empty(m->params().values().shape());
    before.copy_from(m->params().values());
    std::unique_ptr<Optimizer> opt;
    if (std::string(which) == "sgd")
      opt = std::make_unique<SGD>(m->params(), SgdOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01});
    else
      opt = std::make_unique<AdamW>(m->params(), AdamWOptions{.lr = 0.1, .weight_decay = 0.01});
    opt->step();
    opt->step();
    for (const StateEntry& e : m->params().entries()) {
      if (e.kind != StateKind::Param) continue;
      const bool same = std::memcmp(e.value->data(), before.data() + e.offset, size_t(e.shape.numel()) * 4) == 0;
      CHECK_MESSAGE(same == e.frozen, e.name);
      for (const Tensor& slab : opt->state_slabs()) {
        bool zero = true;
        for (int64_t i = 0; i < e.shape.numel(); ++i) zero = zero && slab.data()[e.offset + i] == 0.f;
        CHECK_MESSAGE(zero == e.frozen, e.name);
      }
    }
  }
}

TEST_CASE("finetune: --head-lr-mult X is lr*X on the head only, as one SGD step by hand") {
  const auto m = resnet20(10, 3), ref = resnet20(10, 3);
  train::TrainOptions o;
  o.head_lr_mult = 4;
  train::apply_finetune(*m, o);
  forward_backward(*m, 9);
  const double lr = 0.05, wd = 1e-3;
  SGD opt(m->params(), SgdOptions{.lr = lr, .momentum = 0.9, .weight_decay = wd});
  opt.step();
  const real* g = m->params().grads().data();
  for (const StateEntry& e : ref->params().entries()) {
    if (e.kind != StateKind::Param) continue;
    const real neg_lr = real(-(lr * (m->in_head(e.name) ? 4.0 : 1.0)));
    bool same = true;
    for (int64_t i = 0; i < e.shape.numel(); ++i) {
      const real p = e.value->data()[i];
      const real d = std::fma(p, real(wd), g[e.offset + i]);  // first step: momentum buffer = d
      same = same && std::fma(d, neg_lr, p) == m->params().values().data()[e.offset + i];
    }
    CHECK_MESSAGE(same, e.name);
  }
}

TEST_CASE("finetune: --freeze-backbone, --freeze-bn, and nothing left to train") {
  const auto m = resnet20(10, 3);
  train::TrainOptions o;
  o.freeze_backbone = true;
  o.freeze_bn = true;
  train::apply_finetune(*m, o);
  for (const StateEntry& e : m->params().entries())
    if (e.kind == StateKind::Param) CHECK_MESSAGE(e.frozen == !m->in_head(e.name), e.name);
  CHECK(train::describe_frozen(*m).rfind("frozen: ", 0) == 0);
  Tensor buffers = Tensor::empty(m->params().buffers().shape());
  buffers.copy_from(m->params().buffers());
  forward_backward(*m, 9);
  CHECK(bit_equal(m->params().buffers(), buffers));  // running statistics kept
  CHECK(!all_zero(*m->params().find("fc.weight")));

  // The same input in eval mode gives the same logits: BatchNorm normalised with running stats.
  const auto e = resnet20(10, 3);
  e->plan(Shape{4, 3, 8, 8}, testing::exec());
  e->set_training(false);
  const Tensor x = testing::random_tensor(Shape{4, 3, 8, 8}, 9);
  CHECK(bit_equal(e->forward(x), m->forward(x)));

  train::TrainOptions all;
  all.freeze = {"conv1", "bn1", "layer1", "layer2", "layer3", "fc"};
  expect_error([&] { train::apply_finetune(*resnet20(10, 3), all); }, "--freeze: nothing left to train");
}

TEST_CASE("finetune: every model's parameterised layers are known to their Model (has params, trainable)") {
  // Sequential::backward skips children without a trainable layer: a layer whose parameters
  // the Model did not attribute to it would silently get no gradient.
  for (const ModelSpec& spec : model_specs()) {
    CAPTURE(spec.name);
    const auto m = build_model(spec.name, {.num_classes = 10, .in_channels = 3, .initialise = false}, 1);
    std::set<std::string> layers;  // prefixes of the layers that own parameters
    for (const StateEntry& e : m->params().entries())
      if (e.kind == StateKind::Param) layers.insert(e.name.substr(0, e.name.rfind('.') + 1));
    size_t trainable = 0;
    m->root().for_each_layer([&](Layer& l, const std::string& prefix) {
      CHECK_MESSAGE(l.trainable() == (layers.count(prefix) == 1), prefix);
      trainable += l.trainable() ? 1 : 0;
    });
    CHECK(trainable == layers.size());
    CHECK(!m->head().empty());
  }
}

TEST_CASE("finetune: with auxiliary heads, backward also stops below the lowest trainable layer") {
  // Trunk: segment 0 (Linear a, counter c0), segment 1 (counter c1, Linear b); a head on
  // segment 0's output (counter ch, Linear h), as GoogLeNet's aux heads hang off its trunk.
  auto s0 = std::make_unique<Sequential>();
  auto& a = s0->add("a", leaf<Linear>(4, 4)).layer;
  auto& c0 = s0->add("c0", leaf<CountingLayer>()).layer;
  auto s1 = std::make_unique<Sequential>();
  auto& c1 = s1->add("c1", leaf<CountingLayer>()).layer;
  auto& b = s1->add("b", leaf<Linear>(4, 3)).layer;
  auto head = std::make_unique<Sequential>();
  auto& ch = head->add("ch", leaf<CountingLayer>()).layer;
  auto& h = head->add("h", leaf<Linear>(4, 3)).layer;
  AuxNet net;
  net.add_segment(std::move(s0));
  net.add_head("aux", real(0.3), 0, std::move(head));
  net.add_segment(std::move(s1));
  ParamStore store;
  net.register_state(store, "");
  store.allocate();
  for (Linear* l : {&a, &b, &h}) l->reset_parameters(1);
  for (CountingLayer* c : {&c0, &c1, &ch}) c->set_param_state(false, false);
  net.plan(Shape{2, 4}, testing::exec());
  const Tensor x = testing::random_tensor(Shape{2, 4}, 3);
  const Tensor dy = testing::random_tensor(Shape{2, 3}, 4), dh = testing::random_tensor(Shape{2, 3}, 5);
  const std::vector<const Tensor*> dheads = {&dh};
  auto step = [&] {
    store.zero_grad();
    for (CountingLayer* c : {&c0, &c1, &ch}) c->calls = 0;
    net.forward(x);
    Tensor none;
    net.backward(none, dy, dheads);
  };
  auto grad_of = [&](const std::string& name) -> const StateEntry& {
    for (const StateEntry& e : store.entries())
      if (e.name == name) return e;
    FAIL("no entry ", name);
    return store.entries().front();
  };
  // The trunk's a frozen (--freeze-backbone): only b and h train, nothing below them runs.
  a.set_param_state(true, true);
  step();
  CHECK(c0.calls + c1.calls + ch.calls == 0);
  CHECK(all_zero(grad_of("a.weight")));
  CHECK(!all_zero(grad_of("b.weight")));
  CHECK(!all_zero(grad_of("aux.h.weight")));
  // a trainable: both input gradients reach it, through c1 and through the head's ch.
  a.set_param_state(true, false);
  step();
  CHECK(c0.calls == 1);
  CHECK(c1.calls == 1);
  CHECK(ch.calls == 1);
  CHECK(!all_zero(grad_of("a.weight")));
}
