// BasicConv2d and Branches: planning, forward through every branch into one concatenated
// buffer, backward splitting the output gradient and summing the input gradients.
#include "models/branches.h"

#include "layers/add.h"
#include "layers/batchnorm.h"
#include "layers/relu.h"

namespace mpicnn {

std::unique_ptr<Sequential> basic_conv2d(int in, int out, Conv2dOptions::Hw kernel,
                                         Conv2dOptions::Hw stride, Conv2dOptions::Hw padding) {
  auto s = std::make_unique<Sequential>();
  s->add("conv", leaf<Conv2d>(Conv2dOptions{.in_channels = in, .out_channels = out,
                                            .kernel = kernel, .stride = stride,
                                            .padding = padding, .bias = false}));
  s->add("bn", leaf<BatchNorm2d>(out, /*eps=*/real(1e-3)));
  s->add("relu", leaf<ReLU>()).in_place();
  return s;
}

namespace {

Tensor batch_view(Tensor& buf, Shape s, int64_t n) {
  s.d[0] = n;
  return buf.head(s);
}

}  // namespace

Module& Branches::add(std::unique_ptr<Module> branch) {
  branches_.push_back(std::move(branch));
  return *branches_.back();
}

int64_t Branches::out_channels() const {
  CHECK(out_buf_.defined(), "Branches: out_channels() before plan()");
  return out_buf_.size(1);
}

void Branches::register_state(ParamStore& store, const std::string& prefix) {
  for (auto& b : branches_) b->register_state(store, prefix);
}

void Branches::for_each_layer(const std::function<void(Layer&, const std::string&)>& fn) {
  for (auto& b : branches_) b->for_each_layer(fn);
}

void Branches::set_training(bool training) {
  for (auto& b : branches_) b->set_training(training);
}

Shape Branches::plan(const Shape& in, const ExecConfig& cfg) {
  CHECK(!branches_.empty(), "Branches: no branch to plan");
  in_shape_ = in;
  out_shapes_.clear();
  g_out_.clear();
  for (auto& b : branches_) {
    out_shapes_.push_back(b->plan(in, cfg));
    g_out_.push_back(cfg.activation(out_shapes_.back()));
  }
  const Shape out = Concat::output_shape(out_shapes_);  // checks N, H and W agree
  out_buf_ = cfg.activation(out);
  g_in_ = cfg.activation(in);
  outs_.assign(branches_.size(), nullptr);
  g_views_.assign(branches_.size(), Tensor());
  g_ptrs_.clear();
  for (Tensor& v : g_views_) g_ptrs_.push_back(&v);
  return out;
}

const Tensor& Branches::forward(const Tensor& in) {
  CHECK(out_buf_.defined(), "Branches: forward before plan()");
  CHECK(in.dim() == 4 && in.size(0) <= in_shape_[0], "Branches: input ", in.shape().str(),
        " does not fit the plan ", in_shape_.str());
  for (size_t i = 0; i < branches_.size(); ++i) outs_[i] = &branches_[i]->forward(in);
  out_ = batch_view(out_buf_, out_buf_.shape(), in.size(0));
  concat_.forward(out_, std::span<const Tensor* const>(outs_));
  return out_;
}

void Branches::backward(Tensor& din, const Tensor& dout) {
  const int64_t n = out_.size(0);
  CHECK(dout.shape() == out_.shape(), "Branches backward: dout ", dout.shape().str(),
        " vs the last output ", out_.shape().str());
  for (size_t i = 0; i < branches_.size(); ++i)
    g_views_[i] = batch_view(g_out_[i], out_shapes_[i], n);
  concat_.backward(std::span<Tensor* const>(g_ptrs_), dout);
  Tensor g_in = batch_view(g_in_, in_shape_, n);
  for (size_t i = branches_.size(); i-- > 0;) {
    const bool first = i + 1 == branches_.size();  // the first to run writes din itself
    if (!din.defined() || first) {
      branches_[i]->backward(din, g_views_[i]);
    } else {
      branches_[i]->backward(g_in, g_views_[i]);
      accumulate(din, g_in);
    }
  }
}

}  // namespace mpicnn
