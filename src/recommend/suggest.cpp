// `recommend suggest`: the candidate configurations for a model and dataset on this machine's
// kind of hardware, with the model's and data's facts computed as the trainer records them,
// predicted by the recommender and ranked by time to the target accuracy, then core-hours.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "core/check.h"
#include "core/cli.h"
#include "data/dataset.h"
#include "data/holdout.h"
#include "data/preprocess.h"
#include "io/tracking.h"
#include "models/registry.h"
#include "recommend/commands.h"
#include "recommend/recommender.h"
#include "recommend/serve.h"  // suggestions_json
#include "train/options.h"

using nlohmann::json;

namespace mpicnn::recommend {

namespace {

void check_query(const SuggestQuery& q) {
  CHECK(!q.model.empty(), "--model: not given");
  try {
    model_spec(q.model);
  } catch (const Error& e) {
    FAIL("--model: ", e.message());
  }
  CHECK(!q.data.empty(), "--data: not given (a dataset path, or synthetic / fashion-mnist)");
  CHECK(q.target_top1 < 0 || (q.target_top1 > 0 && q.target_top1 <= 1), "--target-top1: ", q.target_top1,
        " is outside (0, 1]");
  CHECK(q.max_ranks >= 1, "--max-ranks: ", q.max_ranks, " (need at least 1)");
  CHECK(q.max_nodes >= 1, "--max-nodes: ", q.max_nodes, " (need at least 1)");
  CHECK(q.max_nodes <= q.max_ranks, "--max-nodes: ", q.max_nodes, " nodes for at most ", q.max_ranks, " ranks");
  CHECK(q.max_epochs >= 1 && q.max_epochs <= 1000, "--max-epochs: ", q.max_epochs, " (need 1 to 1000)");
  CHECK(q.top >= 1, "--top: ", q.top, " (need at least 1)");
  CHECK(q.device == "cpu" || q.device == "cuda", "--device: '", q.device, "' (cpu or cuda)");
}

// The data's facts as the trainer resolves them: kind, sizes of both splits, classes, shape.
// A dataset of one split trains on all but its --val-split hold-out and evaluates on that.
RunConfig data_facts(const std::string& data) {
  data::DatasetSpec spec;
  const bool kind = data == "synthetic" || data == "fashion-mnist" || data == "mnist";
  spec.kind = kind ? data : "auto";
  spec.path = kind ? "" : data;
  RunConfig c;
  std::unique_ptr<data::Dataset> train;
  try {
    c.dataset = kind ? data : data::detect_dataset_kind(data);
    spec.kind = c.dataset;
    train = data::open_dataset(spec);
    const bool one_split = c.dataset != "synthetic" && data::holds_one_split(spec);
    if (one_split) {
      const uint64_t held = data::holdout_count(train->size(), train::TrainOptions{}.val_split);
      c.train_samples = int64_t(train->size() - held), c.test_samples = int64_t(held);
    } else {
      spec.split = "test";
      c.train_samples = int64_t(train->size());
      c.test_samples = int64_t(data::open_dataset(spec)->size());
    }
  } catch (const Error& e) {
    FAIL("--data: ", e.message());
  }
  c.data_path = spec.path;
  c.num_classes = train->num_classes();
  c.channels = train->channels(), c.image_size = train->height();  // 0 for image files: planned below
  return c;
}

// The model's input preprocessing (classify_task.cpp input_preprocess) and the facts of the model built for it.
void model_facts(RunConfig& c, const std::string& model) {
  const ModelSpec& spec = model_spec(model);
  data::PreprocessQuery pq;
  pq.kind = c.dataset;
  pq.channels = c.channels > 0 ? c.channels : 3;
  pq.data_height = pq.data_width = c.image_size;
  pq.default_size = spec.default_size;
  CHECK(c.image_size == 0 || c.image_size >= spec.min_size, "--model: ", model, " needs inputs of at least ",
        spec.min_size, "px; the data's are ", c.image_size, "px (train it with --image-size)");
  const data::InputPreprocess in = data::default_preprocess(pq);
  c.model = model;
  c.channels = in.channels, c.image_size = in.height;
  ModelOptions mo;
  mo.num_classes = c.num_classes;
  mo.in_channels = in.channels;
  std::unique_ptr<Model> m = build_model(model, mo, 0);
  m->plan(Shape{std::max(spec.min_batch, 2), in.channels, in.height, in.width}, ExecConfig{});
  c.model_macs = double(m->forward_macs());
  c.model_params = double(m->params().num_params());
}

// Ranks 1..max, nodes up to max (ranks spread evenly), threads per rank filling a node's cores
// (or 1 when the ranks already oversubscribe it), the batch sizes and loader workers below.
std::vector<RunConfig> candidates(const RunConfig& base, const SuggestQuery& q) {
  std::vector<RunConfig> out;
  for (int nodes = 1; nodes <= q.max_nodes; ++nodes)
    for (int ranks = nodes; ranks <= q.max_ranks; ++ranks) {
      const int per_node = (ranks + nodes - 1) / nodes;
      const int max_threads = std::max(1, base.cpus_per_node / per_node);
      for (int threads = 1; threads <= max_threads; threads *= 2)
        for (int batch : {32, 64, 128, 256})
          for (int workers : {0, 1, 2}) {
            RunConfig c = base;
            c.nodes = nodes, c.ranks = ranks, c.threads_per_rank = threads;
            c.batch_per_rank = batch, c.workers = workers, c.distribute_data = true;
            out.push_back(c);
          }
    }
  return out;
}

Suggestion rank_one(const Recommender& r, const RunConfig& c, const SuggestQuery& q) {
  Suggestion s;
  s.config = c;
  s.prediction = r.predict(c, q.max_epochs);
  const double spe = s.prediction.seconds_per_epoch;
  s.seconds_to_target = spe;
  if (q.target_top1 > 0) {
    for (size_t e = 0; e < s.prediction.top1.size(); ++e)
      if (s.prediction.top1[e] >= q.target_top1) {
        s.epochs_to_target = int(e) + 1;
        break;
      }
    s.seconds_to_target = spe * (s.epochs_to_target > 0 ? s.epochs_to_target : q.max_epochs);
  }
  const double units = c.device == "cuda" ? c.ranks : c.cores();
  s.core_hours = s.seconds_to_target * units / 3600;
  return s;
}

}  // namespace

std::vector<Suggestion> suggest(const Recommender& r, const SuggestQuery& q) {
  check_query(q);
  RunConfig base = data_facts(q.data);
  model_facts(base, q.model);
  base.device = q.device;
  base.cpus_per_node = std::max(1, int(std::thread::hardware_concurrency()));
  base.cpu_model = cpu_model_name();
  base.learning_rate = train::TrainOptions{}.learning_rate;
  base.optimizer = train::TrainOptions{}.optimizer;
  std::vector<Suggestion> all;
  for (const RunConfig& c : candidates(base, q)) all.push_back(rank_one(r, c, q));
  // Candidates that reach the target first (by time, then core-hours); those that never do
  // after them, the most accurate first.
  const bool target = q.target_top1 > 0;
  std::stable_sort(all.begin(), all.end(), [&](const Suggestion& a, const Suggestion& b) {
    const bool ra = !target || a.epochs_to_target > 0, rb = !target || b.epochs_to_target > 0;
    if (ra != rb) return ra;
    if (!ra) return a.prediction.top1.back() > b.prediction.top1.back();
    // Times within 2% of each other are one bucket (well inside the ensemble's spread): there
    // the cheaper candidate in core-hours comes first.
    const auto bucket = [](double s) { return std::floor(std::log(std::max(s, 1e-9)) / std::log(1.02)); };
    if (bucket(a.seconds_to_target) != bucket(b.seconds_to_target))
      return a.seconds_to_target < b.seconds_to_target;
    return a.core_hours < b.core_hours;
  });
  if (int(all.size()) > q.top) all.resize(size_t(q.top));
  return all;
}

// ---- the command --------------------------------------------------------------------------------

namespace {

constexpr const char* kSuggestUsage = R"(Usage: ./recommend suggest --model M --data D -r MODEL.json [options]

Ranks configurations for training model M on data D on this machine's kind of hardware: ranks
1..--max-ranks (spread over up to --max-nodes nodes), threads per rank filling the cores (or 1
when the ranks oversubscribe them), batch per rank 32/64/128/256, loader workers 0/1/2, data
distributed. Each is predicted by the recommender (recommend fit) and ranked by the time to
reach --target-top1 (epochs to target x seconds per epoch; candidates that never reach it
within --max-epochs come last), then by core-hours (GPU-hours with --device cuda) among
times within 2% of each other.
The model's multiply-adds and parameters are computed by building it, the data's sizes by
opening it, as ./train records them.

Options:
  --model M           a model of ./train --list-models
  --data D            a dataset path, or synthetic / fashion-mnist / mnist (no path needed)
  -r, --recommender F the model file of recommend fit
  --target-top1 A     target test top-1 in (0, 1]; without it, rank by seconds per epoch
  --max-ranks N       most MPI ranks (default 4)
  --max-nodes N       most nodes (default 1)
  --max-epochs E      most epochs a candidate may take to reach the target (default 10)
  --top K             suggestions printed (default 5)
  --device D          cpu or cuda (default cpu)
  --json              print the suggestions as JSON (the document serve answers at /api/suggest)
  -h, --help          this text

The spread (+-) is the standard deviation over the recommender's fold models; predictions
for epochs beyond those it was trained on (see its max_trained_epoch) are extrapolations.
)";

void print_table(const std::vector<Suggestion>& all, const SuggestQuery& q) {
  std::cout << std::fixed << "  #  configuration                                                        s/epoch       epochs  top-1 at epoch    "
            << (q.target_top1 > 0 ? "to target" : "  1 epoch") << (q.device == "cuda" ? "  GPU-h" : "  core-h") << "\n";
  int i = 0;
  for (const Suggestion& s : all) {
    const int shown = top1_epoch(q, s);
    std::ostringstream sec, top, ep;
    sec << std::fixed << std::setprecision(2) << s.prediction.seconds_per_epoch << " +-" << s.prediction.seconds_sd;
    top << std::fixed << std::setprecision(3) << s.prediction.top1[size_t(shown - 1)] << " +-"
        << s.prediction.top1_sd[size_t(shown - 1)];
    ep << (q.target_top1 > 0 && s.epochs_to_target == 0 ? "never" : std::to_string(shown));
    std::cout << std::setw(3) << ++i << "  " << std::left << std::setw(66) << s.config.describe() << std::right << " "
              << std::setw(14) << sec.str() << std::setw(7) << ep.str() << std::setw(16) << top.str()
              << std::setprecision(1) << std::setw(10) << s.seconds_to_target << "s" << std::setprecision(4)
              << std::setw(8) << s.core_hours << "\n";
  }
}

}  // namespace

int top1_epoch(const SuggestQuery& q, const Suggestion& s) {
  const int n = int(s.prediction.top1.size());
  if (n == 0) return 0;
  if (s.epochs_to_target > 0) return std::min(s.epochs_to_target, n);
  return q.target_top1 < 0 ? 1 : n;
}

int suggest_main(int argc, char** argv) {
  SuggestQuery q;
  std::string model_file;
  bool as_json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::cout << kSuggestUsage;
      return 0;
    }
    if (a == "--json") {
      as_json = true;
      continue;
    }
    static const char* const kTakes[] = {"--model", "-m", "--data", "-d", "-r", "--recommender", "--target-top1",
                                         "--max-ranks", "--max-nodes", "--max-epochs", "--top", "--device"};
    CHECK(std::any_of(std::begin(kTakes), std::end(kTakes), [&](const char* t) { return a == t; }), a,
          ": unknown option (see recommend suggest -h)");
    CHECK(i + 1 < argc, a, ": needs a value");
    const char* v = argv[++i];
    if (a == "--model" || a == "-m") q.model = v;
    else if (a == "--data" || a == "-d") q.data = v;
    else if (a == "-r" || a == "--recommender") model_file = v;
    else if (a == "--device") q.device = v;
    else if (a == "--max-ranks") q.max_ranks = cli::to_int32(cli::Given{v, a}, 1);
    else if (a == "--max-nodes") q.max_nodes = cli::to_int32(cli::Given{v, a}, 1);
    else if (a == "--max-epochs") q.max_epochs = cli::to_int32(cli::Given{v, a}, 1);
    else if (a == "--top") q.top = cli::to_int32(cli::Given{v, a}, 1);
    else if (a == "--target-top1")
      q.target_top1 = cli::to_double(cli::Given{v, a}, [](double x) { return x > 0 && x <= 1; }, "a top-1 in (0, 1]");
  }
  CHECK(!model_file.empty(), "-r: no recommender model given (recommend fit RUNS -o model.json makes one)");
  const Recommender r = Recommender::load(model_file);
  const std::vector<Suggestion> all = suggest(r, q);
  if (as_json) {
    std::cout << suggestions_json(q, all);  // what `serve` answers at /api/suggest
    return 0;
  }
  std::cout << "recommend suggest: " << q.model << " on " << q.data << ", up to " << q.max_ranks << " ranks on "
            << q.max_nodes << (q.max_nodes == 1 ? " node" : " nodes");
  if (q.target_top1 > 0) std::cout << ", target top-1 " << q.target_top1 << " within " << q.max_epochs << " epochs";
  std::cout << "\n";
  print_table(all, q);
  return 0;
}

}  // namespace mpicnn::recommend
