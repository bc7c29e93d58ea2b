// Fusion (ExecConfig::fusion, core/exec.h) changes passes, never numbers: BatchNorm with its ReLU,
// and with a residual add and ReLU, against the separate layers, and whole models fused against
// unfused, compared bit for bit (forward, backward, running statistics, eval mode).
#include <string>
#include <vector>

#include "layers/add.h"
#include "layers/batchnorm.h"
#include "layers/relu.h"
#include "model_step.h"
#include "models/registry.h"
#include "testing.h"

using namespace mpicnn;
using mpicnn::testing::random_tensor;
using mpicnn::testing::same_bits;

namespace {

struct BnSetup {
  ParamStore store;
  BatchNorm2d bn;
  explicit BnSetup(int channels) : bn(channels) {
    bn.register_state(store, "bn.");
    store.allocate();
    bn.reset_parameters(0);
    fill_uniform_param(bn.weight, 11, 0.5f, 1.5f);
    fill_uniform_param(bn.bias, 12, -0.5f, 0.5f);
    fill_uniform_param(bn.running_mean, 13, -0.2f, 0.2f);
    fill_uniform_param(bn.running_var, 14, 0.5f, 1.5f);
  }
  static void fill_uniform_param(Tensor& t, uint64_t seed, float lo, float hi) {
    mpicnn::testing::fill_uniform(t, seed, lo, hi);
  }
};

}  // namespace

TEST_CASE("fusion: BatchNorm with its ReLU, and with a residual add and ReLU, equals the separate layers bit for bit") {
  const Shape s{3, 5, 7, 6};
  const Tensor x = random_tensor(s, 1);
  const Tensor r = random_tensor(s, 2);
  const Tensor dy = random_tensor(s, 3);
  for (bool training : {true, false}) {
    CAPTURE(training);
    // Separate: bn, then relu in place; backward relu then bn.
    BnSetup a(5), b(5);
    a.bn.set_training(training), b.bn.set_training(training);
    ReLU relu;
    Tensor ya = Tensor::empty(s), yb = Tensor::empty(s);
    a.bn.forward(ya, x);
    relu.forward(ya, ya);
    b.bn.set_fused_relu(true);
    b.bn.forward(yb, x);
    CHECK(same_bits(ya, yb));
    CHECK(same_bits(a.bn.running_mean, b.bn.running_mean));
    CHECK(same_bits(a.bn.running_var, b.bn.running_var));
    Tensor ga = Tensor::empty(s), gb = Tensor::empty(s);
    relu.backward(ga, dy, ya, ya);
    a.bn.backward(ga, ga, x, ya);
    b.bn.backward(gb, dy, x, yb);
    CHECK(same_bits(ga, gb));
    CHECK(same_bits(a.bn.grad_weight, b.bn.grad_weight));
    CHECK(same_bits(a.bn.grad_bias, b.bn.grad_bias));
    // Some gradients are masked: the ReLU is really applied.
    int zeros = 0;
    for (int64_t i = 0; i < yb.numel(); ++i) zeros += yb.data()[i] == 0.f;
    CHECK(zeros > 0);
    CHECK(zeros < yb.numel());

    // Residual: relu(bn(x) + r) against bn, accumulate, relu.
    BnSetup c(5), d(5);
    c.bn.set_training(training), d.bn.set_training(training);
    Tensor yc = Tensor::empty(s), yd = Tensor::empty(s);
    c.bn.forward(yc, x);
    accumulate(yc, r);
    relu.forward(yc, yc);
    d.bn.forward(yd, x, r);
    CHECK(same_bits(yc, yd));
  }
}

TEST_CASE("fusion: fused and unfused models train and evaluate to the same bits") {
  // One model per fused structure: ResNet BasicBlocks with downsample (resnet20), Bottlenecks
  // and the stem's Sequential conv-bn-relu (resnet50), DenseNet layers and transitions, and
  // GoogLeNet's BasicConv2d branches (Sequentials, as VGG's are).
  struct Spec {
    const char* name;
    int size;
  };
  for (const Spec& spec : {Spec{"resnet20", 32}, Spec{"resnet50", 64}, Spec{"densenet121", 64},
                           Spec{"googlenet", 64}}) {
    SUBCASE(spec.name) {
    const Shape in{2, 3, spec.size, spec.size};
    const Tensor x = random_tensor(in, 7);
    const std::vector<int32_t> targets{1, 3};
    auto run = [&](bool fused) {
      ExecConfig cfg = testing::exec();
      cfg.fusion = fused;
      auto model = build_model(spec.name, {.num_classes = 5, .dropout = 0.f, .aux_dropout = 0.f}, 3);
      const Shape out = model->plan(in, cfg);
      int fused_bns = 0;
      model->root().for_each_layer([&](Layer& l, const std::string&) {
        if (auto* bn = dynamic_cast<BatchNorm2d*>(&l)) fused_bns += bn->fused_relu();
      });
      CHECK((fused_bns > 0) == fused);  // the config reaches every model
      return testing::step_and_eval(*model, x, targets, out);
    };
    testing::check_same_step(run(false), run(true));
    }
  }
}
