// The classification task of ./pipeline_eval (eval/task.h): the setup from a checkpoint or
// --weights and the dataset (eval/setup.h: make_setup), the 8-bit model-sized window on the
// decoding rank, normalisation into the batch on the batching rank, the top-5 of the softmax on
// the predicting ranks, and the metrics on rank 0. The sequential baseline and every rank of
// the pipeline call exactly these, so their predictions are the same.
#include <algorithm>
#include <memory>
#include <optional>
#include <utility>

#include "core/check.h"
#include "core/device.h"
#include "data/holdout.h"
#include "data/image.h"
#include "eval/task.h"
#include "io/checkpoint.h"
#include "layers/softmax_xent.h"
#include "models/model.h"
#include "models/registry.h"

namespace mpicnn::eval {

namespace {

// --checkpoint without -d/--dataset: the data its run trained on, from its trainer.json.
EvalOptions resolve_data(const EvalOptions& o) {
  if (!wants_run_data(o)) return o;
  const CheckpointPaths ck = resolve_checkpoint(o.checkpoint);
  return with_run_data(o, read_trainer_state(ck.trainer), ck.trainer);
}

// make_setup on the data the options resolve to, its description saying which data of the run
// that is.
EvalSetup open_setup(const EvalOptions& o, std::unique_ptr<data::Dataset>& dataset) {
  const EvalOptions eo = resolve_data(o);
  EvalSetup setup = make_setup(eo, dataset);
  if (eo.run_test_data)
    setup.dataset += " (the run's --test-data)";
  else if (eo.val_held_out > 0)
    setup.dataset += " (the run's validation split: " + data::describe_holdout(eo.val_fraction, eo.val_held_out) +
                     ", never trained on)";
  else if (eo.run_data)
    setup.dataset += " (" + eo.split + " split of the data the run trained on)";
  return setup;
}

// The model (loaded with the setup's weights, eval mode, planned for the batch size) and the
// top-5 of each sample of a batch.
class Classifier : public Predictor {
 public:
  // Builds and loads (errors name the weights file), then places the model on exec's device and
  // plans it for inference as exec says.
  Classifier(const EvalSetup& setup, const ExecConfig& exec) : exec_(exec), batch_size_(setup.batch_size) {
    const Device device = exec.device;
    ModelOptions mo;
    mo.num_classes = setup.num_classes;
    mo.in_channels = setup.in_channels;
    model_ = build_model(setup.model, mo, 0);
    model_->load_state_dict(setup.weights_file);
    model_->set_training(false);
    const data::Preprocess& pre = setup.preprocess;
    shape_ = {pre.channels, pre.height, pre.width};
    model_->to(device);
    model_->plan(Shape{batch_size_, shape_[0], shape_[1], shape_[2]}, exec);
    softmax_.plan(batch_size_, setup.num_classes, device);
    input_ = InputStage(device, batch_size_, Shape{shape_[0], shape_[1], shape_[2]}, exec.activations);
  }

  void warm_up() override {
    InputBatch zeros;
    zeros.indices.assign(size_t(batch_size_), 0);
    zeros.labels.assign(size_t(batch_size_), 0);
    zeros.pixels.assign(size_t(batch_size_ * shape_[0] * shape_[1] * shape_[2]), 0.f);
    (void)predict(zeros);
  }

  Results predict(const InputBatch& batch) override {
    const int64_t n = int64_t(batch.size());
    CHECK(n > 0 && n <= batch_size_, "predict: a batch of ", n, " (planned for ", batch_size_, ")");
    CHECK(batch.pixels.size() == size_t(n * shape_[0] * shape_[1] * shape_[2]), "predict: batch holds ",
          batch.pixels.size(), " floats for ", n, " samples");
    const Tensor& logits = model_->forward(input_.put(
        Tensor::view(const_cast<float*>(batch.pixels.data()), Shape{n, shape_[0], shape_[1], shape_[2]})));
    softmax_.forward(logits, batch.labels.data());
    const Tensor probs = to_host(softmax_.probabilities());
    const int C = int(logits.shape()[1]), k = std::min(5, C);
    Results out;
    out.predictions.resize(size_t(n));
    std::vector<int> order(static_cast<size_t>(C));
    for (int64_t i = 0; i < n; ++i) {
      const float* row = probs.data() + i * C;
      for (int c = 0; c < C; ++c) order[size_t(c)] = c;
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [row](int a, int b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
      Prediction& p = out.predictions[size_t(i)];
      p.index = batch.indices[size_t(i)];
      p.label = batch.labels[size_t(i)];
      for (int j = 0; j < k; ++j) {
        p.top[j] = order[size_t(j)];
        p.prob[j] = row[order[size_t(j)]];
      }
    }
    return out;
  }

  const ExecConfig& exec() const override { return exec_; }
  std::string explain_plan() const override { return model_->explain_plan(); }

 private:
  ExecConfig exec_;
  std::unique_ptr<Model> model_;
  SoftmaxCrossEntropy softmax_;
  int64_t batch_size_;
  std::vector<int64_t> shape_;  // (C, H, W)
  InputStage input_;
};

class ClassifyTask : public EvalTask {
 public:
  // `dataset`: opened (rank 0) or null (the other ranks).
  ClassifyTask(EvalSetup setup, std::unique_ptr<data::Dataset> dataset)
      : EvalTask(std::move(setup)), dataset_(std::move(dataset)), tf_(setup_.preprocess) {}

  uint64_t open_data(const EvalOptions& o) override { return open_setup(o, dataset_).count; }
  bool has_data() const override { return dataset_ != nullptr; }

  // Computing as --device, --precision and --gpu-layout say (core/device.h), for inference.
  std::unique_ptr<Predictor> predictor(const EvalOptions& o, const dist::Comm& comm) const override {
    const ExecConfig exec =
        make_exec_config({.device = o.device, .precision = o.precision, .gpu_layout = o.gpu_layout},
                         comm.local_rank())
            .for_inference();
    return std::make_unique<Classifier>(setup_, exec);
  }

  // Sample i's bytes (Dataset::read), label and source.
  RawSample read(uint64_t i) const override {
    return {i, dataset_->label(size_t(i)), dataset_->source(size_t(i)), dataset_->read(size_t(i))};
  }

  // The sample's 8-bit model-sized window (Transform::geometry).
  Window decode(const RawSample& s) const override {
    const data::Image img =
        setup_.raw_channels > 0
            ? data::image_from_pixels(s.bytes, setup_.raw_height, setup_.raw_width, setup_.raw_channels, 0, s.source)
            : data::decode_image(s.bytes, 0, s.source);
    Window w;
    w.index = s.index;
    w.label = s.label;
    w.image = tf_.geometry(img, 0, s.index, s.source);
    return w;
  }

  // The window normalised into the batch.
  void add(InputBatch& b, Window&& w) const override {
    const size_t n = tf_.output_numel(), at = b.pixels.size();
    b.pixels.resize(at + n);
    tf_.normalize(b.pixels.data() + at, w.image);
    b.indices.push_back(w.index);
    b.labels.push_back(w.label);
  }

  void score(Report& rep, RunOutput& run, const RunOutput* baseline) const override {
    for (uint64_t i = 0; i < setup_.count; ++i) rep.sources.push_back(dataset_->source(size_t(i)));
    rep.predictions = std::move(run.results.predictions);
    rep.metrics = compute_metrics(rep.predictions, setup_.num_classes);
    if (baseline) {
      const auto same_top5 = [](const Prediction& x, const Prediction& y) { return std::equal(x.top, x.top + 5, y.top); };
      rep.mismatches_vs_sequential = count_mismatches(rep.predictions, baseline->results.predictions, same_top5);
    }
  }

 private:
  std::unique_ptr<data::Dataset> dataset_;  // the reading ranks'
  const data::Transform tf_;                // the setup's preprocessing
};

}  // namespace

std::unique_ptr<EvalTask> open_classify_task(const EvalOptions& o) {
  std::unique_ptr<data::Dataset> dataset;
  EvalSetup setup = open_setup(o, dataset);
  return std::make_unique<ClassifyTask>(std::move(setup), std::move(dataset));
}

std::unique_ptr<EvalTask> make_classify_task(const EvalSetup& setup) {
  return std::make_unique<ClassifyTask>(setup, nullptr);
}

}  // namespace mpicnn::eval
