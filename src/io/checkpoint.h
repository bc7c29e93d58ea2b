// Checkpoints of a run directory: RUN/checkpoints/<name>/{model,optimizer}.safetensors and
// trainer.json, published atomically, a RUN/latest symlink, keep-last-N pruning, validated
// loading; plus the stop flag that SIGTERM / SIGUSR1 set. Not the trainer loop (which decides
// when to save) and not MPI: only rank 0 saves, and ranks agree on stopping elsewhere.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "io/stateful.h"

namespace mpicnn {


// Bumped when trainer.json or the file set changes meaning; load refuses other versions.
// Version 2 adds trainer.json's own CRC-32 (field "crc32", over the rest of the file) and
// requires it; version 1 checkpoints (no such field) still load. Version 3 adds the built
// model's options ("model_options", a detector's) and lets the input record leave the input
// size to the model (0 x 0: a detector resizes its images itself).
inline constexpr int kCheckpointFormatVersion = 3;
inline constexpr int kOldestCheckpointFormatVersion = 1;

// How the model's inputs are prepared for evaluation (the trainer's eval preprocessing and the
// class names), so that an evaluation (./pipeline_eval --checkpoint) reproduces them from the
// checkpoint alone, whatever data it is given. `geometry` is data::geometry_name(); empty when
// the checkpoint does not record it.
struct InputRecord {
  std::string geometry;
  int channels = 0, height = 0, width = 0, resize = 0;  // height = width = 0: the model's own
  std::vector<float> mean, stddev;
  std::vector<std::string> class_names;
};

// Everything beyond the tensors that a resume needs to continue exactly where it stopped.
struct TrainerState {
  int64_t epoch = 0;          // completed epochs
  int64_t step_in_epoch = 0;  // steps done in epoch `epoch` (0 at an epoch boundary)
  int64_t global_step = 0;    // optimizer steps since the run began
  int64_t samples_seen = 0;   // training samples consumed, over all ranks
  uint64_t seed = 0;          // the run's seed: every draw is f(seed, stream, index)
  // Named counters of the stateless RNG streams the trainer advances (e.g. "shuffle"), so a
  // resume draws what an unbroken run would have drawn.
  std::map<std::string, uint64_t> rng_counters;
  int ranks = 1;
  std::map<std::string, std::string> config;  // the full run configuration, as strings
  // The dataset's absolute path (optional; older checkpoints lack it, and their config's "data"
  // is the path as ./train was given it, perhaps relative to the folder it ran in).
  std::string data_path;
  // The evaluation data (optional): the automatic validation split held out of data without a
  // test split (data/holdout.h: `val_fraction` of each class, drawn from `seed`; val_held_out
  // samples, 0 when none was held out), or --test-data's absolute path.
  double val_fraction = 0;
  uint64_t val_held_out = 0;
  std::string test_data_path;
  std::string run_started;  // ISO 8601 UTC, when the run (not this process) started
  InputRecord input;        // optional (older checkpoints lack it)
  // The options the model was built with beyond its name and class count, as the model's
  // family records them (detect::options_record); null when the name says it all (classifiers)
  // and in checkpoints before version 3.
  nlohmann::json model_options;
  // How the run's steps executed (core/device.h's exec_json: device, precision, layout, fusion,
  // kernels): a record for whoever reads the checkpoint; a resume plans from its own flags and
  // machine. Null in checkpoints that lack it.
  nlohmann::json execution;
  // fp16 dynamic loss scaling (optional; absent, loss_scale = 0, outside fp16 runs): the
  // scale, the clean steps since it last changed and the steps skipped so far.
  double loss_scale = 0;
  int64_t scale_clean_steps = 0, scale_skipped_steps = 0;
  // Filled by save_checkpoint / read back by load; ignored on input.
  std::string saved_at;     // ISO 8601 UTC
  int64_t saved_unix_ms = 0;
  std::string model;        // model name
  std::string optimizer;    // optimizer type ("sgd", "adamw")
};

struct CheckpointPaths {
  std::string dir;        // RUN/checkpoints/epoch-0003 (as resolved, symlinks followed)
  std::string run_dir;    // RUN, or "" when `dir` is not inside a RUN/checkpoints folder
  std::string model;      // dir/model.safetensors
  std::string optimizer;  // dir/optimizer.safetensors
  std::string trainer;    // dir/trainer.json
};

// "epoch-0003" at an epoch boundary, "step-00001234" (global step) in the middle of one.
std::string checkpoint_name(const TrainerState& state);

// Test hook: called with a stage name ("model", "optimizer", "trainer", "published",
// "latest") after that stage completes; throwing from it simulates a crash there.
using CheckpointHook = std::function<void(std::string_view stage)>;

// Writes a complete checkpoint into a temporary directory, reads its tensor files back
// (verifying their CRC-32s), renames it into place, then repoints RUN/latest; only after that
// removes the oldest checkpoints beyond `keep_last` (0 keeps all). A failure at any point
// (a full disk, a file size limit) removes the temporary directory and leaves `latest` and
// every existing checkpoint as they were; its error is one line naming the checkpoint, the
// file and the cause, and where `latest` still points. Saving a name that exists (after
// resuming from an earlier one) swaps the new directory in atomically. Returns the new
// checkpoint's paths.
CheckpointPaths save_checkpoint(const std::string& run_dir, const Stateful& model,
                                const Stateful& optimizer, const TrainerState& state,
                                int keep_last, const CheckpointHook& hook = {});

// `arg` is a run directory (uses RUN/latest), RUN/latest, or a checkpoint directory.
// Errors name the path when nothing there is a checkpoint.
CheckpointPaths resolve_checkpoint(const std::string& arg);

// Validates the whole checkpoint (format version, trainer.json's own CRC-32, every tensor's
// CRC-32 in the tensor files, file sizes and CRC-32s recorded in trainer.json, model name,
// every tensor name and shape, optimizer type and options) before changing anything, then
// restores model and optimizer. Errors name the offending file (and tensor).
TrainerState load_checkpoint(const std::string& arg, Stateful& model, Stateful& optimizer);
// trainer.json alone (validated, with the version and CRC checks): for tools that only inspect.
TrainerState read_trainer_state(const std::string& trainer_json_path);

// The stop flag. install_stop_signals() routes SIGTERM and SIGUSR1 (a scheduler's walltime
// warning: Slurm --signal=USR1@T, PBS qdel / walltime sends SIGTERM) to a handler that only
// stores the signal number in a lock-free atomic, which is async-signal-safe. The trainer polls
// stop_requested() between steps, saves a checkpoint and exits. restore_stop_signals() puts
// back the previous handlers (tests).
void install_stop_signals();
void restore_stop_signals();
bool stop_requested();
int stop_signal();  // the signal that requested the stop, 0 when none
void clear_stop_request();

}  // namespace mpicnn
