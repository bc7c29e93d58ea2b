// Model families against torchvision 0.14: for every registry model, the state dict (names,
// shapes, order), parameter count, min_size and forward multiply-adds against PyTorch (tests/python/model_names.py,
// run at test time); each family's initialisation statistics; forward and backward of the
// smaller models at their smallest input; finite-difference gradient checks of the custom
// blocks (Fire, DenseBlock). Numerical parity with PyTorch is tests/test_model_parity.cpp.
#include <cmath>
#include <cstring>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/profile.h"
#include "profile_rows.h"
#include "layers/batchnorm.h"
#include "layers/conv2d.h"
#include "layers/flatten.h"
#include "layers/linear.h"
#include "models/alexnet.h"
#include "models/densenet.h"
#include "models/init.h"
#include "models/registry.h"
#include "models/squeezenet.h"
#include "models/vgg.h"
#include "testing.h"

using namespace mpicnn;
using namespace mpicnn::testing;

namespace {

constexpr int kClasses = 7, kInChannels = 2;  // both differ from torchvision's defaults

using Entries = std::vector<std::pair<std::string, std::vector<int64_t>>>;  // in order

struct Reference {
  int64_t params = -1;
  int min_size = -1;  // PyTorch's side only
  Entries entries;
  int64_t macs = -1;  // per image at min_size; ours only for the models planned there
};

// model_names.py for every registry model, started first so that PyTorch builds its side
// while we build ours; read() waits for its answer. A test that stops early still closes it.
class ModelNames {
 public:
  ModelNames() {
    const char* py = std::getenv("PYTHON");
    std::string cmd = std::string("'") + (py && *py ? py : "/usr/bin/python3") + "' '" +
                      source_dir() + "/tests/python/model_names.py' " +
                      std::to_string(kClasses) + " " + std::to_string(kInChannels);
    for (const ModelSpec& s : model_specs()) cmd += " " + s.name + ":" + std::to_string(s.min_batch);
    pipe_ = popen(cmd.c_str(), "r");
    REQUIRE_MESSAGE(pipe_ != nullptr, "cannot run ", cmd);
  }
  ~ModelNames() {
    if (pipe_) pclose(pipe_);
  }

  std::map<std::string, Reference> read() {
    std::string text;
    char buf[4096];
    for (size_t got; (got = std::fread(buf, 1, sizeof buf, pipe_)) > 0;) text.append(buf, got);
    const int status = pclose(pipe_);
    pipe_ = nullptr;
    REQUIRE_MESSAGE(status == 0, "tests/python/model_names.py failed (PYTHON without torch?)");
    std::map<std::string, Reference> out;
    std::istringstream in(text);
    std::string line, current;
    while (std::getline(in, line)) {
      std::istringstream ls(line);
      std::string tag;
      ls >> tag;
      if (tag == "model") {
        ls >> current;
        out[current] = {};
      } else if (tag == "params") {
        ls >> out.at(current).params;
      } else if (tag == "min_size") {
        ls >> out.at(current).min_size;
      } else if (tag == "macs") {
        ls >> out.at(current).macs;
      } else if (tag == "entry") {
        auto& [key, dims] = out.at(current).entries.emplace_back();
        ls >> key;
        for (int64_t d; ls >> d;) dims.push_back(d);
      } else {
        REQUIRE_MESSAGE(tag == "end", "model_names.py: unexpected line '", line, "'");
      }
    }
    return out;
  }

 private:
  FILE* pipe_ = nullptr;
};

void no_init(Model&, uint64_t) {}

Entries entries_of(const ParamStore& store) {
  Entries out;
  for (const StateEntry& e : store.entries())
    out.emplace_back(e.name, std::vector<int64_t>(e.shape.d, e.shape.d + e.shape.ndim));
  return out;
}

// Cheap deterministic weights for models built without their init: uniform in
// +-sqrt(3 / fan_in) for weights (unit-variance activations), small values for the rest.
void fill_cheap(Model& m) {
  for (const StateEntry& e : m.params().entries()) {
    if (e.kind != StateKind::Param) continue;
    Tensor& t = *e.value;
    const bool weight = t.dim() >= 2;
    const double bound = weight ? std::sqrt(3.0 / double(t.numel() / t.size(0))) : 0.1;
    uint32_t h = uint32_t(stream_id(e.name));
    for (int64_t i = 0; i < t.numel(); ++i) {
      h = h * 1664525u + 1013904223u;  // LCG: the values only need to be varied, not random
      t.data()[i] = float(bound * (double(h >> 8) / 8388608.0 - 1.0));
    }
  }
}

bool all_finite(const Tensor& t) {
  for (int64_t i = 0; i < t.numel(); ++i)
    if (!std::isfinite(t.data()[i])) return false;
  return true;
}

// Plans for n images of size s and runs a training-mode forward (zero input).
void run_one_image(Model& m, int s, int64_t n = 1) {
  m.plan({n, kInChannels, s, s}, exec());
  m.set_training(true);
  Tensor x = Tensor::zeros({n, kInChannels, s, s});
  const Tensor& y = m.forward(x);
  CHECK_SHAPE(y, {n, kClasses});
}

}  // namespace

TEST_CASE("registry models: torchvision's state dict, parameter count, min_size and multiply-adds") {
  ModelNames torch_side;
  const ModelOptions opt{.num_classes = kClasses, .in_channels = kInChannels};
  std::map<std::string, Reference> ours;
  for (const ModelSpec& spec : model_specs()) {
    INFO("model ", spec.name);
    // VGG and AlexNet: the tree alone, registered without slabs (60M-140M random draws and
    // 1 GB of slabs each are for training); the registry wires the same trees into Models.
    std::unique_ptr<Model> model;
    std::unique_ptr<Module> tree;
    if (spec.name.starts_with("vgg")) tree = vgg_module(spec.name, opt);
    if (spec.name == "alexnet") tree = alexnet_module(opt);
    if (tree) {
      ParamStore store;
      tree->register_state(store, "");
      ours[spec.name] = {store.num_params(), -1, entries_of(store)};
    } else {
      model = build_model(spec.name, opt, 0);
      ours[spec.name] = {model->params().num_params(), -1, entries_of(model->params())};
    }
    // min_size in the engine: one image runs in training mode at min_size and fails below it
    // (at plan time, or in BatchNorm's forward). VGGs share their pools: two stand for all.
    if (tree && spec.name != "alexnet" && spec.name != "vgg11" && spec.name != "vgg19_bn")
      continue;
    if (tree) model = std::make_unique<Model>(spec.name, std::move(tree), opt, no_init, 0);
    // A batch of min_batch images (Inception v3: two, registry.cpp); one image fails there.
    CHECK(spec.default_size >= spec.min_size);
    CHECK_NOTHROW(run_one_image(*model, spec.min_size, spec.min_batch));
    ours[spec.name].macs = model->forward_macs();  // what run facts record (Model::forward_macs)
    if (spec.min_size > 1)
      CHECK_THROWS_AS(run_one_image(*model, spec.min_size - 1, spec.min_batch), mpicnn::Error);
    if (spec.min_batch > 1) CHECK_THROWS_AS(run_one_image(*model, spec.min_size, 1), mpicnn::Error);
  }

  const std::map<std::string, Reference> ref = torch_side.read();
  for (const ModelSpec& spec : model_specs()) {
    INFO("model ", spec.name);
    REQUIRE(ref.count(spec.name));
    const Reference& want = ref.at(spec.name);
    const Reference& got = ours.at(spec.name);
    CHECK(got.entries.size() == want.entries.size());
    for (size_t i = 0; i < std::min(got.entries.size(), want.entries.size()); ++i) {
      const bool same = got.entries[i] == want.entries[i];
      CHECK_MESSAGE(same, "entry ", i, ": ours ", got.entries[i].first, ", torch ",
                    want.entries[i].first, " (or their shapes differ)");
      if (!same) break;  // one report, not hundreds
    }
    CHECK(got.params == want.params);
    // torch's smallest size for a training-mode batch of min_batch images.
    CHECK(spec.min_size == want.min_size);
    if (got.macs >= 0) CHECK(got.macs == want.macs);
  }
}

TEST_CASE("registry: names are unique and unknown names are refused with the list") {
  std::map<std::string, int> seen;
  for (const ModelSpec& s : model_specs()) {
    CHECK(++seen[s.name] == 1);
    CHECK(!s.description.empty());
  }
  try {
    build_model("resnet19");
    FAIL_CHECK("no error for an unknown model");
  } catch (const mpicnn::Error& e) {
    CHECK(std::string(e.message()).find("densenet121") != std::string::npos);
  }
}

// ---------------------------------------------------------------------------------------
// Initialisation statistics, per family, within sampling tolerance.

namespace {

struct Stats {
  double mean = 0, std = 0, max_abs = 0;
  int64_t n = 0;
};

Stats stats(const Tensor& t) {
  Stats s{.n = t.numel()};
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < s.n; ++i) {
    const double v = t.data()[i];
    sum += v, sq += v * v;
    s.max_abs = std::max(s.max_abs, std::fabs(v));
  }
  s.mean = sum / double(s.n);
  s.std = std::sqrt(std::max(sq / double(s.n) - s.mean * s.mean, 0.0));
  return s;
}

// Five standard errors: a correct init fails with probability ~1e-6 per check.
void expect_normal(const std::string& what, const Tensor& t, double std) {
  const Stats s = stats(t);
  INFO(what, ": n ", s.n, " mean ", s.mean, " std ", s.std, ", expected std ", std);
  CHECK(std::fabs(s.mean) <= 5 * std / std::sqrt(double(s.n)));
  CHECK(std::fabs(s.std / std - 1) <= 5 / std::sqrt(2.0 * double(s.n)) + 1e-3);
  CHECK(s.max_abs > 2 * std);  // tails: a uniform of the same std never exceeds 1.74 std
}

void expect_uniform(const std::string& what, const Tensor& t, double bound) {
  const Stats s = stats(t);
  const double std = bound / std::sqrt(3.0);
  INFO(what, ": n ", s.n, " mean ", s.mean, " std ", s.std, " max ", s.max_abs, ", bound ",
       bound);
  CHECK(s.max_abs <= bound * (1 + 1e-6));  // U[-b, b) reaches -b exactly
  if (s.n < 100) return;  // too few draws for moments; the bound still holds
  CHECK(std::fabs(s.mean) <= 5 * std / std::sqrt(double(s.n)));
  CHECK(std::fabs(s.std / std - 1) <= 5 * std::sqrt(0.2 / double(s.n)) + 1e-3);
  CHECK(s.max_abs > 0.9 * bound);
}

void expect_constant(const std::string& what, const Tensor& t, float v) {
  int64_t off = 0;
  for (int64_t i = 0; i < t.numel(); ++i) off += t.data()[i] != v;
  CHECK_MESSAGE(off == 0, what, ": ", off, " of ", t.numel(), " entries differ from ", v);
}

void expect_fresh_batchnorm(const std::string& p, const BatchNorm2d& bn) {
  expect_constant(p + "weight", bn.weight, 1.f);
  expect_constant(p + "bias", bn.bias, 0.f);
  expect_constant(p + "running_mean", bn.running_mean, 0.f);
  expect_constant(p + "running_var", bn.running_var, 1.f);
  CHECK(bn.num_batches_tracked == 0);
}

// PyTorch's Conv2d/Linear default: weight and bias uniform in +-1/sqrt(fan_in).
template <class L>
void expect_torch_default(const std::string& p, const L& l) {
  const double bound = 1.0 / std::sqrt(double(init::fan_in(l.weight)));
  expect_uniform(p + "weight", l.weight, bound);
  if (l.bias.defined()) expect_uniform(p + "bias", l.bias, bound);
}

// Checks every Conv2d and Linear with the family's rules and every BatchNorm as fresh; returns
// how many layers it checked, so that rules which match nothing cannot pass.
struct InitRules {
  std::function<void(const std::string&, const Conv2d&)> conv;
  std::function<void(const std::string&, const Linear&)> linear;
};

int check_init(Model& m, const InitRules& rules) {
  int checked = 0;
  m.root().for_each_layer([&](Layer& l, const std::string& p) {
    if (auto* c = dynamic_cast<Conv2d*>(&l)) rules.conv(p, *c), ++checked;
    if (auto* f = dynamic_cast<Linear*>(&l)) rules.linear(p, *f), ++checked;
    if (auto* b = dynamic_cast<BatchNorm2d*>(&l)) expect_fresh_batchnorm(p, *b), ++checked;
  });
  return checked;
}

}  // namespace

TEST_CASE("init: VGG as torchvision (kaiming fan_out convs, N(0, 0.01) linears, zero biases)") {
  // init_vgg on a small net of VGG's layer kinds: the real VGGs draw 130M+ numbers (seconds);
  // make_vgg passes init_vgg to the same Model constructor.
  auto root = std::make_unique<Sequential>();
  root->add(leaf<Conv2d>(Conv2dOptions{.in_channels = 3, .out_channels = 64, .kernel = 3,
                                       .padding = 1}));
  root->add(leaf<BatchNorm2d>(64));
  root->add(leaf<Conv2d>(Conv2dOptions{.in_channels = 64, .out_channels = 128, .kernel = 3,
                                       .padding = 1}));
  root->add(leaf<Flatten>());
  root->add(leaf<Linear>(512, 4096));
  Model m("vgg-like", std::move(root), {}, init_vgg, 3);
  const int n = check_init(m, {
      .conv = [](const std::string& p, const Conv2d& c) {
        expect_normal(p + "weight", c.weight, std::sqrt(2.0 / double(init::fan_out(c.weight))));
        expect_constant(p + "bias", c.bias, 0.f);
      },
      .linear = [](const std::string& p, const Linear& f) {
        expect_normal(p + "weight", f.weight, 0.01);
        expect_constant(p + "bias", f.bias, 0.f);
      }});
  CHECK(n == 4);
}

TEST_CASE("init: AlexNet and LeNet keep PyTorch's layer defaults") {
  auto alexnet = build_model("alexnet", {.num_classes = 10}, 5);
  CHECK(check_init(*alexnet, {.conv = expect_torch_default<Conv2d>,
                              .linear = expect_torch_default<Linear>}) == 8);
  auto lenet = build_model("lenet", {.num_classes = 10, .in_channels = 1}, 5);
  CHECK(check_init(*lenet, {.conv = expect_torch_default<Conv2d>,
                            .linear = expect_torch_default<Linear>}) == 5);
}

TEST_CASE("init: SqueezeNet (kaiming_uniform convs, final conv N(0, 0.01), zero biases)") {
  auto m = build_model("squeezenet1_1", {.num_classes = 1000}, 7);
  int finals = 0;
  CHECK(check_init(*m, {.conv = [&](const std::string& p, const Conv2d& c) {
                          if (p == "classifier.1.") {
                            ++finals;
                            expect_normal(p + "weight", c.weight, 0.01);
                          } else {
                            expect_uniform(p + "weight", c.weight,
                                           std::sqrt(6.0 / double(init::fan_in(c.weight))));
                          }
                          expect_constant(p + "bias", c.bias, 0.f);
                        },
                        .linear = [](const std::string& p, const Linear&) {
                          FAIL_CHECK("SqueezeNet has no Linear, found ", p);
                        }}) == 26);
  CHECK(finals == 1);
}

TEST_CASE("init: DenseNet (kaiming_normal fan_in convs, BN 1/0, Linear default weight, 0 bias)") {
  auto m = build_model("densenet121", {.num_classes = 10}, 9);
  CHECK(check_init(*m, {.conv = [](const std::string& p, const Conv2d& c) {
                          expect_normal(p + "weight", c.weight,
                                        std::sqrt(2.0 / double(init::fan_in(c.weight))));
                        },
                        .linear = [](const std::string& p, const Linear& f) {
                          expect_uniform(p + "weight", f.weight,
                                         1.0 / std::sqrt(double(f.in_features())));
                          expect_constant(p + "bias", f.bias, 0.f);
                        }}) == 1 + 1 + 58 * 4 + 3 * 2 + 1 + 1);
}

TEST_CASE("init: ResNet-20 as torchvision's ResNets; draws depend on seed and name only") {
  auto m = build_model("resnet20", {.num_classes = 10}, 11);
  CHECK(check_init(*m, {.conv = [](const std::string& p, const Conv2d& c) {
                          expect_normal(p + "weight", c.weight,
                                        std::sqrt(2.0 / double(init::fan_out(c.weight))));
                        },
                        .linear = expect_torch_default<Linear>}) == 2 + 9 * 4 + 2 * 2 + 1);
  // Same seed, same weights; another seed, other weights; same-shaped tensors differ.
  auto again = build_model("resnet20", {.num_classes = 10}, 11);
  auto other = build_model("resnet20", {.num_classes = 10}, 12);
  const Tensor& a = m->params().values();
  int64_t same = 0, diff = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    same += a[i] == again->params().values()[i];
    diff += a[i] != other->params().values()[i];
  }
  CHECK(same == a.numel());
  CHECK(diff > a.numel() / 2);
  const Tensor* w1 = m->params().find("layer1.0.conv1.weight")->value;
  const Tensor* w2 = m->params().find("layer1.0.conv2.weight")->value;
  CHECK((*w1)[0] != (*w2)[0]);
}

TEST_CASE("init: trunc_normal keeps to [a, b] with the truncated normal's moments") {
  // Bounds at one std: the truncated std is 0.5396 std (a plain normal exceeds them 32% of
  // the time, so an untruncated draw fails the bound check at once).
  Tensor t = Tensor::empty({200000});
  init::trunc_normal(t, 5, "t", 0.5f, 2.f, -1.5f, 2.5f);
  const Stats s = stats(t);
  int64_t outside = 0;
  for (int64_t i = 0; i < t.numel(); ++i) outside += t.data()[i] < -1.5f || t.data()[i] > 2.5f;
  CHECK(outside == 0);
  CHECK(std::fabs(s.mean - 0.5) < 0.01);
  CHECK(std::fabs(s.std - 2 * 0.53956) < 0.01);
  CHECK_THROWS_AS(init::trunc_normal(t, 5, "t", 0.f, 1.f, 4.f, 5.f), mpicnn::Error);
}

TEST_CASE("init: Inception v3 and GoogLeNet (trunc_normal weights, BN 1/0, Linear default bias)") {
  // Inception v3: std 0.1, AuxLogits.fc 0.001; AuxLogits.conv1 0.1 too, as torchvision's init
  // loop reads the stddev it sets only on the nn.Linear (inception.h).
  auto inception = build_model("inception_v3", {.num_classes = 10}, 13);
  int aux_fc = 0;
  auto linear_bias = [](const std::string& p, const Linear& f) {
    expect_uniform(p + "bias", f.bias, 1.0 / std::sqrt(double(f.in_features())));
  };
  CHECK(check_init(*inception,
                   {.conv = [](const std::string& p,
                               const Conv2d& c) { expect_normal(p + "weight", c.weight, 0.1); },
                    .linear = [&](const std::string& p, const Linear& f) {
                      aux_fc += p == "AuxLogits.fc.";
                      expect_normal(p + "weight", f.weight, p == "AuxLogits.fc." ? 0.001 : 0.1);
                      linear_bias(p, f);
                    }}) == 96 * 2 + 2);
  CHECK(aux_fc == 1);
  auto googlenet = build_model("googlenet", {.num_classes = 10}, 13);
  CHECK(check_init(*googlenet,
                   {.conv = [](const std::string& p,
                               const Conv2d& c) { expect_normal(p + "weight", c.weight, 0.01); },
                    .linear = [&](const std::string& p, const Linear& f) {
                      expect_normal(p + "weight", f.weight, 0.01);
                      linear_bias(p, f);
                    }}) == 59 * 2 + 5);
}

TEST_CASE("auxiliary outputs: training mode only, in order, gradients through heads and trunk") {
  // No dropout: its masks change with every forward, and this compares three.
  const ModelOptions opt{.num_classes = kClasses, .in_channels = 3, .dropout = 0.f,
                         .aux_dropout = 0.f};
  auto m = build_model("googlenet", opt, 17);
  const int s = model_spec("googlenet").min_size;
  m->plan({2, 3, s, s}, exec());
  REQUIRE(m->aux_heads().size() == 2);
  CHECK(m->aux_heads()[0].name == "aux1");
  CHECK(m->aux_heads()[1].name == "aux2");
  CHECK(m->aux_heads()[0].weight == doctest::Approx(0.3));
  const Tensor x = random_tensor({2, 3, s, s}, 4);
  const Tensor dl = random_tensor({2, kClasses}, 5), zero = Tensor::zeros({2, kClasses});
  const Tensor da1 = random_tensor({2, kClasses}, 6), da2 = random_tensor({2, kClasses}, 7);
  // Gradient slab after forward and backward from (dlogits, aux1, aux2).
  auto grads = [&](const Tensor& d, const Tensor& a1, const Tensor& a2) {
    m->set_training(true);
    m->params().zero_grad();
    m->forward(x);
    REQUIRE(m->aux_outputs().size() == 2);
    CHECK_SHAPE(*m->aux_outputs()[1].logits, {2, kClasses});
    const Tensor* daux[] = {&a1, &a2};
    m->backward(d, daux);
    return to_double(m->params().grads());
  };
  // Backward is linear in its gradients: the heads' share adds to the main one's everywhere.
  const Vec main_only = grads(dl, zero, zero), aux_only = grads(zero, da1, da2);
  const Vec both = grads(dl, da1, da2);
  Vec sum(both.size());
  for (size_t i = 0; i < sum.size(); ++i) sum[i] = main_only[i] + aux_only[i];
  Tensor both_t = Tensor::empty({int64_t(both.size())});
  from_double(both_t, both);
  expect_close("main + aux gradients", both_t, sum, 1e-4, 1e-5);
  // The heads reach the trunk (conv1) and only them reach their own parameters.
  const StateEntry* conv1 = m->params().find("conv1.conv.weight");
  const StateEntry* fc2 = m->params().find("aux2.fc2.weight");
  REQUIRE((conv1 && fc2));
  auto norm = [](const Vec& v, const StateEntry* e) {
    double sum = 0;
    for (int64_t i = e->offset; i < e->offset + e->shape.numel(); ++i) sum += v[size_t(i)] * v[size_t(i)];
    return sum;
  };
  CHECK(norm(aux_only, conv1) > 0);
  CHECK(norm(main_only, fc2) == 0);
  CHECK(norm(aux_only, fc2) > 0);
  // Their gradients are required after a training forward, refused after an eval one.
  m->forward(x);
  CHECK_THROWS_AS(m->backward(dl), mpicnn::Error);
  m->set_training(false);
  m->forward(x);
  CHECK(m->aux_outputs().empty());
  const Tensor* two[] = {&da1, &da2};
  CHECK_THROWS_AS(m->backward(dl, two), mpicnn::Error);
  CHECK_NOTHROW(m->backward(dl));
}

TEST_CASE("auxiliary heads: the gradient-ready hook reports only finished gradients") {
  // GoogLeNet registers aux1 and aux2 between inception5b and fc: a report must never cover
  // a head's parameters before the head's backward ran.
  auto m = build_model("googlenet", {.num_classes = kClasses, .in_channels = 3}, 19);
  const int s = model_spec("googlenet").min_size;
  m->plan({2, 3, s, s}, exec());
  const Tensor x = random_tensor({2, 3, s, s}, 8);
  const Tensor dl = random_tensor({2, kClasses}, 9);
  const Tensor da1 = random_tensor({2, kClasses}, 10), da2 = random_tensor({2, kClasses}, 11);
  const Tensor& g = m->params().grads();
  auto checksum = [&g](int64_t from, int64_t to) {
    double sum = 0;
    for (int64_t i = from; i < to; ++i) sum += double(g.data()[i]) * double(i % 7 + 1);
    return sum;
  };
  // Per report: its offset and the checksum of what it newly declares final, [offset, the
  // previous report's offset): once every such range is unchanged at the end, so is each
  // report's whole [offset, end) (one pass over the gradient, not one per report).
  struct Report {
    int64_t offset, to;
    double sum;
  };
  std::vector<Report> reports;
  int64_t final_from = g.numel();
  m->set_grad_ready([&](int64_t offset) {
    const int64_t to = std::max(offset, final_from);
    reports.push_back({offset, to, checksum(offset, to)});
    final_from = std::min(final_from, offset);
  });
  m->params().zero_grad();
  m->forward(x);
  const Tensor* daux[] = {&da1, &da2};
  m->backward(dl, daux);
  m->set_grad_ready({});
  REQUIRE(reports.size() > 10);
  CHECK(reports.back().offset == 0);
  for (size_t i = 0; i < reports.size(); ++i) {
    INFO("report ", i, " at offset ", reports[i].offset);
    if (i > 0) CHECK(reports[i].offset <= reports[i - 1].offset);
    CHECK(checksum(reports[i].offset, reports[i].to) == reports[i].sum);  // unchanged since
  }
}

// ---------------------------------------------------------------------------------------
// Forward and backward at the smallest input.

TEST_CASE("forward and backward at the smallest input: finite, shaped, allocation-free") {
  for (const char* name : {"lenet", "resnet20", "squeezenet1_1", "alexnet", "densenet121",
                           "vgg11_bn", "googlenet"}) {
    const ModelSpec& spec = model_spec(name);
    INFO("model ", name);
    const ModelOptions opt{.num_classes = kClasses, .in_channels = 3};
    std::unique_ptr<Model> m;
    if (spec.name == "vgg11_bn" || spec.name == "alexnet") {
      // 60M-130M random draws are for training; here any varied weights do.
      m = std::make_unique<Model>(name, spec.name == "alexnet" ? alexnet_module(opt)
                                                               : vgg_module(name, opt),
                                  opt, no_init, 0);
      fill_cheap(*m);
    } else {
      m = build_model(name, opt, 21);
    }
    const int s = spec.min_size;
    const Shape in{2, 3, s, s};
    CHECK(m->plan(in, exec()) == Shape{2, kClasses});
    Tensor x = random_tensor(in, 1);
    Tensor dlogits = random_tensor({2, kClasses}, 2);
    // One gradient per auxiliary head (GoogLeNet's two), in training mode.
    std::vector<Tensor> daux;
    for (size_t i = 0; i < m->aux_heads().size(); ++i)
      daux.push_back(random_tensor({2, kClasses}, 3 + i));
    std::vector<const Tensor*> daux_ptrs;
    for (const Tensor& t : daux) daux_ptrs.push_back(&t);
    m->set_training(true);
    m->params().zero_grad();
    const Tensor& y = m->forward(x);
    CHECK_SHAPE(y, {2, kClasses});
    CHECK(all_finite(y));
    REQUIRE(m->aux_outputs().size() == daux.size());
    m->backward(dlogits, daux_ptrs);
    int64_t zero_grads = 0, params = 0;
    for (const StateEntry& e : m->params().entries()) {
      if (e.kind != StateKind::Param) continue;
      ++params;
      CHECK_MESSAGE(all_finite(*e.grad), e.name, ": non-finite gradient");
      zero_grads += stats(*e.grad).max_abs == 0;
    }
    CHECK_MESSAGE(zero_grads == 0, zero_grads, " of ", params, " parameters got no gradient");

    // A second step, planned already, allocates no tensor.
    const int64_t before = host_allocation_count();
    m->params().zero_grad();
    m->forward(x);
    m->backward(dlogits, daux_ptrs);
    CHECK(host_allocation_count() == before);

    // Eval mode: one image in a plan for two gives that image's row (samples independent).
    m->set_training(false);
    Tensor y2 = Tensor::empty({2, kClasses});
    y2.copy_from(m->forward(x));
    const Tensor& y1 = m->forward(x.slice0(0, 1));
    CHECK_SHAPE(y1, {1, kClasses});
    Vec want(y2.data(), y2.data() + kClasses);
    expect_close("batch of one vs batch of two", y1, want, 1e-4, 1e-4);
  }
}

TEST_CASE("inference-only plans: the same logits, bit for bit, as a training plan in eval mode") {
  // Inference plans share activation buffers between layers and blocks and run BatchNorm in
  // place (module.h's plan_mode): any reader of an overwritten buffer changes the logits.
  // BatchNorm running statistics are set away from 0/1, so that BatchNorm is not identity.
  auto make = [](const std::string& name) {
    const ModelOptions opt{.num_classes = kClasses, .in_channels = 3};
    std::unique_ptr<Model> m;
    if (name == "vgg11_bn" || name == "alexnet") {
      m = std::make_unique<Model>(name, name == "alexnet" ? alexnet_module(opt)
                                                          : vgg_module(name, opt),
                                  opt, no_init, 0);
      fill_cheap(*m);
    } else {
      m = build_model(name, opt, 21);
    }
    for (const StateEntry& e : m->params().entries()) {
      const bool mean = e.name.ends_with("running_mean"), var = e.name.ends_with("running_var");
      if (!mean && !var) continue;
      Tensor r = random_tensor(e.value->shape(), stream_id(e.name));
      for (int64_t i = 0; i < r.numel(); ++i)
        e.value->data()[i] = mean ? 0.2f * r[i] : 0.75f + 0.25f * std::tanh(r[i]);
    }
    m->set_training(false);
    return m;
  };
  for (const char* name : {"lenet", "resnet20", "resnet18", "resnet50", "squeezenet1_1",
                           "alexnet", "vgg11_bn", "densenet121", "googlenet"}) {
    INFO("model ", std::string(name));
    const ModelSpec& spec = model_spec(name);
    const int s = std::max(spec.min_size, name == std::string("lenet") ? 28 : 64);
    const Shape in{3, 3, s, s};
    Tensor x = random_tensor(in, 5);
    auto trained = make(name), inferred = make(name);
    REQUIRE(trained->plan(in, exec()) == Shape{3, kClasses});
    REQUIRE(inferred->plan(in, exec().for_inference()) == Shape{3, kClasses});
    Tensor want = Tensor::empty({3, kClasses});
    want.copy_from(trained->forward(x));
    for (int pass = 0; pass < 2; ++pass) {  // the second reads buffers the first left behind
      const Tensor& got = inferred->forward(x);
      REQUIRE(got.shape() == want.shape());
      int64_t differ = 0;
      for (int64_t i = 0; i < want.numel(); ++i) differ += got[i] != want[i];
      CHECK_MESSAGE(differ == 0, differ, " of ", want.numel(), " logits differ (pass ", pass, ")");
    }
    // A smaller batch in the same plans (kernels may block a batch of one differently).
    want.slice0(0, 1).copy_from(trained->forward(x.slice0(0, 1)));
    const Tensor& one = inferred->forward(x.slice0(0, 1));
    for (int64_t i = 0; i < kClasses; ++i) CHECK(one[i] == want[i]);
    Tensor dl = Tensor::zeros({1, kClasses});
    CHECK_THROWS_WITH_AS(inferred->backward(dl), doctest::Contains("inference-only plan"),
                         mpicnn::Error);
  }
}

TEST_CASE("lenet and resnet20 take 28x28x1 (Fashion-MNIST) and 32x32x3 (CIFAR)") {
  for (const char* name : {"lenet", "resnet20"}) {
    for (auto [c, s] : {std::pair{1, 28}, std::pair{3, 32}}) {
      auto m = build_model(name, {.num_classes = 10, .in_channels = c}, 1);
      CHECK(m->plan({4, c, s, s}, exec()) == Shape{4, 10});
      Tensor x = random_tensor({4, c, s, s}, 3);
      CHECK(all_finite(m->forward(x)));
    }
  }
}

// ---------------------------------------------------------------------------------------
// Gradient checks of the custom blocks: the analytic gradient of L = sum(w * block(x)) against
// central differences of the block's own float forward (its layers are each checked against
// double references in their tests; this checks how the block wires them). Float forward:
// step 1e-3 and loose tolerances. Training mode, so BatchNorm's batch statistics take part.

namespace {

// Checks d/dx and d/dparams of L = sum(w * module(x)) for a module planned for `planned`
// inputs and run on the first n of them.
void check_block_gradients(const std::string& what, Module& block, ParamStore& store,
                           const Shape& planned, int64_t n) {
  const Shape out_shape = block.plan(planned, exec());
  Shape in_shape = planned, w_shape = out_shape;
  in_shape.d[0] = n, w_shape.d[0] = n;
  block.set_training(true);
  Tensor x = random_tensor(in_shape, 31);
  Tensor w = random_tensor(w_shape, 32);
  const Vec wv = to_double(w);
  auto objective = [&]() { return dot(to_double(block.forward(x)), wv); };

  store.zero_grad();
  objective();
  Tensor dx = Tensor::empty(in_shape);
  block.backward(dx, w);

  GradCheckOptions opt;
  opt.h = 1e-3;
  opt.rtol = 2e-2;
  opt.atol_frac = 5e-3;
  opt.kink_tol = 5e-2;
  opt.max_checks = 60;
  auto through = [&](Tensor& t) {
    return [&](const Vec& v) {
      from_double(t, v);
      return objective();
    };
  };
  const Vec x0 = to_double(x);
  check_gradient(what + " input", dx, through(x), x0, opt);
  from_double(x, x0);
  for (const StateEntry& e : store.entries()) {
    if (e.kind != StateKind::Param) continue;
    const Vec p0 = to_double(*e.value);
    check_gradient(what + " " + e.name, *e.grad, through(*e.value), p0, opt);
    from_double(*e.value, p0);
  }
}

}  // namespace

TEST_CASE("Fire: gradients match finite differences of its forward") {
  Fire fire(5, 3, 4, 6);
  ParamStore store;
  fire.register_state(store, "fire.");
  store.allocate();
  uint64_t seed = 40;
  for (const StateEntry& e : store.entries()) fill_uniform(*e.value, ++seed, -0.8f, 0.8f);
  check_block_gradients("Fire", fire, store, {3, 5, 5, 4}, 2);
}

TEST_CASE("DenseBlock: gradients match finite differences (shared feature buffer)") {
  // 3 layers: every layer's input prefix gets gradient from all later layers and the output.
  DenseBlock block(3, 4, 3, 2);
  CHECK(block.out_channels() == 4 + 3 * 3);
  ParamStore store;
  block.register_state(store, "block.");
  store.allocate();
  uint64_t seed = 50;
  for (const StateEntry& e : store.entries()) {
    if (e.kind == StateKind::Param && e.name.find("norm") != std::string::npos)
      fill_uniform(*e.value, ++seed, 0.5f, 1.5f);  // BN scale/shift away from 0
    else if (e.kind == StateKind::Param)
      fill_uniform(*e.value, ++seed, -0.8f, 0.8f);
  }
  // Planned for 3 images, run on 2: the channel-major views must pack by the actual batch.
  check_block_gradients("DenseBlock", block, store, {3, 4, 4, 5}, 2);
}

TEST_CASE("per-layer profile: every layer of a forward and backward, once each, by its name") {
  auto m = build_model("resnet20", {.num_classes = kClasses, .in_channels = 3}, 3);
  m->plan({2, 3, 32, 32}, exec());
  m->set_training(true);
  const Tensor x = random_tensor({2, 3, 32, 32}, 8), dl = random_tensor({2, kClasses}, 9);
  profile::reset();
  m->forward(x);  // not profiled
  CHECK(profile::rows().empty());
  profile::set_enabled(true);
  m->params().zero_grad();
  m->forward(x);
  m->backward(dl);
  profile::set_enabled(false);
  testing::check_profile_rows(profile::rows(), *m);
  profile::reset();
  CHECK(profile::rows().empty());
}

TEST_CASE("Sequential backward_over: the last BatchNorm's gradient over dout, the same bits") {
  // A ResNet downsample (conv 1x1/2, BatchNorm): planned to overwrite its output gradient, its
  // BatchNorm runs backward in place over it and no gradient buffer of its own is needed; din
  // and the parameter gradients are a plain Sequential's, bit for bit.
  auto make = [](bool over) {
    auto s = std::make_unique<Sequential>();
    s->add("0", leaf<Conv2d>(Conv2dOptions{.in_channels = 6, .out_channels = 8, .kernel = 1,
                                           .stride = 2, .bias = false}));
    s->add("1", leaf<BatchNorm2d>(8));
    s->set_overwrites_dout(over);
    return s;
  };
  const Shape in{3, 6, 7, 9};
  const Tensor x = random_tensor(in, 61);
  std::vector<Tensor> got;
  for (bool over : {false, true}) {
    CAPTURE(over);
    auto s = make(over);
    ParamStore store;
    s->register_state(store, "d.");
    store.allocate();
    uint64_t seed = 62;
    for (const StateEntry& e : store.entries())
      if (e.kind == StateKind::Param) fill_uniform(*e.value, ++seed, 0.5f, 1.5f);
    const Shape out = s->plan(in, exec());
    s->set_training(true);
    s->forward(x);
    const Tensor dy = random_tensor(out, 70);
    Tensor dout = Tensor::empty(out), din = Tensor::empty(in);
    dout.copy_from(dy);
    store.zero_grad();
    if (over) {
      CHECK_THROWS_AS(s->backward(din, dout), Error);  // planned to overwrite: backward_over
      s->backward_over(din, dout);
      CHECK(std::memcmp(dout.data(), dy.data(), size_t(dy.numel()) * sizeof(real)) != 0);
    } else {
      s->backward(din, dout);
    }
    got.push_back(din);
    for (const StateEntry& e : store.entries())
      if (e.kind == StateKind::Param) {
        got.push_back(Tensor::empty(e.grad->shape()));  // a copy: the store's slab goes
        got.back().copy_from(*e.grad);
      }
  }
  const size_t half = got.size() / 2;
  for (size_t i = 0; i < half; ++i)
    CHECK(std::memcmp(got[i].data(), got[half + i].data(),
                      size_t(got[i].numel()) * sizeof(real)) == 0);
}

// Model::explain_plan: one aligned line per layer with a choice (convolutions, linear layers),
// under the layer's torchvision name; DenseNet's bottleneck convolutions say that their block
// runs them.
TEST_CASE("models: explain_plan lists each convolution's and linear layer's implementation") {
  // The words after the layer's name and kind on its line ("" when it has no line).
  const auto note_of = [](const std::string& plan, const std::string& name,
                          const std::string& kind) {
    for (size_t at = 0; at < plan.size();) {
      const size_t end = plan.find('\n', at);
      const std::string line = plan.substr(at, end - at);
      at = end + 1;
      if (line.rfind(name + " ", 0) != 0) continue;
      const size_t k = line.find("  " + kind + "  ");
      return k == std::string::npos ? std::string("(no ") + kind + ")" : line.substr(k + kind.size() + 4);
    }
    return std::string();
  };
  ModelOptions mo;
  mo.num_classes = 10;
  auto r = build_model("resnet18", mo, 1);
  r->plan({2, 3, 40, 40}, exec());
  const std::string plan = r->explain_plan();
  INFO(plan);
  int convs = 0, lines = 0;
  for (size_t at = 0; (at = plan.find('\n', at)) != std::string::npos; ++at) ++lines;
  for (size_t at = 0; (at = plan.find("  Conv2d  ", at)) != std::string::npos; ++at) ++convs;
  CHECK(convs == 20);  // stem, 16 in the blocks, 3 downsamples
  CHECK(lines == 21);  // and fc
  const std::string direct = exec().isa == DirectIsa::kNone
                                 ? std::string("im2col")
                                 : std::string("direct ") + direct_isa_name(exec().isa);
  CHECK(note_of(plan, "layer2.0.downsample.0", "Conv2d").rfind(direct, 0) == 0);
  CHECK(note_of(plan, "fc", "Linear") == "fp32 GEMM");
  auto d = build_model("densenet121", mo, 1);
  d->plan({1, 3, 32, 32}, exec());
  CHECK(note_of(d->explain_plan(), "features.denseblock1.denselayer1.conv1", "Conv2d") ==
        "fp32 GEMM run by its block");
}
