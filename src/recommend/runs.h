// Runs as `recommend` reads them (fit, suggest, report, serve): a run directory's summary.json
// (io/tracking.h, with the trainer's run facts) or a sweep point that failed (sweep.h) turned
// into a configuration and its measured results. Read-only: nothing here writes a run.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace mpicnn::recommend {

// What a run was asked to do on what hardware: the recommender's inputs. Built from a run's
// summary.json (load_runs) or for a candidate that never ran (suggest).
struct RunConfig {
  std::string model;          // --model
  std::string dataset;        // dataset kind as the trainer resolved it: synthetic, idx, csv, ...
  std::string data_path;      // --data ("" for synthetic and the packaged Fashion-MNIST)
  std::string device = "cpu"; // cpu or cuda
  int ranks = 1, nodes = 1, threads_per_rank = 1, workers = 0;
  int batch_per_rank = 0;
  bool distribute_data = true;
  int channels = 0, image_size = 0;  // model input (C, H); inputs are square here
  int num_classes = 0;
  int64_t train_samples = 0, test_samples = 0;
  double model_params = 0, model_macs = 0;  // parameters; forward multiply-adds per image
  int cpus_per_node = 0, gpus_per_node = 0;
  std::string cpu_model, gpu_model;
  double learning_rate = 0;
  std::string optimizer;

  int global_batch() const { return batch_per_rank * ranks; }
  // Cores the run occupies (ranks x threads) and devices it holds: what core-hours count.
  int cores() const { return ranks * threads_per_rank; }
  // "resnet20 b64 x2 ranks x1 thread, 2 workers, distributed, synthetic 32px"
  std::string describe() const;
};

struct EpochResult {
  int epoch = 0;
  double seconds = 0;      // wall time of the epoch's training steps
  double top1 = -1;        // test top-1 in [0, 1] after the epoch; < 0: not evaluated
  double train_loss = -1, test_loss = -1;  // < 0: not measured
  double comm_share = 0;   // fraction of step time in gradient communication
  int64_t images = 0;      // training images this epoch, all ranks
};

struct RunRecord {
  std::string dir;     // the run directory
  std::string name;    // its run_name
  std::string status;  // FINISHED, FAILED, KILLED, RUNNING (summary.json), or FAILED for a
                       // sweep point that left a failure record and no summary
  std::string error;   // a failed sweep point's reason (its exit code and last log line)
  RunConfig config;
  std::vector<EpochResult> epochs;  // in epoch order
  double images_per_s = 0, comm_share = 0;

  bool finished() const { return status == "FINISHED"; }
  // Mean seconds per epoch over the epochs done (0 when none).
  double seconds_per_epoch() const;
  // Top-1 after the last evaluated epoch (< 0 when none).
  double final_top1() const;
};

// Every run under `paths`: each path is a run directory (holding summary.json or a sweep's
// failure record) or a folder whose subfolders are (a sweep directory; searched two levels
// deep; a run directory is not searched inside). Sorted by directory. A summary.json that is not a run's, or unreadable, is an Error
// naming the file. Runs of older mpicnn versions without the run facts are read with what
// they have (the facts 0 / "").
std::vector<RunRecord> load_runs(const std::vector<std::string>& paths);
// One run directory; an Error naming it when it holds neither summary.json nor a failure record.
RunRecord load_run(const std::string& dir);

}  // namespace mpicnn::recommend
