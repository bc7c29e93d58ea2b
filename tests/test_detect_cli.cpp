// `./train --task detection` as a user runs it: two ranks train Faster R-CNN on a small
// synthetic VOC set (train/ and test/), print the epoch's losses, the test mAP and a per-class
// table, track the run (metrics.jsonl, summary.json) and checkpoint; --resume continues the
// run; a COCO JSON trains with a VOC --test-data; bad data gives one line naming it.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "data/detection.h"
#include "testing.h"

using namespace mpicnn;
using mpicnn::testing::expect_cli_error;
using mpicnn::testing::run_mpi;
using mpicnn::testing::run_program;
using mpicnn::testing::TempDir;
namespace fs = std::filesystem;

namespace {

void make_set(const std::string& dir, size_t count, uint64_t seed) {
  data::SyntheticDetectionOptions s;
  s.out_dir = dir;
  s.count = count;
  s.seed = seed;
  s.min_size = 80;
  s.max_size = 96;
  s.max_objects = 2;
  s.min_object = 24;
  s.format = "png";
  data::make_synthetic_detection_set(s);
}

// The VOC set at `dir` as a COCO instances file beside its images (DIR/images/NAME), with every
// synthetic class as a category (numbered from `first_id`), present in the images or not.
void write_coco(const std::string& dir, const std::string& name, int first_id) {
  const data::DetectionSet set = data::read_voc_folder(dir, data::SyntheticDetectionOptions{}.classes);
  nlohmann::json j = {{"images", nlohmann::json::array()}, {"annotations", nlohmann::json::array()},
                      {"categories", nlohmann::json::array()}};
  for (size_t c = 0; c < set.classes.size(); ++c)
    j["categories"].push_back({{"id", first_id + int(c)}, {"name", set.classes[c]}});
  int ann = 1;
  for (size_t i = 0; i < set.samples.size(); ++i) {
    const data::DetectionSample& s = set.samples[i];
    j["images"].push_back({{"id", i + 1}, {"file_name", fs::path(s.image).filename().string()},
                           {"width", s.width}, {"height", s.height}});
    for (size_t k = 0; k < s.boxes.size(); ++k) {
      const auto& b = s.boxes[k];
      j["annotations"].push_back({{"id", ann++}, {"image_id", i + 1}, {"category_id", first_id + s.labels[k] - 1},
                                  {"bbox", {b[0], b[1], b[2] - b[0], b[3] - b[1]}}, {"iscrowd", 0},
                                  {"area", (b[2] - b[0]) * (b[3] - b[1])}});
    }
  }
  std::ofstream(fs::path(dir) / "images" / name) << j.dump();
}

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

}  // namespace

TEST_CASE("train CLI detection: two ranks train, evaluate mAP, checkpoint; --resume continues") {
  TempDir dir;
  make_set(dir / "shapes/train", 6, 1);
  make_set(dir / "shapes/test", 3, 2);
  const std::string run = dir / "run";
  const std::vector<std::string> args = {"--task", "detection", "-m", "fasterrcnn_resnet18_fpn",
                                         "-d", dir / "shapes", "--min-size", "96", "--max-size",
                                         "128", "-e", "1", "-b", "1", "--threads", "1", "-s", run,
                                         "--box-batch-size-per-image", "128", "--rpn-post-nms-top-n-test", "300"};
  const auto r = run_mpi(2, "train", args);
  REQUIRE_MESSAGE(r.rc == 0, r.output);
  CHECK(r.output.find("mpicnn train: fasterrcnn_resnet18_fpn (") != std::string::npos);
  CHECK(r.output.find(" parameters) on Pascal VOC folder " + (dir / "shapes/train") + " (6 images, ") != std::string::npos);
  CHECK(r.output.find("\n  3 classes (circle, square, triangle), images resized to 96...128\n") != std::string::npos);
  CHECK(r.output.find("\n  test data: Pascal VOC folder " + (dir / "shapes/test") + " (3 images, ") != std::string::npos);
  CHECK(r.output.find("2 ranks on 1 node, 1 thread per rank; batch 1 per rank, 2 global; 3 steps per epoch") != std::string::npos);
  CHECK(r.output.find("epoch 1/1 done in ") != std::string::npos);
  CHECK(r.output.find(": train loss ") != std::string::npos);
  CHECK(r.output.find(" (classifier ") != std::string::npos);
  CHECK(r.output.find("test: mAP@0.5 (VOC) ") != std::string::npos);
  CHECK(r.output.find("class           GT    AP@.5(VOC) AP@[.5:.95]") != std::string::npos);
  CHECK(fs::exists(fs::path(run) / "checkpoints/epoch-0001/model.safetensors"));
  CHECK(fs::exists(fs::path(run) / "latest"));

  // Tracking as for classifiers, with the detector's losses and mAP per epoch.
  const nlohmann::json s1 = read_json(fs::path(run) / "summary.json");
  CHECK(s1["status"] == "FINISHED");
  CHECK(s1.value("task", "") == "detection");  // the run facts sit at the top level
  REQUIRE(s1["per_epoch"].size() == 1);
  CHECK(s1["per_epoch"][0]["loss_classifier"].is_number());
  CHECK(s1["per_epoch"][0]["map50"] == s1["test_map50"]);
  CHECK(s1["test_map50"].get<double>() >= 0);
  std::ifstream metrics(fs::path(run) / "metrics.jsonl");
  int steps = 0, epochs = 0;
  for (std::string line; std::getline(metrics, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    steps += j["kind"] == "step";
    epochs += j["kind"] == "epoch" && j.contains("map") && j.contains("loss_rpn_box_reg");
  }
  CHECK(steps == 3);
  CHECK(epochs == 1);

  const auto resumed = run_program("train", {"--resume", run, "-e", "2", "--threads", "1"});
  REQUIRE_MESSAGE(resumed.rc == 0, resumed.output);
  CHECK(resumed.output.find("epoch 2/2 done in ") != std::string::npos);
  CHECK(resumed.output.find("epoch 1/2") == std::string::npos);
  CHECK(resumed.output.find("done: " + run + ": test mAP@0.5 (VOC) ") != std::string::npos);
  CHECK(fs::exists(fs::path(run) / "checkpoints/epoch-0002/model.safetensors"));
  const nlohmann::json s2 = read_json(fs::path(run) / "summary.json");
  REQUIRE(s2["per_epoch"].size() == 2);  // the first epoch's record kept, with its own metrics
  CHECK(s2["per_epoch"][0]["loss_classifier"] == s1["per_epoch"][0]["loss_classifier"]);
  CHECK(s2["mlflow_run_id"] == s1["mlflow_run_id"]);
}

TEST_CASE("train CLI detection: a COCO JSON trains, a VOC folder is its --test-data") {
  TempDir dir;
  make_set(dir / "train", 3, 4);
  make_set(dir / "test", 2, 5);
  write_coco(dir / "train", "instances.json", 7);  // COCO's category ids need not start at 1
  const auto r = run_program("train", {"--task", "detection", "-m", "fasterrcnn_resnet18_fpn", "-d",
                                       dir / "train/images/instances.json", "--test-data", dir / "test",
                                       "--min-size", "96", "--max-size", "128", "-e", "1", "-b", "1",
                                       "--threads", "1", "-s", dir / "run"});
  REQUIRE_MESSAGE(r.rc == 0, r.output);
  CHECK(r.output.find(" parameters) on COCO JSON " + (dir / "train/images/instances.json") + " (3 images, ") !=
        std::string::npos);
  CHECK(r.output.find("  test data: Pascal VOC folder " + (dir / "test") + " (2 images, ") != std::string::npos);
  CHECK(r.output.find("test: mAP@0.5 (VOC) ") != std::string::npos);
  // A folder holding one JSON and no annotations/ is that COCO set; its kind is checked.
  expect_cli_error("train", {"--task", "detection", "-d", dir / "train/images", "--dataset", "voc",
                             "-s", dir / "run2"}, "is read as COCO JSON (coco)");
  expect_cli_error("train", {"--task", "detection", "-d", dir / "test", "--dataset", "coco",
                             "-s", dir / "run3"}, "is read as a Pascal VOC folder (voc)");
  // The evaluation set's classes must be the training set's.
  data::SyntheticDetectionOptions other;
  other.out_dir = dir / "other";
  other.count = 2;
  other.classes = {"ring"};
  other.min_size = other.max_size = 80;
  data::make_synthetic_detection_set(other);
  expect_cli_error("train", {"--task", "detection", "-d", dir / "train/images/instances.json", "--test-data",
                             dir / "other", "-s", dir / "run4"}, "other/annotations/");
}

TEST_CASE("train CLI detection: bad data and options are one line") {
  TempDir dir;
  expect_cli_error("train", {"--task", "detection", "-d", dir / "missing"}, dir / "missing");
  make_set(dir / "set", 2, 3);
  {
    std::ofstream bad(dir / "set/annotations/00000.xml");
    bad << "<annotation><filename>00000.png</filename>";
  }
  expect_cli_error("train", {"--task", "detection", "-d", dir / "set", "-s", dir / "run"}, "00000.xml");
  expect_cli_error("train", {"--task", "detection", "-d", dir / "set", "-m", "vgg11"},
                   "unknown detection model 'vgg11'");
}

// The training loop's own flags work for detection as for classifiers (one Trainer): the
// linear scaling rule, every rank on the whole set, and the replica check after every step.
TEST_CASE("train CLI detection: --scale-lr, --distribute-data=false and --check-sync") {
  TempDir dir;
  make_set(dir / "set", 4, 6);
  const auto r = run_mpi(2, "train", {"--task", "detection", "-m", "fasterrcnn_resnet18_fpn", "-d", dir / "set",
                                      "--min-size", "64", "--max-size", "96", "-e", "1", "-b", "2", "--threads", "1",
                                      "--box-batch-size-per-image", "32", "--scale-lr", "--distribute-data=false",
                                      "--check-sync", "1", "--progress", "plain", "-s", dir / "run"});
  REQUIRE_MESSAGE(r.rc == 0, r.output);
  CHECK(r.output.find("batch 2 per rank, 4 global; 2 steps per epoch") != std::string::npos);  // 4 images each
  CHECK(r.output.find("lr=0.00015625") != std::string::npos);  // 0.01 x 4 / 256
  CHECK(r.output.find("done: " + (dir / "run") + ": no test evaluation") != std::string::npos);
}
