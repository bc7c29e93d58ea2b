// torchvision Inception v3: stem (five BasicConv2d, two 3x3/2 max pools), Mixed_5b-5d
// (InceptionA), Mixed_6a (InceptionB), Mixed_6b-6e (InceptionC, 1x7/7x1 convs), AuxLogits on
// Mixed_6e's output, Mixed_7a (InceptionD), Mixed_7b-7c (InceptionE, 1x3/3x1 splits), then
// AdaptiveAvgPool2d(1), Dropout, flatten, fc. Branch pools are average 3x3/1 pad 1
// (count_include_pad) or max 3x3/2, as torchvision's functional calls.
#include "models/inception.h"

#include "layers/adaptive_avgpool2d.h"
#include "layers/avgpool2d.h"
#include "layers/dropout.h"
#include "layers/flatten.h"
#include "layers/linear.h"
#include "layers/maxpool2d.h"
#include "models/aux_net.h"
#include "models/branches.h"
#include "models/init.h"

namespace mpicnn {

namespace {

using Hw = Conv2dOptions::Hw;

// A branch: its layers named flat under the block ("branch5x5_1", "branch5x5_2").
struct Chain {
  std::unique_ptr<Sequential> seq = std::make_unique<Sequential>();
  Chain& conv(const std::string& name, int in, int out, Hw k, Hw s = 1, Hw p = 0) {
    seq->add(name, basic_conv2d(in, out, k, s, p));
    return *this;
  }
  Chain& avg_pool() {  // F.avg_pool2d(x, 3, stride=1, padding=1)
    seq->add("avg_pool", leaf<AvgPool2d>(3, 1, 1));
    return *this;
  }
  Chain& max_pool() {  // F.max_pool2d(x, 3, stride=2)
    seq->add("max_pool", leaf<MaxPool2d>(3, 2));
    return *this;
  }
  Chain& then(std::unique_ptr<Module> m) {
    seq->add_inline(std::move(m));
    return *this;
  }
};

std::unique_ptr<Branches> block(std::initializer_list<Chain*> chains) {
  auto b = std::make_unique<Branches>();
  for (Chain* c : chains) b->add(std::move(c->seq));
  return b;
}

std::unique_ptr<Branches> inception_a(int in, int pool_features) {
  Chain b1, b5, b3, bp;
  b1.conv("branch1x1", in, 64, 1);
  b5.conv("branch5x5_1", in, 48, 1).conv("branch5x5_2", 48, 64, 5, 1, 2);
  b3.conv("branch3x3dbl_1", in, 64, 1).conv("branch3x3dbl_2", 64, 96, 3, 1, 1);
  b3.conv("branch3x3dbl_3", 96, 96, 3, 1, 1);
  bp.avg_pool().conv("branch_pool", in, pool_features, 1);
  return block({&b1, &b5, &b3, &bp});
}

std::unique_ptr<Branches> inception_b(int in) {
  Chain b3, bd, bp;
  b3.conv("branch3x3", in, 384, 3, 2);
  bd.conv("branch3x3dbl_1", in, 64, 1).conv("branch3x3dbl_2", 64, 96, 3, 1, 1);
  bd.conv("branch3x3dbl_3", 96, 96, 3, 2);
  bp.max_pool();
  return block({&b3, &bd, &bp});
}

std::unique_ptr<Branches> inception_c(int in, int c7) {
  Chain b1, b7, bd, bp;
  const Hw k17{1, 7}, p17{0, 3}, k71{7, 1}, p71{3, 0};
  b1.conv("branch1x1", in, 192, 1);
  b7.conv("branch7x7_1", in, c7, 1).conv("branch7x7_2", c7, c7, k17, 1, p17);
  b7.conv("branch7x7_3", c7, 192, k71, 1, p71);
  bd.conv("branch7x7dbl_1", in, c7, 1).conv("branch7x7dbl_2", c7, c7, k71, 1, p71);
  bd.conv("branch7x7dbl_3", c7, c7, k17, 1, p17).conv("branch7x7dbl_4", c7, c7, k71, 1, p71);
  bd.conv("branch7x7dbl_5", c7, 192, k17, 1, p17);
  bp.avg_pool().conv("branch_pool", in, 192, 1);
  return block({&b1, &b7, &bd, &bp});
}

std::unique_ptr<Branches> inception_d(int in) {
  Chain b3, b7, bp;
  b3.conv("branch3x3_1", in, 192, 1).conv("branch3x3_2", 192, 320, 3, 2);
  b7.conv("branch7x7x3_1", in, 192, 1).conv("branch7x7x3_2", 192, 192, Hw{1, 7}, 1, Hw{0, 3});
  b7.conv("branch7x7x3_3", 192, 192, Hw{7, 1}, 1, Hw{3, 0}).conv("branch7x7x3_4", 192, 192, 3, 2);
  bp.max_pool();
  return block({&b3, &b7, &bp});
}

// torch.cat([conv_a(x), conv_b(x)], 1) with a 1x3 and a 3x1 conv: InceptionE's split ends.
std::unique_ptr<Branches> split_1x3_3x1(const std::string& a, const std::string& b, int c) {
  Chain ca, cb;
  ca.conv(a, c, c, Hw{1, 3}, 1, Hw{0, 1});
  cb.conv(b, c, c, Hw{3, 1}, 1, Hw{1, 0});
  return block({&ca, &cb});
}

std::unique_ptr<Branches> inception_e(int in) {
  Chain b1, b3, bd, bp;
  b1.conv("branch1x1", in, 320, 1);
  b3.conv("branch3x3_1", in, 384, 1).then(split_1x3_3x1("branch3x3_2a", "branch3x3_2b", 384));
  bd.conv("branch3x3dbl_1", in, 448, 1).conv("branch3x3dbl_2", 448, 384, 3, 1, 1);
  bd.then(split_1x3_3x1("branch3x3dbl_3a", "branch3x3dbl_3b", 384));
  bp.avg_pool().conv("branch_pool", in, 192, 1);
  return block({&b1, &b3, &bd, &bp});
}

// InceptionAux: avg_pool2d(5, stride=3), conv0 (1x1, 128), conv1 (5x5, 768),
// adaptive_avg_pool2d(1), flatten, fc.
std::unique_ptr<Sequential> aux_head(int in, int classes) {
  auto s = std::make_unique<Sequential>();
  s->add("avg_pool", leaf<AvgPool2d>(5, 3));
  s->add("conv0", basic_conv2d(in, 128, 1));
  s->add("conv1", basic_conv2d(128, 768, 5));
  s->add("adaptive_avg_pool", leaf<AdaptiveAvgPool2d>(1, 1));
  s->add("flatten", leaf<Flatten>());
  s->add("fc", leaf<Linear>(768, classes));
  return s;
}

std::unique_ptr<Sequential> stem_to_mixed_6e(int in_channels) {
  auto s = std::make_unique<Sequential>();
  s->add("Conv2d_1a_3x3", basic_conv2d(in_channels, 32, 3, 2));
  s->add("Conv2d_2a_3x3", basic_conv2d(32, 32, 3));
  s->add("Conv2d_2b_3x3", basic_conv2d(32, 64, 3, 1, 1));
  s->add("maxpool1", leaf<MaxPool2d>(3, 2));
  s->add("Conv2d_3b_1x1", basic_conv2d(64, 80, 1));
  s->add("Conv2d_4a_3x3", basic_conv2d(80, 192, 3));
  s->add("maxpool2", leaf<MaxPool2d>(3, 2));
  s->add("Mixed_5b", inception_a(192, 32));
  s->add("Mixed_5c", inception_a(256, 64));
  s->add("Mixed_5d", inception_a(288, 64));
  s->add("Mixed_6a", inception_b(288));
  s->add("Mixed_6b", inception_c(768, 128));
  s->add("Mixed_6c", inception_c(768, 160));
  s->add("Mixed_6d", inception_c(768, 160));
  s->add("Mixed_6e", inception_c(768, 192));
  return s;
}

}  // namespace

void init_inception_v3(Model& model, uint64_t seed) {
  model.root().for_each_layer([seed](Layer& l, const std::string& prefix) {
    if (auto* c = dynamic_cast<Conv2d*>(&l)) {
      init::trunc_normal(c->weight, seed, prefix + "weight", 0.f, 0.1f, -2.f, 2.f);
    } else if (auto* f = dynamic_cast<Linear*>(&l)) {
      f->reset_parameters(seed);  // the bias keeps nn.Linear's default
      const real std = prefix == "AuxLogits.fc." ? 0.001f : 0.1f;
      init::trunc_normal(f->weight, seed, prefix + "weight", 0.f, std, -2.f, 2.f);
    } else {
      l.reset_parameters(seed);  // BatchNorm: 1/0 and fresh running stats
    }
  });
}

std::unique_ptr<Model> make_inception_v3(const ModelOptions& options, uint64_t seed) {
  auto head = std::make_unique<Sequential>();
  head->add("Mixed_7a", inception_d(768));
  head->add("Mixed_7b", inception_e(1280));
  head->add("Mixed_7c", inception_e(2048));
  head->add("avgpool", leaf<AdaptiveAvgPool2d>(1, 1));
  head->add("dropout", leaf<Dropout>(options.dropout_or(0.5f)));
  head->add("flatten", leaf<Flatten>());
  head->add("fc", leaf<Linear>(2048, options.num_classes));

  auto root = std::make_unique<AuxNet>();
  root->add_segment(stem_to_mixed_6e(options.in_channels));
  root->add_head("AuxLogits", real(0.4), 0, aux_head(768, options.num_classes));
  root->add_segment(std::move(head));
  auto model =
      std::make_unique<Model>("inception_v3", std::move(root), options, init_inception_v3, seed);
  // Every classifier sized by the class count: --init-weights re-initialises them together.
  model->set_head({"fc", "AuxLogits.fc"});
  return model;
}

}  // namespace mpicnn
