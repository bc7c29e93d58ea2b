// The classification task (task.h): a split of image data per rank (dist/split_data.h), its
// preprocessing (data::default_preprocess, the recipe ./pipeline_eval defaults to), a model of
// models/registry.h with --init-weights and the fine-tuning flags, softmax cross-entropy plus the
// auxiliary heads' losses, and loss / top-1 / top-5 over the test split.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>
#include <thread>

#include "core/fault.h"
#include "data/dataset.h"
#include "data/holdout.h"
#include "data/loader.h"
#include "data/transform.h"
#include "dist/split_data.h"
#include "layers/dropout.h"
#include "layers/softmax_xent.h"
#include "models/aux_loss.h"
#include "models/registry.h"
#include "train/finetune.h"
#include "train/task.h"

namespace mpicnn::train {
namespace fs = std::filesystem;
using dist::SplitData;
using dist::SplitInfo;

namespace {

// The model's input size and the train / eval preprocessing for this split: data::default_preprocess,
// the recipe ./pipeline_eval also defaults to, with this run's choices.
data::InputPreprocess input_preprocess(const TrainOptions& o, const SplitInfo& info) {
  const ModelSpec& spec = model_spec(o.model);
  data::PreprocessQuery q;
  q.kind = info.kind;
  q.channels = o.in_channels > 0 ? o.in_channels : info.channels > 0 ? info.channels : 3;
  q.data_height = info.height;
  q.data_width = info.width;
  q.image_size = o.image_size;
  q.default_size = spec.default_size;
  q.mean = o.mean;
  q.stddev = o.std;
  q.augment = o.augment;
  q.seed = o.seed;
  if (o.image_size == 0 && info.height > 0)
    CHECK(std::min(info.height, info.width) >= spec.min_size, "--image-size: ", info.kind, "'s ",
          info.height, "x", info.width, " images are below ", spec.name, "'s smallest input ",
          spec.min_size, "; pass --image-size N (N >= ", spec.min_size, ") to resize them");
  return data::default_preprocess(q);
}

// The loader for one pass over `ds`: float batches made on the CPU for a CPU model; for a GPU
// model, 8-bit windows in page-locked memory (a quarter of the bytes to copy up, in one DMA)
// that the GPU normalises and mirrors (model_input).
std::unique_ptr<data::Loader> make_loader(const data::Dataset& ds, const data::Transform& tf,
                                          const data::LoaderOptions& lopt, Device device) {
  const Shape sample{tf.channels(), tf.height(), tf.width()};
  if (device == Device::CUDA)
    return std::make_unique<data::Loader>(
        ds, sample,
        data::ByteSamples{[&tf](uint8_t* out, const data::Image& im, uint64_t e, uint64_t id) { return tf.window(out, im, e, id); },
                          [](size_t bytes) { return gpu::backend().alloc_pinned(bytes); }},
        lopt);
  return std::make_unique<data::Loader>(
      ds, sample, [&tf](float* out, const data::Image& im, uint64_t e, uint64_t id) { tf.apply(out, im, e, id); },
      lopt);
}

// A batch of make_loader's on the model's device.
Tensor model_input(InputStage& stage, const data::Transform& tf, const data::Batch& b) {
  return b.pixels ? stage.put_u8(b.pixels, b.flips, tf.mean(), tf.stddev()) : stage.put(b.images);
}

// An evaluation's sums over this rank's samples, then over the ranks.
struct EvalSums {
  using reduce_as = double;  // Comm::allreduce_sum adds it member by member
  double loss = 0, top1_hits = 0, top5_hits = 0, samples = 0;
};

class ClassifyTask final : public TrainTask {
 public:
  ClassifyTask(const TrainOptions& o, const dist::Comm& comm)
      : o_(o), comm_(comm), xent_(real(o.label_smoothing)) {}

  void open_data(TrainerState& state) override;
  uint64_t train_size() const override { return train_->info().size; }
  std::unique_ptr<Model> build_model(const ExecConfig& exec) override;
  std::string load_init_weights() override {
    return describe(train::load_init_weights(*model_, o_.init_weights, o_.init_weights_partial),
                    model_->options().num_classes);
  }
  void record(TrainerState& state) const override {
    const data::Preprocess& eval = eval_tf_->spec();
    state.input = {data::geometry_name(eval.geometry), input_.channels, input_.height, input_.width,
                   eval.resize, eval.mean, eval.stddev, train_->info().class_names};
  }
  bool sync_during_backward() const override { return true; }

  std::string data_description() const override { return train_->info().description; }
  std::string header_lines() const override {
    return o_.test_data.empty() || !test_ ? std::string() : "\n  test data: " + test_->info().description;
  }
  nlohmann::json facts() const override {
    const SplitInfo& info = train_->info();
    return {{"workers", o_.workers},
            {"dataset_kind", info.kind},
            {"input_shape", {input_.channels, input_.height, input_.width}},
            {"num_classes", info.class_names.size()},
            {"test_samples", test_ ? test_->info().size : uint64_t(0)},
            {"model_macs", model_->forward_macs()}};
  }

  void begin_epoch(int64_t epoch, int64_t skip) override;
  int forward(int64_t global_step, int micro) override;
  void backward(float scale) override {
    const int32_t* labels = batch_.labels.data();
    Tensor dlogits = dlogits_.slice0(0, batch_.size);
    xent_.backward(dlogits, labels, scale);
    model_->backward(dlogits, aux_losses_.backward(labels, scale));
  }
  StepLoss loss() override { return {xent_.loss() + aux_losses_.weighted_loss(), {}}; }
  double end_epoch() override {
    const double wait = loader_->wait_seconds();
    loader_.reset();
    return wait;
  }
  bool can_evaluate() const override { return test_.has_value(); }
  Evaluation evaluate(bool last) override;

 private:
  void open_test_data();

  const TrainOptions& o_;
  const dist::Comm& comm_;
  Device device_ = Device::CPU;
  std::optional<SplitData> train_, test_;
  struct {
    int channels = 3, height = 0, width = 0;
  } input_;
  std::optional<data::Transform> train_tf_, eval_tf_;
  data::LoaderOptions lopt_;

  Model* model_ = nullptr;
  SoftmaxCrossEntropy xent_;
  AuxLosses aux_losses_;  // the auxiliary heads' share of the loss (Inception v3, GoogLeNet)
  InputStage stage_;
  std::vector<Dropout*> dropouts_;
  Tensor dlogits_;  // (b, classes)
  std::unique_ptr<data::Loader> loader_;  // the epoch's
  data::Batch batch_;
};

// --test-data: its test split, or all of it when it holds one split only; its classes must be the
// training data's, in the same order.
void ClassifyTask::open_test_data() {
  data::DatasetSpec ts;
  ts.kind = "auto";
  ts.path = o_.test_data;
  bool whole = false;
  comm_.on_root([&] {
    try {
      whole = data::holds_one_split(ts);
    } catch (const Error& e) {
      FAIL("--test-data: ", e.message());
    }
  });
  comm_.broadcast(whole);
  ts.split = whole ? "all" : "test";
  try {
    test_.emplace(comm_, ts, /*distribute=*/true);
  } catch (const dist::SharedError& e) {
    throw dist::SharedError("--test-data: " + e.message());
  }
  const std::vector<std::string>& a = test_->info().class_names;
  const std::vector<std::string>& b = train_->info().class_names;
  if (a != b) {  // known to every rank
    size_t k = 0;
    while (k < a.size() && k < b.size() && a[k] == b[k]) ++k;
    throw dist::SharedError(detail::concat(
        "--test-data: ", o_.test_data, " has ", a.size(), " classes, the training data ", b.size(),
        k < a.size() && k < b.size() ? detail::concat("; class ", k, " is '", a[k], "' there, '", b[k], "' here")
                                     : std::string("; the class names must be the same, in the same order")));
  }
}

// The train split and the evaluation data (unless --eval-every 0) and their preprocessing. The
// evaluation data is --test-data, else the data's test split, else (data of one split only) a
// stratified validation split of --val-split held out of it, which the training side never sees.
void ClassifyTask::open_data(TrainerState& state) {
  data::DatasetSpec spec;
  spec.kind = o_.dataset;
  spec.path = o_.data;
  spec.synthetic.seed = o_.seed;
  spec.shuffle_buffer = size_t(o_.shuffle_buffer);
  spec.split = "train";
  bool one_split = false;
  if (o_.test_data.empty() && o_.val_split > 0 && o_.dataset != "synthetic")
    comm_.on_root([&] { one_split = data::holds_one_split(spec); });
  comm_.broadcast(one_split);
  std::optional<dist::Holdout> holdout;
  if (one_split) holdout = dist::Holdout{o_.val_split, o_.seed, false};
  train_.emplace(comm_, spec, o_.distribute_data, holdout);
  if (o_.skip_bad && train_->info().kind == "shards")  // known to every rank
    throw dist::SharedError("--skip-bad: not for tar shards, whose samples stream past once (unpack them, or "
                            "repack without the bad images)");
  if (holdout) {
    state.val_fraction = o_.val_split;
    state.val_held_out = train_->info().held_out;
  }
  if (!o_.test_data.empty()) {
    if (o_.eval_every > 0) open_test_data();
  } else if (o_.eval_every > 0) {
    spec.split = "test";
    spec.kind = train_->info().kind;
    if (holdout) holdout->held_out_side = true, spec.split = "train";
    try {
      test_.emplace(comm_, spec, /*distribute=*/true, holdout);
    } catch (const dist::SharedError& e) {
      throw dist::SharedError(e.message() + " (--eval-every 0 trains without a test split; --val-split F "
                              "holds out a validation split, --test-data PATH names one)");
    }
  }
  const SplitInfo& info = train_->info();
  data::InputPreprocess input;
  comm_.on_root([&] { input = input_preprocess(o_, info); });
  input = input_preprocess(o_, info);  // the same on every rank now that rank 0 found no error
  if (test_ && test_->info().class_names.size() != info.class_names.size())  // known to every rank
    throw dist::SharedError(detail::concat("test split of ", o_.data, " has ", test_->info().class_names.size(),
                                           " classes, the train split ", info.class_names.size()));
  input_ = {input.channels, input.height, input.width};
  train_tf_.emplace(input.train);
  eval_tf_.emplace(input.eval);
  lopt_.batch_size = int(o_.batch_size);
  lopt_.workers = o_.workers;
  lopt_.skip_bad = o_.skip_bad;
  lopt_.channels = input.channels;
}

// The replica on its device with the fine-tuning flags applied (before the optimizer and
// gradient sync are made), planned for the batch, and its loss.
std::unique_ptr<Model> ClassifyTask::build_model(const ExecConfig& exec) {
  device_ = exec.device;
  ModelOptions mopt;
  mopt.num_classes = int(train_->info().class_names.size());
  mopt.in_channels = input_.channels;
  std::unique_ptr<Model> model = mpicnn::build_model(o_.model, mopt, o_.seed);
  model_ = model.get();
  comm_.on_all([&] { apply_finetune(*model_, o_); });
  const int64_t b = o_.batch_size;
  model_->to(device_);
  model_->plan(Shape{b, input_.channels, input_.height, input_.width}, exec);
  model_->set_training(true);
  xent_.plan(b, mopt.num_classes, device_);
  aux_losses_.plan(*model_, b, xent_.label_smoothing(), device_);
  stage_ =
      InputStage(device_, b, Shape{input_.channels, input_.height, input_.width}, exec.activations);
  model_->root().for_each_layer([&](Layer& l, const std::string&) {
    if (auto* d = dynamic_cast<Dropout*>(&l)) dropouts_.push_back(d);
  });
  dlogits_ = Tensor::zeros(Shape{b, mopt.num_classes}, device_);
  return model;
}

void ClassifyTask::begin_epoch(int64_t epoch, int64_t skip) {
  loader_.reset();  // before the split replaces the dataset (a stream) its workers read
  auto [ds, order] = train_->epoch(o_.seed, uint64_t(epoch), /*shuffle=*/true, uint64_t(skip));
  loader_ = make_loader(*ds, *train_tf_, lopt_, device_);
  loader_->start_epoch(uint64_t(epoch), std::move(order));
}

// Forward and loss: the main cross-entropy plus the weighted losses of the model's auxiliary
// heads, when it has any (as torchvision's reference recipe computes and reports it). Dropout
// masks are drawn from (seed, global step, the batch's first position in the step's global
// batch), so micro-batches draw what one step of their combined batch would.
int ClassifyTask::forward(int64_t global_step, int micro) {
  CHECK(loader_->next(batch_), "rank ", comm_.rank(), ": data ran out at step ", global_step + 1);
  const uint64_t first_sample =
      (uint64_t(comm_.rank()) * uint64_t(o_.accumulate) + uint64_t(micro)) * uint64_t(o_.batch_size);
  for (Dropout* d : dropouts_) d->set_draw(o_.seed, uint64_t(global_step), first_sample);
  const int32_t* labels = batch_.labels.data();
  const Tensor& logits = model_->forward(model_input(stage_, *train_tf_, batch_));
  xent_.forward(logits, labels);
  aux_losses_.forward(*model_, labels);
  return batch_.size;
}

// Loss, top-1 and top-5 over the whole test split: each rank evaluates its strided shard (the
// wrapped-around padding is not counted), the sums are reduced.
Evaluation ClassifyTask::evaluate(bool) {
  model_->set_training(false);
  auto [ds, order] = test_->epoch(0, 0, /*shuffle=*/false);
  const std::unique_ptr<data::Loader> loader = make_loader(*ds, *eval_tf_, lopt_, device_);
  loader->start_epoch(0, order);
  EvalSums sums;
  data::Batch b;
  uint64_t pos = 0;  // position of the batch's first sample in this rank's shard
  while (loader->next(b)) {
    fault::point("eval");
    const Tensor& logits = model_->forward(model_input(stage_, *eval_tf_, b));
    xent_.forward(logits, b.labels.data());
    const Tensor p = to_host(xent_.probabilities());
    const int64_t C = logits.shape()[1];
    for (int i = 0; i < b.size; ++i, ++pos) {
      if (test_->repeated(pos)) continue;  // padding: a repeat of another rank's sample
      const float* row = p.data() + int64_t(i) * C;
      const int y = b.labels[size_t(i)];
      const float py = row[y];
      int above = 0;  // classes ranked strictly before the label (ties go to the label)
      for (int64_t c = 0; c < C; ++c) above += row[c] > py || (row[c] == py && c < y);
      sums.loss += -std::log(std::max(double(py), 1e-45));
      sums.top1_hits += above < 1;
      sums.top5_hits += above < 5;
      sums.samples += 1;
    }
  }
  model_->set_training(true);
  sums = comm_.allreduce_sum(sums);
  Evaluation ev;
  ev.loss = sums.loss / sums.samples;
  ev.top1 = sums.top1_hits / sums.samples;
  ev.top5 = sums.top5_hits / sums.samples;
  char text[48];
  std::snprintf(text, sizeof text, "test top-1 %.2f%%", 100 * ev.top1);
  ev.result = text;
  return ev;
}

}  // namespace

std::unique_ptr<TrainTask> make_classify_task(const TrainOptions& o, const dist::Comm& comm) {
  return std::make_unique<ClassifyTask>(o, comm);
}

}  // namespace mpicnn::train
