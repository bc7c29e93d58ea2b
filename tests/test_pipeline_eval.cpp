// ./pipeline_eval as users run it, under mpiexec with 1..6 ranks: the staged run predicts exactly
// what the sequential baseline predicts, its accuracy is the one ./train measured on the same
// checkpoint and data, a corrupt image stops the job with one line naming it (or is skipped with
// --skip-bad), and weights exported from torchvision give torchvision's predictions.
// The stage layout, setup and checkpoint record are unit-tested here too.
#include <sched.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "data/dataset.h"
#include "data/holdout.h"
#include "eval/evaluate.h"
#include "eval/pipeline.h"
#include "eval/setup.h"
#include "recipes.h"
#include "io/safetensors.h"
#include "testing.h"

using namespace mpicnn;
using mpicnn::testing::run_mpi;
using mpicnn::testing::run_program;
using mpicnn::testing::run_python;
using mpicnn::testing::shell_quote;
using mpicnn::testing::TempDir;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

json read_json(const std::string& path) {
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.is_open(), "cannot read ", path);
  return json::parse(in);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.is_open(), "cannot read ", path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A copy of the image folder `from` at `to`, to spoil: its image files, sorted.
std::vector<fs::path> copy_images(const std::string& from, const std::string& to) {
  fs::copy(from, to, fs::copy_options::recursive);
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(to))
    if (e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

// Fashion-MNIST as PNG folders (200 train, 200 test images) and a LeNet trained on them for one
// epoch at 32x32, so evaluation decodes PNGs and resizes them. Made once per test process.
struct Fixture {
  TempDir dir;
  std::string png = dir / "png", run = dir / "run";
  Fixture() {
    const auto exported = run_program("export_images", {"-o", png, "--limit", "200"});
    REQUIRE_MESSAGE(exported.rc == 0, exported.output);
    const auto trained = run_program("train", {"-d", png, "--model", "lenet", "--epochs", "1", "--image-size", "32",
                                               "--batch-size", "16", "--threads", "1", "--workers", "1",
                                               "--progress", "none", "-s", run});
    REQUIRE_MESSAGE(trained.rc == 0, trained.output);
  }
};
Fixture& fixture() {
  static Fixture f;
  return f;
}

std::vector<std::string> eval_args(const std::string& out, std::vector<std::string> more = {}) {
  std::vector<std::string> a = {"--checkpoint", fixture().run, "-d", fixture().png, "--threads", "1",
                                "--batch-size", "7", "-o", out};
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

}  // namespace

TEST_CASE("pipeline eval: stage layouts for 1 to 6 ranks") {
  using namespace eval;
  CHECK(layout_for(1).describe() == "rank 0: all stages");
  CHECK(layout_for(2).describe() == "rank 0: read+decode+resize+normalize+batch | rank 1: predict");
  CHECK(layout_for(3).describe() == "rank 0: read | rank 1: decode+resize+normalize+batch | rank 2: predict");
  CHECK(layout_for(4).describe() == "rank 0: read | rank 1: decode+resize | rank 2: normalize+batch | rank 3: predict");
  CHECK(layout_for(6).describe() ==
        "rank 0: read | rank 1: decode+resize | rank 2: normalize+batch | ranks 3-5: predict");
  for (int K = 1; K <= 6; ++K) {
    const Layout l = layout_for(K);
    // Every stage runs somewhere, each rank's range is contiguous, and data flows forward.
    for (int s = kRead; s <= kPredict; ++s) CHECK_FALSE(l.ranks_of(s).empty());
    for (int r = 0; r < K; ++r) {
      CHECK(l.first(r) <= l.last(r));
      if (r > 0) CHECK(l.first(r) >= l.last(r - 1));
    }
    CHECK(l.rank_of(kRead) == 0);
    CHECK(int(l.ranks_of(kPredict).size()) == std::max(1, K - 3));
  }
}

TEST_CASE("pipeline eval: --split auto and the setup's JSON round trip") {
  TempDir d;
  fs::create_directories(d / "one/cat");
  fs::create_directories(d / "split/test/cat");
  std::ofstream(d / "plain.csv") << "path,label\na.png,0\n";
  std::ofstream(d / "split.csv") << "path, label ,split\na.png,0,test\n";
  CHECK(eval::auto_split("imagefolder", d / "one") == "all");
  CHECK(eval::auto_split("imagefolder", d / "split") == "test");
  CHECK(eval::auto_split("csv", d / "plain.csv") == "all");
  CHECK(eval::auto_split("csv", d / "split.csv") == "test");
  CHECK(eval::auto_split("fashion-mnist", "") == "test");

  eval::EvalSetup p;
  p.model = "resnet18";
  p.num_classes = 7;
  p.in_channels = 1;
  p.weights_file = "w.safetensors";
  p.weights = "runs/x";
  p.preprocess = testing::imagenet_eval(96, 110, 1);
  p.preprocess.mean = {0.5f};
  p.preprocess.stddev = {0.25f};
  p.class_names = {"a", "b", "c", "d", "e", "f", "g"};
  p.dataset = "d: 9 samples";
  p.count = 9;
  p.raw_channels = 1, p.raw_height = 28, p.raw_width = 29;
  p.batch_size = 5;
  const eval::EvalSetup q = eval::setup_from_json(eval::setup_to_json(p));
  CHECK(eval::setup_to_json(q) == eval::setup_to_json(p));
  CHECK(q.preprocess.geometry == data::Geometry::ResizeCenterCrop);
  CHECK(q.preprocess.resize == 110);
  CHECK(q.raw_width == 29);
  CHECK(q.class_names == p.class_names);
}

TEST_CASE("pipeline eval: predictions identical to --sequential on 1..6 ranks, accuracy as ./train measured") {
  Fixture& f = fixture();
  const auto seq = run_program("pipeline_eval", eval_args(f.dir / "seq", {"--sequential"}));
  REQUIRE_MESSAGE(seq.rc == 0, seq.output);
  const std::string want = read_text(f.dir / "seq/predictions.csv");
  const json seq_report = read_json(f.dir / "seq/report.json");
  CHECK(seq_report["mode"] == "sequential");
  CHECK(seq_report["evaluated"] == 200);
  CHECK(std::count(want.begin(), want.end(), '\n') == 201);  // header + one row per test image
  // ./train evaluated the same checkpoint on the same test images with the same preprocessing.
  const json summary = read_json(f.run + "/summary.json");
  CHECK(seq_report["top1"].get<double>() == doctest::Approx(summary["test_top1"].get<double>()).epsilon(1e-9));

  for (int K = 1; K <= 6; ++K) {
    CAPTURE(K);
    const std::string out = f.dir / std::string("k").append(std::to_string(K));
    const auto r = run_mpi(K, "pipeline_eval", eval_args(out));
    REQUIRE_MESSAGE(r.rc == 0, r.output);
    CHECK(read_text(out + "/predictions.csv") == want);
    const json rep = read_json(out + "/report.json");
    CHECK(rep["mode"] == "pipeline");
    CHECK(rep["ranks"] == K);
    CHECK(rep["top1"] == seq_report["top1"]);
    CHECK(rep["confusion"] == seq_report["confusion"]);
    // Every rank reported the stages it ran: 4 stages, plus one line per extra predictor.
    CHECK(rep["stages"].size() == size_t(4 + std::max(0, K - 4)));
    CHECK(r.output.find("top-1") != std::string::npos);
  }
  // Tight credits (one sample between stages, one batch per predictor) still finish, in order.
  const std::string tight = f.dir / "tight";
  const auto r = run_mpi(6, "pipeline_eval", eval_args(tight, {"--credits", "1", "--batch-credits", "1", "--compare"}));
  REQUIRE_MESSAGE(r.rc == 0, r.output);
  CHECK(read_text(tight + "/predictions.csv") == want);
  const json rep = read_json(tight + "/report.json");
  CHECK(rep["mismatches_vs_sequential"] == 0);
  CHECK(rep["speedup"].is_number());
  CHECK(r.output.find("predictions identical to sequential") != std::string::npos);
}

TEST_CASE("pipeline eval: predictions identical to --sequential for every stage-to-rank assignment of 1..6 ranks") {
  // Every composition of K <= 5 into read, decode, batch, predict counts (each stage on two
  // ranks at K = 5), for K < 4 every folded layout, and at K = 6 a stage on three ranks and two
  // stages on two each (the other eight compositions repeat those); a few folded ones for larger
  // K too (several ranks running all stages, or the same group of stages). 40 samples in blocks
  // of 7: the last block is short, several readers, decoders and batchers each get more than
  // one block.
  Fixture& f = fixture();
  const auto seq = run_program("pipeline_eval", eval_args(f.dir / "few-seq", {"--limit", "40", "--sequential"}));
  REQUIRE_MESSAGE(seq.rc == 0, seq.output);
  const std::string want = read_text(f.dir / "few-seq/predictions.csv");
  REQUIRE(std::count(want.begin(), want.end(), '\n') == 41);
  std::vector<eval::Layout> layouts;
  for (int K = 1; K <= 5; ++K)
    for (const eval::Layout& l : eval::all_layouts(K, K < 4)) layouts.push_back(l);
  CHECK(layouts.size() == 1 + 4 + 10 + 1 + 4);
  for (const char* more : {"read=1,decode=3,batch=1,predict=1", "read=2,decode=1,batch=1,predict=2",
                           "read+decode+batch+predict=4", "read=2,decode+batch+predict=3",
                           "read+decode=3,batch=1,predict=2"})
    layouts.push_back(eval::parse_stages(more));
  for (const eval::Layout& l : layouts) {
    const std::string spec = l.spec();
    CAPTURE(spec);
    const std::string out = f.dir / ("layout-" + spec);
    const auto r = run_mpi(l.ranks, "pipeline_eval", eval_args(out, {"--limit", "40", "--stages", spec}));
    REQUIRE_MESSAGE(r.rc == 0, r.output);
    CHECK(read_text(out + "/predictions.csv") == want);
    const json rep = read_json(out + "/report.json");
    CHECK(rep["stage_ranks"] == spec);
    CHECK(rep["layout"] == l.describe());
    CHECK(r.output.find("(--stages " + spec + ")") != std::string::npos);
    // One line per stage each rank ran.
    size_t lines = 0;
    for (const eval::StageGroup& g : l.groups) lines += size_t(g.count * (g.hi - g.lo + 1));
    CHECK(rep["stages"].size() == lines);
  }
  // --skip-bad with several readers, decoders and batchers: the skipped sample leaves a gap in
  // its block, and the rest is predicted as the sequential run predicts it.
  TempDir d;
  const std::string bad = d / "bad";
  const std::vector<fs::path> files = copy_images(f.png + "/test", bad);
  for (size_t i : {size_t(3), files.size() / 2}) std::ofstream(files[i], std::ios::binary | std::ios::trunc) << "not a png";
  auto bad_args = [&](const std::string& out, std::vector<std::string> more) {
    std::vector<std::string> a = {"--checkpoint", f.run, "-d", bad, "--threads", "1", "--batch-size", "7",
                                  "--skip-bad", "-o", out};
    a.insert(a.end(), more.begin(), more.end());
    return a;
  };
  const auto bs = run_program("pipeline_eval", bad_args(d / "bseq", {"--sequential"}));
  REQUIRE_MESSAGE(bs.rc == 0, bs.output);
  const std::string bwant = read_text(d / "bseq/predictions.csv");
  CHECK(std::count(bwant.begin(), bwant.end(), '\n') == 199);
  for (const char* spec : {"read=2,decode=2,batch=2,predict=1", "read+decode+batch+predict=3"}) {
    CAPTURE(spec);
    const auto r = run_mpi(eval::parse_stages(spec).ranks, "pipeline_eval", bad_args(d / "bpipe", {"--stages", spec}));
    REQUIRE_MESSAGE(r.rc == 0, r.output);
    CHECK(read_text(d / "bpipe/predictions.csv") == bwant);
    CHECK(read_json(d / "bpipe/report.json")["skipped"].size() == 2);
  }
  // A layout that does not fit the job: one line naming --stages, on every rank alike.
  const auto wrong = run_mpi(3, "pipeline_eval", eval_args(d / "wrong", {"--stages", "read=1,decode=1,batch=1,predict=1"}));
  CHECK(wrong.rc != 0);
  CHECK_MESSAGE(wrong.output.starts_with("pipeline_eval: --stages read=1,decode=1,batch=1,predict=1: uses 4 ranks, "
                                         "the job has 3"), wrong.output);
  CHECK_MESSAGE(std::count(wrong.output.begin(), wrong.output.end(), '\n') == 1, wrong.output);
}

TEST_CASE("pipeline eval: NodeWideAffinity lets every thread onto the given CPUs, then restores the binding") {
  cpu_set_t all;
  REQUIRE(sched_getaffinity(0, sizeof all, &all) == 0);
  std::vector<int> ids;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &all)) ids.push_back(c);
  if (ids.size() < 2) return;  // nothing to widen to on one CPU
  cpu_set_t one;  // bound to one CPU, as mpiexec binds a rank
  CPU_ZERO(&one);
  CPU_SET(ids[0], &one);
  REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0);
  {
    const eval::NodeWideAffinity wide(ids);
    CHECK(eval::NodeWideAffinity::cpus() == int(ids.size()));
  }
  CHECK(eval::NodeWideAffinity::cpus() == 1);
  REQUIRE(sched_setaffinity(0, sizeof all, &all) == 0);
}

TEST_CASE("pipeline eval: --compare's baseline runs on the CPUs of the job's ranks, one thread each") {
  // Two ranks: mpiexec binds each to its own core, so rank 0's own binding is one core.
  Fixture& f = fixture();
  const std::string out = f.dir / "fair";
  const auto r = run_mpi(2, "pipeline_eval", {"--checkpoint", f.run, "-d", f.png, "--limit", "40", "--batch-size", "7",
                                              "--compare", "-o", out});
  REQUIRE_MESSAGE(r.rc == 0, r.output);
  const json rep = read_json(out + "/report.json");
  const int cpus = rep["node_cpus"].get<int>();
  CHECK(rep["node_ranks"] == 2);
  const json& b = rep["baseline"];
  CHECK(b["threads"] == cpus);
  CHECK(b["cpus"] == cpus);
  CHECK(b["node_cpus"] == cpus);
  CHECK(b["own_cpus"].get<int>() <= cpus);
  const std::string line = "  sequential baseline: rank 0 alone with " + std::to_string(cpus) +
                           (cpus > 1 ? " threads" : " thread") + " on the ";
  CHECK(r.output.find(line) != std::string::npos);
  CHECK(rep["mismatches_vs_sequential"] == 0);
}

TEST_CASE("pipeline eval: --stages auto measures the stages, picks a layout, predicts what --sequential predicts") {
  Fixture& f = fixture();
  const auto seq = run_program("pipeline_eval", eval_args(f.dir / "auto-seq", {"--limit", "40", "--sequential"}));
  REQUIRE_MESSAGE(seq.rc == 0, seq.output);
  const std::string want = read_text(f.dir / "auto-seq/predictions.csv");
  for (int K : {1, 3, 5}) {
    CAPTURE(K);
    const std::string out = f.dir / ("auto" + std::to_string(K));
    const auto r = run_mpi(K, "pipeline_eval", eval_args(out, {"--limit", "40", "--stages", "auto"}));
    REQUIRE_MESSAGE(r.rc == 0, r.output);
    CHECK(read_text(out + "/predictions.csv") == want);
    const json rep = read_json(out + "/report.json");
    CHECK(eval::parse_stages(rep["stage_ranks"].get<std::string>(), K).ranks == K);
    const json& cal = rep["calibration"];
    CHECK(cal["images"] == 16);  // 2 batches of 7, at least 16
    for (const char* stage : {"read", "decode", "batch", "predict"}) CHECK_MESSAGE(cal["rates"].contains(stage), stage);
    CHECK(cal["predicted_images_per_s"].get<double>() > 0);
    const std::string bound = cal["bottleneck"];  // a group ("predict on 2 ranks") or the CPUs
    CHECK_MESSAGE((bound.find(" on ") != std::string::npos || bound.find(" CPUs, shared by every stage") != std::string::npos), bound);
    CHECK(r.output.find("  calibration (16 images, rank 0, 1 thread), images/s per rank: read ") != std::string::npos);
    CHECK(r.output.find("  bottleneck ") != std::string::npos);
  }
}

TEST_CASE("pipeline eval: --precision bf16 on the CPU: bf16 GEMMs, the same predictions on every layout") {
  Fixture& f = fixture();
  const auto fp32 = run_program("pipeline_eval", eval_args(f.dir / "fp32-seq", {"--limit", "40", "--sequential"}));
  const auto bf16 = run_program("pipeline_eval", eval_args(f.dir / "bf16-seq", {"--limit", "40", "--sequential", "--precision", "bf16",
                                                                              "--explain-plan"}));
  REQUIRE_MESSAGE(fp32.rc == 0, fp32.output);
  REQUIRE_MESSAGE(bf16.rc == 0, bf16.output);
  const json a = read_json(f.dir / "fp32-seq/report.json"), b = read_json(f.dir / "bf16-seq/report.json");
  CHECK(a["device"] == "cpu");
  CHECK(b["device"].get<std::string>().rfind("cpu, bf16 GEMMs", 0) == 0);
  CHECK(bf16.output.find("per predictor, cpu, bf16 GEMMs") != std::string::npos);
  // The predicting rank's execution config (an inference plan), and its plan per layer when asked.
  CHECK(b["execution"].get<std::string>().rfind("cpu bf16, inference, ", 0) == 0);
  CHECK(bf16.output.find("  plan, per layer:\n    ") != std::string::npos);
  CHECK(bf16.output.find("  Conv2d  ") != std::string::npos);
  CHECK(fp32.output.find("plan, per layer") == std::string::npos);
  // bf16 ran: the scores moved (inputs and weights rounded to 8 bits of mantissa), the
  // predictions barely (accuracy within 5 points on 40 images).
  const std::string want = read_text(f.dir / "bf16-seq/predictions.csv");
  CHECK(want != read_text(f.dir / "fp32-seq/predictions.csv"));
  CHECK(std::abs(a["top1"].get<double>() - b["top1"].get<double>()) <= 0.05 + 1e-9);
  // The same bf16 predictions on a pipeline of 3 ranks.
  const auto r = run_mpi(3, "pipeline_eval", eval_args(f.dir / "bf16-3", {"--limit", "40", "--precision", "bf16"}));
  REQUIRE_MESSAGE(r.rc == 0, r.output);
  CHECK(read_text(f.dir / "bf16-3/predictions.csv") == want);
  // GPU precisions without a GPU: one line naming the flag.
  const auto fp16 = run_program("pipeline_eval", eval_args(f.dir / "fp16", {"--device", "cpu", "--precision", "fp16"}));
  CHECK(fp16.rc != 0);
  CHECK(fp16.output.find("--precision fp16: the CPU computes in fp32 or bf16") != std::string::npos);
}

TEST_CASE("pipeline eval: --checkpoint alone evaluates the test split of the data the run trained on") {
  Fixture& f = fixture();
  TempDir d;
  const auto r = run_mpi(2, "pipeline_eval", {"--checkpoint", f.run, "--threads", "1", "-o", d / "own"});
  REQUIRE_MESSAGE(r.rc == 0, r.output);
  // The header names the dataset (the run's PNG folder, its test/ half) and the split.
  const std::string data_line = "  data: " + f.png + "/test: 200 samples, 10 classes";
  CHECK_MESSAGE(r.output.find(data_line) != std::string::npos, r.output);
  CHECK_MESSAGE(r.output.find("(test split of the data the run trained on)") != std::string::npos, r.output);
  const json rep = read_json(d / "own/report.json");
  CHECK(rep["evaluated"] == 200);
  const json summary = read_json(f.run + "/summary.json");
  CHECK(rep["top1"].get<double>() == doctest::Approx(summary["test_top1"].get<double>()).epsilon(1e-9));

  // A run whose data is gone says so in one line naming the flag to pass.
  const std::string ck = d / "ck";
  fs::copy(fs::canonical(f.run + "/latest"), ck, fs::copy_options::recursive);
  json st = read_json(ck + "/trainer.json");
  st["data_path"] = d / "moved";
  st.erase("crc32");  // re-sealed as save_checkpoint seals it: its CRC-32 over the rest
  const std::string body = st.dump();
  st["crc32"] = crc32_hex(crc32_of({reinterpret_cast<const uint8_t*>(body.data()), body.size()}));
  std::ofstream(ck + "/trainer.json", std::ios::trunc) << st.dump();
  const auto gone = run_mpi(2, "pipeline_eval", {"--checkpoint", ck});
  CHECK(gone.rc != 0);
  CHECK_MESSAGE(std::count(gone.output.begin(), gone.output.end(), '\n') == 1, gone.output);
  CHECK_MESSAGE(gone.output.find("pipeline_eval: --checkpoint: the run trained on " + d / "moved" +
                                 ", which is not there; pass -d/--data PATH") != std::string::npos,
                gone.output);
}

TEST_CASE("pipeline eval: a run with a validation split is evaluated on exactly its held-out images") {
  Fixture& f = fixture();
  TempDir d;
  // png/train is a folder of class subfolders only: ./train holds out 10% of each class.
  const std::string photos = f.png + "/train", run = d / "run";
  const std::vector<std::string> common = {"--model", "lenet", "--image-size", "32", "--batch-size", "16",
                                           "--threads", "1", "--workers", "1", "--progress", "none", "--seed", "3"};
  std::vector<std::string> args = {"-d", photos, "--epochs", "1", "-s", run};
  args.insert(args.end(), common.begin(), common.end());
  const auto trained = run_program("train", args);
  REQUIRE_MESSAGE(trained.rc == 0, trained.output);
  data::DatasetSpec spec;
  spec.path = photos;
  const auto whole = data::open_dataset(spec);
  const std::vector<uint64_t> held = data::holdout_indices(*whole, 0.1, 3);
  REQUIRE(!held.empty());
  const std::string note = "validation: 10% held out, " + std::to_string(held.size()) + " images, stratified";
  CHECK_MESSAGE(trained.output.find("  " + note + "\n") != std::string::npos, trained.output);
  std::multiset<std::string> want;
  for (const uint64_t i : held) want.insert(whole->source(i));

  for (int K = 1; K <= 3; ++K) {
    CAPTURE(K);
    const std::string out = d / ("eval" + std::to_string(K));
    const auto r = run_mpi(K, "pipeline_eval", {"--checkpoint", run, "--threads", "1", "-o", out});
    REQUIRE_MESSAGE(r.rc == 0, r.output);
    CHECK_MESSAGE(r.output.find("  data: " + photos + ": " + std::to_string(held.size()) +
                                " samples, 10 classes (the run's validation split: 10% held out, " +
                                std::to_string(held.size()) + " images, stratified, never trained on)") !=
                      std::string::npos,
                  r.output);
    const json rep = read_json(out + "/report.json");
    CHECK(rep["evaluated"] == held.size());
    // Exactly the held-out files: none the run trained on.
    std::istringstream csv(read_text(out + "/predictions.csv"));
    std::string line;
    std::getline(csv, line);  // header
    std::multiset<std::string> got;
    while (std::getline(csv, line)) {
      const size_t a = line.find(','), b = line.find(',', a + 1);
      got.insert(line.substr(a + 1, b - a - 1));
    }
    CHECK(got == want);
    const json summary = read_json(run + "/summary.json");  // ./train measured the same images
    CHECK(rep["top1"].get<double>() == doctest::Approx(summary["test_top1"].get<double>()).epsilon(1e-9));
  }

  // A resume with another --val-split is refused in one line.
  testing::expect_cli_error("train", {"--resume", run, "--epochs", "2", "--val-split", "0.2"},
                            "--val-split: 0.2 differs from the run's 0.1");
  // --test-data with other classes: one line naming the flag. With the same classes its run
  // is evaluated on that data.
  std::vector<std::string> bad = {"-d", photos, "--epochs", "1", "-s", d / "bad", "--test-data", d / "nowhere"};
  bad.insert(bad.end(), common.begin(), common.end());
  testing::expect_cli_error("train", bad, "--test-data: ");
  fs::create_directories(d / "few/cat");
  fs::copy_file(whole->source(0), d / "few/cat/a.png");
  bad[7] = d / "few";  // the --test-data value
  testing::expect_cli_error("train", bad, "--test-data: " + (d / "few") + " has 1 classes, the training data 10");
  std::vector<std::string> good = {"-d", photos, "--epochs", "1", "-s", d / "good", "--test-data", f.png};
  good.insert(good.end(), common.begin(), common.end());
  const auto g = run_program("train", good);
  REQUIRE_MESSAGE(g.rc == 0, g.output);
  CHECK(g.output.find("validation:") == std::string::npos);  // nothing held out
  const auto e = run_mpi(2, "pipeline_eval", {"--checkpoint", d / "good", "--threads", "1"});
  REQUIRE_MESSAGE(e.rc == 0, e.output);
  CHECK_MESSAGE(e.output.find("  data: " + f.png + "/test: 200 samples, 10 classes (the run's --test-data)") !=
                    std::string::npos,
                e.output);
}

TEST_CASE("pipeline eval: a corrupt image stops the job with one line naming it, or --skip-bad skips it") {
  Fixture& f = fixture();
  TempDir d;
  const std::string bad = d / "bad";
  const std::vector<fs::path> files = copy_images(f.png + "/test", bad);
  const fs::path victim = files[files.size() / 2];
  const std::string head = read_text(files[0].string()).substr(0, 60);  // a PNG cut short
  std::ofstream(victim, std::ios::binary | std::ios::trunc) << head;

  for (int K : {1, 4}) {
    CAPTURE(K);
    const auto r = run_mpi(K, "pipeline_eval", {"--checkpoint", f.run, "-d", bad, "-o", d / "out"});
    CHECK(r.rc != 0);
    CHECK_MESSAGE(std::count(r.output.begin(), r.output.end(), '\n') == 1, r.output);
    CHECK_MESSAGE(r.output.starts_with("pipeline_eval: "), r.output);
    CHECK_MESSAGE(r.output.find(victim.string()) != std::string::npos, r.output);
    if (K == 4) CHECK_MESSAGE(r.output.find("rank 1 (decode+resize)") != std::string::npos, r.output);
    CHECK_FALSE(fs::exists(d / "out/predictions.csv"));  // nothing half-written
  }
  const auto r = run_mpi(4, "pipeline_eval", {"--checkpoint", f.run, "-d", bad, "--skip-bad", "-o", d / "skip"});
  REQUIRE_MESSAGE(r.rc == 0, r.output);
  const json rep = read_json(d / "skip/report.json");
  CHECK(rep["evaluated"] == 199);
  REQUIRE(rep["skipped"].size() == 1);
  CHECK(rep["skipped"][0]["source"] == victim.string());
  CHECK(r.output.find("1 skipped") != std::string::npos);
}

namespace {

// A torchvision `model` whose classifier (fc) separates these images clearly (random weights
// predict one class for everything), exported with the user tool, evaluated by torchvision
// and by pipeline_eval on 4 ranks at size/resize; returns both sides' predictions by path and
// the classes ours predicted.
struct Predictions {
  std::map<std::string, int> torch_pred, ours;
  std::set<int> classes;
};

// kPhotos photo-like PNGs, their list and CSV (label 0), made once for every model. 24: enough
// for several predicted classes of a random 10-class head (the check below), and a third of
// the case's time less than the 40 it had.
constexpr int kPhotos = 24;
struct Photos {
  TempDir dir;
  std::string imgs = dir / "imgs", csv = dir / "images.csv", list = dir / "list.txt";
  Photos() {
    run_python("photo_images.py", shell_quote(imgs) + " " + std::to_string(kPhotos) + " --formats png");
    std::ofstream c(csv), l(list);
    c << "path,label\n";
    for (int i = 0; i < kPhotos; ++i) {
      char name[32];
      std::snprintf(name, sizeof name, "img_%04d.png", i);
      c << imgs << "/" << name << ",0\n";
      l << imgs << "/" << name << "\n";
    }
  }
};

const Photos& photos() {
  static const Photos p;
  return p;
}

// torchvision's predictions of a model made for the photos (torchvision_predict.py
// --make-model), and ours on its weights exported by data_tools/export_torchvision.py. With
// `reload`, torchvision predicts again from the exported safetensors (loaded strictly), else the
// made model's own predictions are used (the same weights; one Python run fewer).
Predictions torchvision_and_ours(const TempDir& d, const std::string& model, int size, int resize,
                                 bool reload) {
  const Photos& ph = photos();
  const std::string pth = d / "model.pth", st = d / "model.safetensors", torch_csv = d / "torch.csv";
  const std::string common = "--model " + model + " --num-classes 10 --size " + std::to_string(size) +
                             " --resize " + std::to_string(resize) + " --images " + shell_quote(ph.list);
  run_python("torchvision_predict.py", "--make-model " + shell_quote(pth) + " " + common + " --seed 1" +
                                           (reload ? "" : " -o " + shell_quote(torch_csv)));
  run_python("data_tools/export_torchvision.py",
             "--model " + model + " --num-classes 10 --weights " + shell_quote(pth) + " -o " + shell_quote(st));
  if (reload)
    run_python("torchvision_predict.py", common + " --weights " + shell_quote(st) + " -o " + shell_quote(torch_csv));
  const auto r = run_mpi(4, "pipeline_eval", {"--weights", st, "--model", model, "--num-classes", "10", "-d",
                                              ph.csv, "--image-size", std::to_string(size), "--resize",
                                              std::to_string(resize), "--batch-size", "8", "-o", d / "ours"});
  REQUIRE_MESSAGE(r.rc == 0, r.output);

  Predictions p;
  std::ifstream tin(torch_csv), oin(d / "ours/predictions.csv");
  std::string line;
  std::getline(tin, line);  // path,prediction,score,margin
  while (std::getline(tin, line)) {
    const size_t c = line.find(',');
    p.torch_pred[line.substr(0, c)] = std::stoi(line.substr(c + 1));
  }
  std::getline(oin, line);  // index,path,label,prediction,score,top5
  while (std::getline(oin, line)) {
    std::vector<std::string> f;
    std::stringstream ss(line);
    for (std::string x; std::getline(ss, x, ',');) f.push_back(x);
    REQUIRE(f.size() == 6);
    p.ours[f[1]] = std::stoi(f[3]);  // class names of a CSV without classes.txt are the ids
    p.classes.insert(std::stoi(f[3]));
  }
  return p;
}

}  // namespace

// resnet18 (torchvision predicting again from the exported file, which it loads strictly), and
// the models with auxiliary heads (their exported state dicts hold the heads, which evaluation
// loads but does not run): GoogLeNet at 224, Inception v3 at its 299 crop from 342
// (torchvision's recipe for it).
TEST_CASE("pipeline eval: torchvision weights exported to safetensors predict what torchvision predicts") {
  struct Case {
    const char* model;
    int size, resize;
    bool reload;
  };
  for (const Case c : {Case{"resnet18", 224, 256, true}, Case{"googlenet", 224, 256, false},
                       Case{"inception_v3", 299, 342, false}}) {
    SUBCASE(c.model) {
      TempDir d;
      const auto [torch_pred, ours, classes] = torchvision_and_ours(d, c.model, c.size, c.resize, c.reload);
      REQUIRE(torch_pred.size() == kPhotos);
      REQUIRE(ours.size() == kPhotos);
      int agree = 0;
      for (const auto& [path, p] : torch_pred) agree += ours.count(path) && ours.at(path) == p;
      CHECK(agree >= kPhotos * 99 / 100);  // >= 99%, rounded down: all but one (a near-tie)
      CHECK(classes.size() >= 5);           // the comparison is not one class everywhere
    }
  }
}
