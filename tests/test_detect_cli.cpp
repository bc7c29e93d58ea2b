// `./train --task detection` as a user runs it: two ranks train Faster R-CNN on a small
// synthetic VOC set (train/ and test/), print the epoch's losses, the test mAP and a per-class
// table, and checkpoint; --resume continues the run; bad data gives one line naming it.
#include <filesystem>
#include <fstream>

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

}  // namespace

TEST_CASE("train CLI detection: two ranks train, evaluate mAP, checkpoint; --resume continues") {
  TempDir dir;
  make_set(dir / "shapes/train", 6, 1);
  make_set(dir / "shapes/test", 3, 2);
  const std::string run = dir / "run";
  const std::vector<std::string> args = {"--task", "detection", "-m", "fasterrcnn_resnet18_fpn",
                                         "-d", dir / "shapes", "--min-size", "96", "--max-size",
                                         "128", "-e", "1", "-b", "1", "--threads", "1", "-s", run};
  const auto r = run_mpi(2, "train", args);
  REQUIRE_MESSAGE(r.rc == 0, r.output);
  CHECK(r.output.find("task: detection, fasterrcnn_resnet18_fpn, 3 classes (circle, square, triangle), "
                      "6 training images, 3 test images") != std::string::npos);
  CHECK(r.output.find("2 ranks x 1 threads, 1 images a rank a step, 3 steps an epoch") != std::string::npos);
  CHECK(r.output.find("epoch 1/1: loss ") != std::string::npos);
  CHECK(r.output.find("test: mAP@0.5 (VOC) ") != std::string::npos);
  CHECK(r.output.find("class           GT    AP@.5(VOC) AP@[.5:.95]") != std::string::npos);
  CHECK(fs::exists(fs::path(run) / "checkpoints/epoch-0001/model.safetensors"));
  CHECK(fs::exists(fs::path(run) / "latest"));

  const auto resumed = run_program("train", {"--resume", run, "-e", "2", "--threads", "1"});
  REQUIRE_MESSAGE(resumed.rc == 0, resumed.output);
  CHECK(resumed.output.find("epoch 2/2: loss ") != std::string::npos);
  CHECK(resumed.output.find("epoch 1/2") == std::string::npos);
  CHECK(fs::exists(fs::path(run) / "checkpoints/epoch-0002/model.safetensors"));
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
