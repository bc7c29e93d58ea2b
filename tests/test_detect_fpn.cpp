// ResNet + FPN backbone (src/detect/fpn.*) against torchvision 0.14's resnet_fpn_backbone,
// forward and backward, and the RPN head against torchvision's RPNHead, from references that
// tests/python/detect_{fpn,rpn_head}_torch.py write at test time; the nearest upsampling
// (PyTorch's index rule, its adjoint) against naive loops.
#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "detect/fpn.h"
#include "detect/rpn_head.h"
#include "io/safetensors.h"
#include "models/model.h"
#include "testing.h"

using namespace mpicnn;
using namespace mpicnn::testing;

namespace {

// Runs the reference for BODY with `trainable` stages on an (n, 3, h, w) input and checks our
// levels, parameter gradients (frozen ones must stay zero) and, when with_din, the input's.
// Without frozen_bn the body has ordinary BatchNorm in training mode (batch statistics), and its
// running statistics after the forward pass are checked too.
void check_fpn(const std::string& body, int trainable, int64_t n, int64_t h, int64_t w,
               bool with_din, bool frozen_bn = true) {
  TempDir dir;
  const std::string ref_path = (dir.path / "fpn.safetensors").string();
  std::ostringstream args;
  args << shell_quote(ref_path) << ' ' << body << ' ' << trainable << ' ' << n << ' ' << h << ' '
       << w << " 7" << (frozen_bn ? "" : " bn");
  run_python("detect_fpn_torch.py", args.str());
  SafetensorsReader ref(ref_path);

  detect::ResNetFpn net(body, trainable, 256, frozen_bn);
  ParamStore store;
  net.register_state(store, "");
  store.allocate();
  net.freeze(store);
  for (const StateEntry& e : store.entries()) {
    if (frozen_bn) CHECK_MESSAGE(!e.name.ends_with("num_batches_tracked"), "FrozenBatchNorm2d has no counter");
    REQUIRE_MESSAGE(ref.contains("init." + e.name), "no reference tensor for ", e.name);
    StateEntry renamed = e;
    renamed.name = "init." + e.name;
    read_state_entry(ref, renamed);
  }
  int expected = 0;  // parameters torch trains
  for (const TensorInfo& t : ref.tensors()) expected += t.name.starts_with("grad.") ? 1 : 0;

  const Shape in_shape{n, 3, h, w};
  const std::vector<Shape> shapes = net.plan(in_shape, exec());
  REQUIRE(shapes.size() == 5u);
  net.set_training(true);
  Tensor x = Tensor::empty(in_shape);
  ref.read(x, "input");
  const std::vector<Tensor>& levels = net.forward(x);
  std::vector<Tensor> dlevels;
  for (int k = 0; k < 5; ++k) {
    const std::string name = "level." + std::to_string(k);
    expect_close(body + " " + name, levels[size_t(k)], ref.read_f64(name), 1e-3, 1e-4);
    dlevels.push_back(Tensor::empty(levels[size_t(k)].shape()));
    ref.read(dlevels.back(), "dlevel." + std::to_string(k));
  }
  store.zero_grad();
  Tensor din = with_din ? Tensor::empty(in_shape) : Tensor();
  net.backward(din, dlevels);

  int trained = 0;
  for (const StateEntry& e : store.entries()) {
    if (e.kind != StateKind::Param) continue;
    if (ref.contains("grad." + e.name)) {
      ++trained;
      CHECK_MESSAGE(!e.frozen, e.name, " trains in torchvision but is frozen here");
      expect_close(body + " grad " + e.name, *e.grad, ref.read_f64("grad." + e.name), 2e-3, 2e-4);
    } else {
      CHECK_MESSAGE(e.frozen, e.name, " is frozen in torchvision but trains here");
      CHECK_MESSAGE(max_abs(to_double(*e.grad)) == 0.0, e.name, ": a frozen gradient moved");
    }
  }
  CHECK(trained == expected);
  if (with_din) expect_close(body + " dinput", din, ref.read_f64("dinput"), 2e-3, 2e-4);
  int moved = 0;
  for (const StateEntry& e : store.entries())
    if (ref.contains("after." + e.name)) {
      ++moved;
      expect_close(body + " " + e.name + " after forward", *e.value, ref.read_f64("after." + e.name), 1e-4, 1e-5);
    }
  CHECK(moved == (frozen_bn ? 0 : 2 * int(std::count_if(store.entries().begin(), store.entries().end(), [](const StateEntry& e) {
                                          return e.name.ends_with("num_batches_tracked");
                                        }))));
}

}  // namespace

TEST_CASE("upsample_nearest: PyTorch's source index for 2x and other sizes, and its adjoint") {
  for (auto [H, W, OH, OW] : std::vector<std::array<int64_t, 4>>{
           {3, 5, 6, 10}, {3, 5, 5, 9}, {2, 2, 7, 3}, {5, 9, 9, 18}, {4, 4, 4, 4}}) {
    Tensor in = random_tensor({2, 3, H, W}, 11);
    Tensor out = Tensor::empty({2, 3, OH, OW});
    detect::upsample_nearest(out, in, false);
    Vec want(size_t(out.numel()));
    for (int64_t p = 0; p < 6; ++p)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          // PyTorch: floor(dst * (float)in / out), 2x by halving; both give this here.
          const int64_t ih = std::min<int64_t>(int64_t(std::floor(float(oh) * (float(H) / float(OH)))), H - 1);
          const int64_t iw = std::min<int64_t>(int64_t(std::floor(float(ow) * (float(W) / float(OW)))), W - 1);
          want[size_t((p * OH + oh) * OW + ow)] = in.data()[(p * H + ih) * W + iw];
        }
    expect_close("upsample", out, want, 0, 0);
    // Adjoint: <up(x), g> == <x, up'(g)>.
    Tensor g = random_tensor(out.shape(), 12);
    Tensor dx = Tensor::zeros(in.shape());
    detect::upsample_nearest_backward(dx, g);
    CHECK(dot(to_double(out), to_double(g)) == doctest::Approx(dot(to_double(in), to_double(dx))).epsilon(1e-6));
  }
}

TEST_CASE("ResNet-18 FPN backbone matches torchvision (trainable_layers 3, frozen BatchNorm)") {
  // 70 x 90: stage maps 18x23, 9x12, 5x6, 3x3: top-down upsampling by other than 2.
  check_fpn("resnet18", 3, 2, 70, 90, /*with_din=*/false);
}

TEST_CASE("ResNet-18 FPN backbone: every stage trains, and the input gradient") {
  check_fpn("resnet18", 5, 1, 64, 64, /*with_din=*/true);
}

TEST_CASE("ResNet-18 FPN backbone with ordinary BatchNorm (from random weights) matches torchvision") {
  // torchvision's resnet_fpn_backbone(norm_layer=BatchNorm2d, trainable_layers=5), training mode.
  check_fpn("resnet18", 5, 2, 64, 64, /*with_din=*/false, /*frozen_bn=*/false);
}

TEST_CASE("ResNet-50 FPN backbone matches torchvision (bottleneck body, trainable_layers 1)") {
  check_fpn("resnet50", 1, 1, 64, 96, /*with_din=*/false);
}

TEST_CASE("RPN head: one set of parameters over five levels matches torchvision's RPNHead") {
  TempDir dir;
  const std::string ref_path = (dir.path / "rpn_head.safetensors").string();
  const std::vector<std::array<int64_t, 2>> sizes = {{12, 16}, {6, 8}, {3, 4}, {2, 2}, {1, 1}};
  std::ostringstream args;
  args << shell_quote(ref_path) << " 32 3 2 5";
  for (auto [h, w] : sizes) args << ' ' << h << ' ' << w;
  run_python("detect_rpn_head_torch.py", args.str());
  SafetensorsReader ref(ref_path);

  detect::RpnHead head(32, 3, int(sizes.size()));
  ParamStore store;
  head.register_state(store, "");
  store.allocate();
  head.share_parameters();
  for (const StateEntry& e : store.entries()) {
    StateEntry renamed = e;
    renamed.name = "init." + e.name;
    read_state_entry(ref, renamed);
  }
  std::vector<Shape> shapes;
  std::vector<Tensor> feats, dobj, ddel, dfeat;
  for (size_t l = 0; l < sizes.size(); ++l) {
    shapes.push_back({2, 32, sizes[l][0], sizes[l][1]});
    feats.push_back(Tensor::empty(shapes.back()));
    ref.read(feats.back(), "feature." + std::to_string(l));
    dfeat.push_back(Tensor::empty(shapes.back()));
  }
  head.plan(shapes, exec());
  head.set_training(true);
  head.forward(feats);
  for (size_t l = 0; l < sizes.size(); ++l) {
    const std::string L = std::to_string(l);
    expect_close("objectness." + L, head.objectness()[l], ref.read_f64("objectness." + L), 1e-4, 1e-5);
    expect_close("deltas." + L, head.deltas()[l], ref.read_f64("deltas." + L), 1e-4, 1e-5);
    dobj.push_back(Tensor::empty(head.objectness()[l].shape()));
    ref.read(dobj.back(), "dobjectness." + L);
    ddel.push_back(Tensor::empty(head.deltas()[l].shape()));
    ref.read(ddel.back(), "ddeltas." + L);
  }
  store.zero_grad();
  head.backward(dfeat, dobj, ddel);
  for (size_t l = 0; l < sizes.size(); ++l)
    expect_close("dfeature." + std::to_string(l), dfeat[l], ref.read_f64("dfeature." + std::to_string(l)), 1e-3, 1e-4);
  for (const StateEntry& e : store.entries())
    if (e.kind == StateKind::Param)
      expect_close("grad " + e.name, *e.grad, ref.read_f64("grad." + e.name), 1e-3, 1e-4);
}
