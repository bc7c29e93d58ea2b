// The Trainer's epochs: the step (forward, loss, backward with the overlapped gradient
// allreduce, update), per-step totals and logs, evaluation, checkpoints, the end of a run.
// The setup is in trainer.cpp.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/fault.h"
#include "dist/watchdog.h"
#include "layers/dropout.h"
#include "train/trainer_detail.h"

namespace mpicnn::train {

namespace {

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

struct EvalResult {
  double loss = NAN, top1 = NAN, top5 = NAN;
};

// An evaluation's sums over this rank's samples, then over the ranks.
struct EvalSums {
  using reduce_as = double;  // Comm::allreduce_sum adds it member by member
  double loss = 0, top1_hits = 0, top5_hits = 0, samples = 0;
};

// Loss, top-1 and top-5 over the whole test split: each rank evaluates its strided shard (the
// wrapped-around padding is not counted), the sums are reduced.
EvalResult evaluate(const dist::Comm& comm, Model& model, dist::SplitData& test,
                    const data::Transform& tf, const data::LoaderOptions& lopt,
                    SoftmaxCrossEntropy& xent, InputStage& stage) {
  model.set_training(false);
  auto [ds, order] = test.epoch(0, 0, /*shuffle=*/false);
  const int K = comm.size(), r = comm.rank();
  const uint64_t N = test.info().size;
  const std::unique_ptr<data::Loader> loader = make_loader(*ds, tf, lopt, stage.device());
  loader->start_epoch(0, order);
  EvalSums sums;
  data::Batch b;
  uint64_t pos = 0;  // position of the batch's first sample in this rank's shard
  while (loader->next(b)) {
    fault::point("eval");
    const Tensor& logits = model.forward(model_input(stage, tf, b));
    xent.forward(logits, b.labels.data());
    const Tensor p = to_host(xent.probabilities());
    const int64_t C = logits.shape()[1];
    for (int i = 0; i < b.size; ++i, ++pos) {
      if (uint64_t(r) + pos * uint64_t(K) >= N) continue;  // padding: a repeat of an earlier sample
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
  model.set_training(true);
  sums = comm.allreduce_sum(sums);
  return {sums.loss / sums.samples, sums.top1_hits / sums.samples, sums.top5_hits / sums.samples};
}

}  // namespace

bool Trainer::train_epoch() {
  const int64_t epoch = state_.epoch;
  saved_last_ = false;
  auto [ds, order] = train_->epoch(o_.seed, uint64_t(epoch), /*shuffle=*/true);
  // A resumed epoch skips the batches already trained on.
  const int64_t done = std::min<int64_t>(int64_t(order.size()), state_.step_in_epoch * o_.batch_size);
  order.erase(order.begin(), order.begin() + done);
  const std::unique_ptr<data::Loader> loader = make_loader(*ds, *train_tf_, lopt_, dev_.device);
  loader->start_epoch(uint64_t(epoch), std::move(order));
  sync_->reset_stats();
  progress_->begin_epoch(epoch + 1, o_.epochs, plan_.steps);
  Timer epoch_clock;
  epoch_ = {};
  data::Batch batch;
  bool stop = false;
  for (int64_t step = state_.step_in_epoch; step < plan_.steps && !stop; ++step) {
    Timer step_clock;
    opt_->set_lr(schedule_->lr(epoch, step, plan_.steps));
    dist::watchdog_set_context("training", epoch + 1, step + 1);  // for the watchdog's line
    CHECK(loader->next(batch), "rank ", comm_.rank(), ": data ran out at step ", step, " of epoch ", epoch + 1);
    const double loss = train_step(batch);
    if (hooks_.after_step) hooks_.after_step(state_);
    // One small allreduce: the global loss sum, sample count and stop votes.
    const StepTotals totals = comm_.allreduce_sum(
        StepTotals{loss * batch.size, double(batch.size), stop_requested() ? 1.0 : 0.0});
    CHECK(std::isfinite(totals.loss_sum), "epoch ", epoch + 1, " step ", step + 1,
          ": the loss is not finite (lower -lr/--learning-rate, now ", base_lr_, ")");
    log_step(step, totals, step_clock.seconds());
    if (o_.check_sync > 0 && state_.global_step % o_.check_sync == 0) check_replicas_in_sync();
    stop = totals.stop_votes > 0;
  }
  epoch_.seconds = epoch_clock.seconds();
  epoch_.loader_wait = loader->wait_seconds();
  train_seconds_ += epoch_.seconds;
  comm_wait_ += sync_->stats().wait_seconds;
  step_time_ += sync_->stats().step_seconds;
  result_.train_loss = epoch_.samples > 0 ? epoch_.loss_sum / epoch_.samples : NAN;
  return stop;
}

// One optimizer step, the same on every rank: forward, loss, backward with the gradient sums
// over ranks overlapped, update (skipped when fp16 gradients overflowed). Returns this rank's
// mean loss over its batch: the main cross-entropy plus the weighted losses of the model's
// auxiliary heads, when it has any (as torchvision's reference recipe computes and reports it).
double Trainer::train_step(const data::Batch& batch) {
  seed_dropout();
  fault::point("forward");
  const int32_t* labels = batch.labels.data();
  const Tensor& logits = model_->forward(model_input(stage_, *train_tf_, batch));
  xent_.forward(logits, labels);
  aux_losses_.forward(*model_, labels);
  Tensor dlogits = dlogits_.slice0(0, batch.size);
  model_->params().zero_grad();
  sync_->begin_step();  // buckets are summed over ranks as backward finishes them
  const real scale = grad_average_factor_ * scaler_.scale();
  xent_.backward(dlogits, labels, scale);
  model_->backward(dlogits, aux_losses_.backward(labels, scale));
  // On a GPU, read while backward runs.
  const double loss = xent_.loss() + aux_losses_.weighted_loss();
  sync_->finish();
  if (scaler_.accept(model_->params().grads(), *opt_)) opt_->step();
  advance(batch.size);
  return loss;
}

// Dropout masks from (seed, global step, this rank's first sample).
void Trainer::seed_dropout() {
  const uint64_t first_sample = uint64_t(comm_.rank()) * uint64_t(o_.batch_size);
  for (Dropout* d : dropouts_) d->set_draw(o_.seed, uint64_t(state_.global_step), first_sample);
}

void Trainer::advance(int batch_size) {
  ++state_.global_step;
  ++state_.step_in_epoch;
  state_.samples_seen += int64_t(batch_size) * comm_.size();  // every rank's batch has this size
}

void Trainer::log_step(int64_t step, const StepTotals& totals, double seconds) {
  epoch_.loss_sum += totals.loss_sum;
  epoch_.samples += totals.samples;
  images_this_process_ += int64_t(totals.samples);
  if (!comm_.root()) return;
  const double mean_loss = totals.loss_sum / totals.samples;
  const double ips = totals.samples / std::max(seconds, 1e-9);
  progress_->step(step + 1, mean_loss, ips);
  tracker_->log_step(
      {state_.global_step, state_.epoch + 1, mean_loss, opt_->lr(), ips, run_clock_.seconds()});
}

// --check-sync: every rank's weights must equal rank 0's.
void Trainer::check_replicas_in_sync() const {
  const std::vector<int> bad = comm_.ranks_out_of_sync(model_->params().values());
  if (bad.empty()) return;
  std::string list;
  for (int x : bad) list += (list.empty() ? "" : ", ") + std::to_string(x);
  throw dist::SharedError("--check-sync: after step " + std::to_string(state_.global_step) +
                          " the weights of rank(s) " + list + " differ from rank 0's");
}

// Rank 0's BatchNorm running statistics become every rank's (see trainer.h).
void Trainer::share_batchnorm_statistics() {
  if (model_->params().buffers().numel() > 0) comm_.broadcast(model_->params().buffers());
}

void Trainer::end_epoch() {
  ++state_.epoch;
  state_.step_in_epoch = 0;
  const bool last = state_.epoch == o_.epochs;
  EvalResult ev;
  if (test_ && (state_.epoch % o_.eval_every == 0 || last)) {
    dist::watchdog_set_context("evaluation after", state_.epoch, 0);
    share_batchnorm_statistics();
    ev = evaluate(comm_, *model_, *test_, *eval_tf_, lopt_, xent_, stage_);
    result_.test_loss = ev.loss;
    result_.top1 = ev.top1;
    result_.top5 = ev.top5;
  }
  if (comm_.root()) {
    const EpochTotals& e = epoch_;
    progress_->end_epoch(
        {result_.train_loss, ev.loss, ev.top1, e.seconds, e.samples / std::max(e.seconds, 1e-9), {}});
    tracker_->log_epoch({state_.epoch, result_.train_loss, ev.loss, ev.top1, ev.top5, e.seconds,
                         sync_->stats().wait_share(), e.loader_wait, int64_t(e.samples), {}});
  }
  saved_last_ = o_.checkpoint_every > 0 && (state_.epoch % o_.checkpoint_every == 0 || last);
  if (saved_last_) save("");
}

// Rank 0 writes the checkpoint with rank 0's BatchNorm running statistics, which are then also
// every rank's (see trainer.h); a failed save stops every rank.
void Trainer::save(const std::string& why) {
  if (state_.step_in_epoch > 0)  // a stop within an epoch
    dist::watchdog_set_context("checkpoint in", state_.epoch + 1, state_.step_in_epoch);
  else
    dist::watchdog_set_context("checkpoint after", state_.epoch, 0);
  share_batchnorm_statistics();
  scaler_.record(state_);
  comm_.on_root([&] {
    // Fault points "checkpoint-model", "checkpoint-optimizer", ... after each stage of the write.
    const CheckpointPaths p = save_checkpoint(run_dir_, *model_, *opt_, state_, o_.keep_checkpoints,
                                              [](std::string_view stage) {
                                                if (fault::armed()) fault::point("checkpoint-" + std::string(stage));
                                              });
    if (!why.empty()) out_ << why << ": " << p.dir << "\n";
  });
}

TrainResult Trainer::stop() {
  const int sig = comm_.allreduce_max(stop_signal());
  result_.stopped = true;
  result_.stop_signal = sig;
  const std::string why = "stop requested (signal " + std::to_string(sig) + ")";
  if (!saved_last_) save(why + ", checkpoint written");
  comm_.on_root([&] {
    if (saved_last_) out_ << why << "\n";
    tracker_->set_summary("stopped_by_signal", sig);
    tracker_->finish(RunStatus::Killed);
    out_ << "resume with: --resume " << run_dir_ << "\n";
  });
  return result();
}

TrainResult Trainer::finish() {
  if (!saved_last_) save("");
  comm_.on_root([&] {
    const double comm_share = step_time_ > 0 ? comm_wait_ / step_time_ : 0.0;
    tracker_->set_summary("comm_share", comm_share);
    tracker_->set_summary("device", dev_.description);
    if (fp16_) tracker_->set_summary("fp16_skipped_steps", scaler_.skipped_steps());
    tracker_->set_summary("resumed_from", resumed_from_);
    tracker_->finish(RunStatus::Finished);
    // The run's result, whatever --progress printed before it.
    char top1[48] = "no test evaluation";
    if (!std::isnan(result_.top1))
      std::snprintf(top1, sizeof top1, "test top-1 %.2f%%", 100 * result_.top1);
    out_ << "done: " << run_dir_ << ": " << top1 << " (" << Progress::format_eta(train_seconds_)
         << " training, "
         << int64_t(train_seconds_ > 0 ? double(images_this_process_) / train_seconds_ : 0)
         << " images/s, " << int(std::lround(100 * comm_share))
         << "% of step time waiting on gradient communication)\n";
  });
  return result();
}

TrainResult Trainer::result() {
  result_.state = state_;
  result_.train_seconds = train_seconds_;
  result_.images_per_s = train_seconds_ > 0 ? double(images_this_process_) / train_seconds_ : 0;
  result_.comm_share = step_time_ > 0 ? comm_wait_ / step_time_ : 0;
  return std::move(result_);
}

}  // namespace mpicnn::train
