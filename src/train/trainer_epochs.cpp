// The Trainer's epochs: the step (forward, loss, backward with the overlapped gradient
// allreduce, update), per-step totals and logs, evaluation, checkpoints, the end of a run.
// The setup is in trainer.cpp.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/fault.h"
#include "dist/watchdog.h"
#include "layers/dropout.h"
#include "train/trainer_class.h"

namespace mpicnn::train {

bool Trainer::train_epoch() {
  const int64_t epoch = state_.epoch;
  saved_last_ = false;
  task_->begin_epoch(epoch, state_.step_in_epoch * o_.batch_size * o_.accumulate);
  sync_->reset_stats();
  progress_->begin_epoch(epoch + 1, o_.epochs, epoch_steps_.steps);
  Timer epoch_clock;
  epoch_ = {};
  epoch_.part_sums.assign(loss_parts_.size(), 0.0);
  bool stop = false;
  for (int64_t step = state_.step_in_epoch; step < epoch_steps_.steps && !stop; ++step) {
    Timer step_clock;
    opt_->set_lr(schedule_->lr(epoch, step, epoch_steps_.steps));
    dist::watchdog_set_context("training", epoch + 1, step + 1);  // for the watchdog's line
    const StepTotals totals = train_step(step);
    CHECK(std::isfinite(totals.loss_sum), "epoch ", epoch + 1, " step ", step + 1,
          ": the loss is not finite (lower -lr/--learning-rate, now ", base_lr_, ")");
    log_step(step, totals, step_clock.seconds());
    if (o_.check_sync > 0 && state_.global_step % o_.check_sync == 0) check_replicas_in_sync();
    stop = totals.stop_votes > 0;
  }
  epoch_.seconds = epoch_clock.seconds();
  epoch_.loader_wait = task_->end_epoch();
  train_seconds_ += epoch_.seconds;
  comm_wait_ += sync_->stats().wait_seconds;
  step_time_ += sync_->stats().step_seconds;
  result_.train_loss = epoch_.samples > 0 ? epoch_.loss_sum / epoch_.samples : NAN;
  return stop;
}

// One optimizer step, the same on every rank: the task's forward and loss, backward with the
// gradient sums over ranks overlapped, update (skipped when fp16 gradients overflowed), the
// hook; then one small allreduce of the loss sums, the sample count and the stop votes.
// With --accumulate N the step is up to N micro-batches of --batch-size: each one's loss
// gradient is weighted by its share of the step's samples, the earlier backwards only add to
// the gradient slab, and the last one's backward sums it over ranks.
StepTotals Trainer::train_step(int64_t step) {
  const int64_t b = o_.batch_size, step_batch = b * o_.accumulate;
  const int64_t samples = std::min(step_batch, epoch_steps_.per_rank - step * step_batch);
  const int64_t micro_batches = (samples + b - 1) / b;
  model_->params().zero_grad();
  std::vector<double> sums(3 + loss_parts_.size(), 0.0);
  for (int64_t m = 0; m < micro_batches; ++m) {
    const bool last = m + 1 == micro_batches;
    fault::point("forward");
    const int batch = task_->forward(state_.global_step, int(m));
    if (last)
      sync_->begin_step();  // buckets are summed over ranks as backward finishes them
    else
      sync_->set_local(true);
    task_->backward(grad_average_factor_ * scaler_.scale() * (float(batch) / float(samples)));
    const StepLoss loss = task_->loss();  // on a GPU, read while backward runs
    if (!last) sync_->set_local(false);
    sums[0] += loss.loss * batch;
    sums[1] += batch;
    for (size_t i = 0; i < loss.parts.size(); ++i) sums[3 + i] += loss.parts[i] * batch;
  }
  CHECK(sums[1] == double(samples), "step ", state_.global_step + 1, ": the batches held ", sums[1],
        " samples, not the step's ", samples);
  sync_->finish();
  if (scaler_.accept(model_->params().grads(), *opt_)) opt_->step();
  advance(samples);
  if (hooks_.after_step) hooks_.after_step(state_);
  sums[2] = stop_requested() ? 1.0 : 0.0;
  comm_.allreduce_sum(std::span<double>(sums));
  return {sums[0], sums[1], sums[2], std::vector<double>(sums.begin() + 3, sums.end())};
}

void Trainer::advance(int64_t samples) {
  ++state_.global_step;
  ++state_.step_in_epoch;
  state_.samples_seen += samples * comm_.size();  // every rank's step has this many
}

void Trainer::log_step(int64_t step, const StepTotals& totals, double seconds) {
  epoch_.loss_sum += totals.loss_sum;
  epoch_.samples += totals.samples;
  for (size_t i = 0; i < totals.part_sums.size(); ++i) epoch_.part_sums[i] += totals.part_sums[i];
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
  Evaluation ev;
  if (task_->can_evaluate() && o_.eval_every > 0 && (state_.epoch % o_.eval_every == 0 || last)) {
    dist::watchdog_set_context("evaluation after", state_.epoch, 0);
    share_batchnorm_statistics();
    ev = task_->evaluate(last);
    result_.test_loss = ev.loss;
    result_.top1 = ev.top1;
    result_.top5 = ev.top5;
    result_.metrics = ev.metrics;
    result_.result = ev.result;
  }
  if (comm_.root()) {
    const EpochTotals& e = epoch_;
    EpochRecord record{state_.epoch, result_.train_loss, ev.loss, ev.top1, ev.top5, e.seconds,
                       sync_->stats().wait_share(), e.loader_wait, int64_t(e.samples), {}};
    std::string detail;
    for (size_t i = 0; i < loss_parts_.size(); ++i) {
      const double mean = e.part_sums[i] / std::max(e.samples, 1.0);
      record.metrics.push_back({loss_parts_[i].key, mean});
      char part[64];
      std::snprintf(part, sizeof part, "%s%s %.4f", detail.empty() ? "" : ", ", loss_parts_[i].label.c_str(), mean);
      detail += part;
    }
    record.metrics.insert(record.metrics.end(), ev.metrics.begin(), ev.metrics.end());
    progress_->end_epoch(
        {result_.train_loss, ev.loss, ev.top1, e.seconds, e.samples / std::max(e.seconds, 1e-9), detail});
    out_ << ev.lines << std::flush;
    for (const auto& [name, value] : ev.metrics) tracker_->set_summary("test_" + name, value);
    tracker_->log_epoch(record);
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
    log_checkpoint_artifacts(p);
  });
}

// Rank 0, after a checkpoint: its trainer.json replaces the MLflow run's, so the artifact always
// describes the run's latest state; the weights only from the final epoch's checkpoint (one
// copy per run, not one per epoch). A resumed run logs them again, over the old ones.
void Trainer::log_checkpoint_artifacts(const CheckpointPaths& p) {
  tracker_->log_artifact(p.trainer);
  const bool final_epoch = state_.epoch == o_.epochs && state_.step_in_epoch == 0;
  if (final_epoch && o_.log_final_weights) tracker_->log_artifact(p.model);
}

bool Trainer::stop_agreed() const { return comm_.allreduce_max(stop_signal()) > 0; }

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
    tracker_->set_summary("device", describe_device(exec_));
    if (fp16_) tracker_->set_summary("fp16_skipped_steps", scaler_.skipped_steps());
    tracker_->set_summary("resumed_from", resumed_from_);
    tracker_->finish(RunStatus::Finished);
    // The run's result, whatever --progress printed before it.
    out_ << "done: " << run_dir_ << ": " << (result_.result.empty() ? "no test evaluation" : result_.result) << " (" << Progress::format_eta(train_seconds_)
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
