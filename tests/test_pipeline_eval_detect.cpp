// ./pipeline_eval on a Faster R-CNN run (`./train --task detection`, one epoch on a tiny
// synthetic set at min-size 64), under mpiexec: the staged run's boxes are exactly
// detect::predict's on the same images (1, 2 and 3 ranks, several ranks per stage, VOC and
// COCO), predictions.csv has one row per box, report.json the mAP that
// detect::evaluate_predictions gives those boxes, and a set with other classes or a
// classifier-only flag stops it with one line.
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/threads.h"
#include "data/detection.h"
#include "detect/evaluate.h"
#include "detect/faster_rcnn.h"
#include "eval/layout.h"
#include "io/safetensors.h"
#include "io/trainer_record.h"
#include "testing.h"

using namespace mpicnn;
using mpicnn::testing::expect_cli_error;
using mpicnn::testing::run_mpi;
using mpicnn::testing::TempDir;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

void make_set(const std::string& dir, size_t count, uint64_t seed,
              std::vector<std::string> classes = {"circle", "square", "triangle"}) {
  data::SyntheticDetectionOptions s;
  s.out_dir = dir;
  s.count = count;
  s.seed = seed;
  s.min_size = 64;
  s.max_size = 96;
  s.max_objects = 3;
  s.min_object = 20;
  s.format = "png";
  s.classes = std::move(classes);
  data::make_synthetic_detection_set(s);
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.is_open(), "cannot read ", path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

const std::vector<std::string> kClasses = {"circle", "square", "triangle"};
constexpr int kMin = 64, kMax = 96, kBatch = 2;

// A one-epoch run on shapes/train (6 images), shapes/test (5 images); made once per process.
struct Fixture {
  TempDir dir;
  std::string shapes = dir / "shapes", run = dir / "run";
  Fixture() {
    make_set(shapes + "/train", 6, 1);
    make_set(shapes + "/test", 5, 2);
    const auto r = testing::run_program(
        "train", {"--task", "detection", "-m", "fasterrcnn_resnet18_fpn", "-d", shapes, "--min-size",
                  std::to_string(kMin), "--max-size", std::to_string(kMax), "-e", "1", "-b", "2",
                  "--threads", "1", "--progress", "none", "-s", run});
    REQUIRE_MESSAGE(r.rc == 0, r.output);
  }
};
Fixture& fixture() {
  static Fixture f;
  return f;
}

detect::ResizeOptions resize() {
  detect::ResizeOptions o;
  o.min_size = kMin;
  o.max_size = kMax;
  return o;
}

// What the run's detector predicts for every image of `set` with detect::predict, batch kBatch,
// one thread (as --threads 1 gives the predicting ranks).
std::vector<detect::Detections> reference(const data::DetectionSet& set) {
  detect::FasterRcnnOptions fo;
  fo.num_classes = int(kClasses.size()) + 1;
  fo.transform = resize();
  fo.trainable_layers = 5;         // the run trained from random weights: every stage, and
  fo.frozen_batchnorm = false;     // ordinary BatchNorm (./train's rule, torchvision's)
  auto model = detect::make_faster_rcnn("fasterrcnn_resnet18_fpn", fo, 0, false);
  model->load_state_dict(fixture().run + "/latest/model.safetensors");
  set_num_threads(1);
  std::vector<int64_t> all(set.samples.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = int64_t(i);
  return detect::predict(*model, set, all, kBatch, resize());
}

// A copy of `from`'s images whose ground truth is made from the detector's own boxes: image i's
// highest-scoring box of at least 2x2 pixels, rounded to whole pixels, with the predicted class
// for even i and the next class for odd i. So the mAP is neither 0 nor 1 even for a detector
// trained one epoch.
void make_gt_from(const data::DetectionSet& from, const std::vector<detect::Detections>& dets,
                  const std::string& dir) {
  fs::create_directories(dir + "/images");
  fs::create_directories(dir + "/annotations");
  for (size_t i = 0; i < from.samples.size(); ++i) {
    const data::DetectionSample& s = from.samples[i];
    const std::string name = fs::path(s.image).filename().string();
    fs::copy_file(s.image, dir + "/images/" + name);
    std::ostringstream xml;
    xml << "<annotation><filename>" << name << "</filename><size><width>" << s.width << "</width><height>"
        << s.height << "</height><depth>3</depth></size>";
    const detect::Detections& d = dets[i];
    for (size_t k = 0; k < d.scores.size(); ++k) {
      const float* b = d.boxes.data() + 4 * k;
      const double x1 = std::floor(b[0]), y1 = std::floor(b[1]);
      const double x2 = std::min<double>(double(s.width), std::ceil(b[2]));
      const double y2 = std::min<double>(double(s.height), std::ceil(b[3]));
      if (x2 - x1 < 2 || y2 - y1 < 2) continue;
      const int64_t label = i % 2 == 0 ? d.labels[k] : d.labels[k] % int64_t(kClasses.size()) + 1;
      xml << "<object><name>" << kClasses[size_t(label - 1)] << "</name><bndbox><xmin>" << x1 << "</xmin><ymin>"
          << y1 << "</ymin><xmax>" << x2 << "</xmax><ymax>" << y2 << "</ymax></bndbox></object>";
      break;
    }
    xml << "</annotation>\n";
    std::ofstream(dir + "/annotations/" + fs::path(name).replace_extension(".xml").string()) << xml.str();
  }
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// predictions.csv as `want` gives it: one row per box in the detector's order, the boxes
// exactly (%.9g reads back as the same float), the score to 6 significant digits.
void check_csv(const std::string& path, const data::DetectionSet& set,
               const std::vector<detect::Detections>& want) {
  std::istringstream in(slurp(path));
  std::string line;
  REQUIRE(std::getline(in, line));
  CHECK(line == "index,path,label,score,x1,y1,x2,y2");
  size_t rows = 0;
  for (size_t i = 0; i < want.size(); ++i)
    for (size_t k = 0; k < want[i].scores.size(); ++k, ++rows) {
      REQUIRE_MESSAGE(std::getline(in, line), "row ", rows, " missing");
      std::vector<std::string> f;
      std::istringstream cells(line);
      for (std::string c; std::getline(cells, c, ',');) f.push_back(c);
      REQUIRE(f.size() == 8);
      CHECK(f[0] == std::to_string(i));
      CHECK(f[1] == set.samples[i].image);
      CHECK(f[2] == kClasses[size_t(want[i].labels[k] - 1)]);
      CHECK(f[3] == fmt("%.6g", want[i].scores[k]));
      for (int c = 0; c < 4; ++c)
        CHECK_MESSAGE(std::strtof(f[size_t(4 + c)].c_str(), nullptr) == want[i].boxes[4 * k + size_t(c)],
                      "image ", i, " box ", k, " coordinate ", c, ": ", f[size_t(4 + c)]);
    }
  CHECK_MESSAGE(!std::getline(in, line), "extra row: ", line);
  CHECK(rows > 0);
}

}  // namespace

TEST_CASE("pipeline eval detection: boxes identical to detect::predict on 1 and 3 ranks; CSV; mAP as evaluate_predictions") {
  Fixture& fx = fixture();
  TempDir dir;
  const data::DetectionSet test = data::read_voc_folder(fx.shapes + "/test", kClasses);
  make_gt_from(test, reference(test), dir / "gt");
  const data::DetectionSet gt = data::read_voc_folder(dir / "gt", kClasses);
  REQUIRE(gt.num_objects() >= 3);
  const std::vector<detect::Detections> want = reference(gt);
  std::vector<int64_t> all(gt.samples.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = int64_t(i);
  const detect::MapResult map = detect::evaluate_predictions(gt, all, want);
  CHECK(map.map50_voc > 0);  // the test means something: matched boxes exist
  CHECK(map.map50_voc < 1);

  for (int K : {1, 3}) {
    CAPTURE(K);
    const std::string out = dir / ("out" + std::to_string(K));
    const auto r = run_mpi(K, "pipeline_eval", {"-c", fx.run, "-d", dir / "gt", "-b", std::to_string(kBatch),
                                                "--threads", "1", "-o", out});
    REQUIRE_MESSAGE(r.rc == 0, r.output);
    CHECK(r.output.find("detector input: min-size 64, max-size 96") != std::string::npos);
    CHECK(r.output.find("mAP@0.5 (VOC) " + fmt("%.4f", map.map50_voc)) != std::string::npos);
    CHECK(r.output.find("class           GT    AP@.5(VOC) AP@[.5:.95]") != std::string::npos);
    CHECK(r.output.find("latency p50 ") != std::string::npos);
    check_csv(out + "/predictions.csv", gt, want);

    const json j = json::parse(slurp(out + "/report.json"));
    CHECK(j["task"] == "detection");
    CHECK(j["model"] == "fasterrcnn_resnet18_fpn");
    CHECK(j["ranks"] == K);
    CHECK(j["evaluated"] == gt.samples.size());
    CHECK(j["classes"] == json(kClasses));
    CHECK(j["map50"].get<double>() == map.map50_voc);
    CHECK(j["map"].get<double>() == map.map_coco);
    CHECK(j["map75_coco"].get<double>() == map.map75_coco);
    REQUIRE(j["per_class"].size() == kClasses.size());
    for (size_t c = 0; c < kClasses.size(); ++c) {
      const detect::ClassAp& ap = map.classes[c + 1];
      const json& pc = j["per_class"][c];
      CHECK(pc["class"] == kClasses[c]);
      CHECK(pc["gt"] == ap.gt_count);
      CHECK(pc["detections"] == ap.det_count);
      if (std::isnan(ap.ap50_voc))
        CHECK(pc["ap50"].is_null());
      else
        CHECK(pc["ap50"].get<double>() == ap.ap50_voc);
    }
    for (const char* key : {"wall_s", "images_per_s"}) CHECK(j[key].get<double>() > 0);
    for (const char* key : {"p50", "p95", "p99", "mean", "max"}) CHECK(j["latency_s"][key].get<double>() > 0);
    CHECK(j["stages"].size() == 4u);  // K = 1: one rank, four stages; K = 3: read | decode+normalize | predict
    CHECK(j["stages"].back()["stage"] == "predict");
    CHECK(j["stages"].back()["rank"] == K - 1);
    CHECK(j["stages"].back()["items"] == (gt.samples.size() + kBatch - 1) / kBatch);
  }
}

TEST_CASE("pipeline eval detection: without -d the run's test split; COCO JSON gives the same boxes") {
  Fixture& fx = fixture();
  TempDir dir;
  const data::DetectionSet test = data::read_voc_folder(fx.shapes + "/test", kClasses);
  const std::vector<detect::Detections> want = reference(test);
  const auto r = run_mpi(2, "pipeline_eval", {"-c", fx.run, "-b", "2", "--threads", "1", "-o", dir / "out",
                                              "--compare"});
  REQUIRE_MESSAGE(r.rc == 0, r.output);
  CHECK(r.output.find("data: Pascal VOC folder " + fx.shapes + "/test (5 images") != std::string::npos);
  CHECK(r.output.find("(the test split of the data the run trained on)") != std::string::npos);
  CHECK(r.output.find("predictions identical to sequential") != std::string::npos);
  check_csv(dir / "out/predictions.csv", test, want);

  // The same images and boxes as COCO instances JSON beside them (file_name relative to it).
  json coco = {{"images", json::array()}, {"annotations", json::array()}, {"categories", json::array()}};
  for (size_t c = 0; c < kClasses.size(); ++c)
    coco["categories"].push_back({{"id", 10 + c}, {"name", kClasses[c]}});
  int id = 0;
  for (size_t i = 0; i < test.samples.size(); ++i) {
    const data::DetectionSample& s = test.samples[i];
    coco["images"].push_back({{"id", i + 1},
                              {"file_name", "images/" + fs::path(s.image).filename().string()},
                              {"width", s.width},
                              {"height", s.height}});
    for (size_t k = 0; k < s.boxes.size(); ++k) {
      const auto& b = s.boxes[k];
      coco["annotations"].push_back({{"id", ++id}, {"image_id", i + 1}, {"category_id", 9 + s.labels[k]},
                                     {"bbox", {b[0], b[1], b[2] - b[0], b[3] - b[1]}}, {"area", 1}, {"iscrowd", 0}});
    }
  }
  std::ofstream(fx.shapes + "/test/instances.json") << coco.dump();
  const auto c = run_mpi(1, "pipeline_eval", {"-c", fx.run, "-d", fx.shapes + "/test/instances.json", "-b", "2",
                                              "--threads", "1", "-o", dir / "coco", "--json"});
  fs::remove(fx.shapes + "/test/instances.json");
  REQUIRE_MESSAGE(c.rc == 0, c.output);
  CHECK(json::parse(c.output)["dataset"].get<std::string>().starts_with("COCO JSON "));
  check_csv(dir / "coco/predictions.csv", test, want);
  CHECK(json::parse(slurp(dir / "coco/report.json"))["map50"] ==
        json::parse(slurp(dir / "out/report.json"))["map50"]);
}

// The run's trainer.json records the detector it built (format version 3), and evaluation
// builds it from that record; a version-2 checkpoint, which recorded only the flags (and the
// sizes in the input record), still evaluates to the same boxes.
TEST_CASE("pipeline eval detection: the detector from the checkpoint's record; a version-2 checkpoint still evaluates") {
  Fixture& fx = fixture();
  TempDir dir;
  const json rec = json::parse(slurp(fx.run + "/latest/trainer.json"));
  CHECK(rec["format_version"] == 3);
  const detect::FasterRcnnOptions built = detect::options_from_record(rec["model_options"], "trainer.json");
  CHECK(built.transform.min_size == kMin);
  CHECK(built.transform.max_size == kMax);
  CHECK(built.num_classes == int(kClasses.size()) + 1);
  CHECK(built.trainable_layers == 5);
  CHECK_FALSE(built.frozen_batchnorm);  // from random weights: ordinary BatchNorm
  CHECK(rec["input"]["height"] == 0);   // the detector resizes: no input size of its own

  const data::DetectionSet test = data::read_voc_folder(fx.shapes + "/test", kClasses);
  const std::vector<detect::Detections> want = reference(test);
  const std::string old_ck = dir / "v2";
  fs::copy(fx.run + "/latest/", old_ck, fs::copy_options::recursive);
  json v2 = json::parse(slurp(old_ck + "/trainer.json"));
  v2.erase("model_options");
  v2.erase("crc32");
  v2["format_version"] = 2;
  v2["input"]["height"] = kMin, v2["input"]["width"] = kMax;  // as version 2 wrote them
  v2["crc32"] = crc32_hex(trainer_record::own_crc(v2));
  std::ofstream(old_ck + "/trainer.json") << v2.dump(2);
  const auto r = run_mpi(1, "pipeline_eval", {"-c", old_ck, "-d", fx.shapes + "/test", "-b", "2", "--threads", "1",
                                              "-o", dir / "out"});
  REQUIRE_MESSAGE(r.rc == 0, r.output);
  check_csv(dir / "out/predictions.csv", test, want);

  // A record that is no detector's is one line naming the file.
  v2["format_version"] = 3;
  v2["model_options"] = {{"body", "resnet18"}};
  v2.erase("crc32");
  v2["crc32"] = crc32_hex(trainer_record::own_crc(v2));
  std::ofstream(old_ck + "/trainer.json") << v2.dump(2);
  testing::expect_cli_error("pipeline_eval", {"-c", old_ck, "-d", fx.shapes + "/test", "-o", dir / "bad"},
                            "trainer.json: model_options: not a Faster R-CNN record");
}

TEST_CASE("pipeline eval detection: other classes and classifier flags are one line") {
  Fixture& fx = fixture();
  TempDir dir;
  make_set(dir / "other", 2, 3, {"diamond", "circle"});
  expect_cli_error("pipeline_eval", {"-c", fx.run, "-d", dir / "other"}, dir / "other/annotations/00000.xml: object ");
  expect_cli_error("pipeline_eval", {"-c", fx.run, "-d", dir / "other"},
                   ": class 'diamond' is not one of the checkpoint's classes (circle, square, triangle)");
  std::ofstream(dir / "cats.json")
      << R"({"images": [], "annotations": [], "categories": [{"id": 1, "name": "cat"}]})";
  expect_cli_error("pipeline_eval", {"-c", fx.run, "-d", dir / "cats.json"},
                   dir / "cats.json" + ": its categories (cat) are not the checkpoint's classes (circle, square, triangle)");
  expect_cli_error("pipeline_eval", {"-c", fx.run, "--image-size", "64"}, "--image-size: ");
  expect_cli_error("pipeline_eval", {"-c", fx.run, "--mean", "0.5"}, "--mean: ");
  expect_cli_error("pipeline_eval", {"-c", fx.run, "--split", "train"}, "--split train: ");
  expect_cli_error("pipeline_eval", {"--weights", fx.run + "/latest/model.safetensors", "-m", "fasterrcnn_resnet18_fpn",
                                     "-d", fx.shapes + "/test"},
                   "-m/--model fasterrcnn_resnet18_fpn: a detector is evaluated from its ./train --task detection run");
}

TEST_CASE("pipeline eval detection: boxes identical to detect::predict with several ranks per stage") {
  // Stage-to-rank assignments (eval/layout.h) with several readers, decoders or batchers and
  // folded groups; blocks of 2 of the 5 images go round each stage's ranks.
  Fixture& fx = fixture();
  TempDir dir;
  const data::DetectionSet test = data::read_voc_folder(fx.shapes + "/test", kClasses);
  const std::vector<detect::Detections> want = reference(test);
  for (const char* spec : {"read=2,decode=2,batch=1,predict=1", "read=1,decode=2,batch=2,predict=1",
                           "read+decode=2,batch+predict=2", "read+decode+batch+predict=3"}) {
    CAPTURE(spec);
    const std::string out = dir / "out";
    const auto r = run_mpi(eval::parse_stages(spec).ranks, "pipeline_eval",
                           {"-c", fx.run, "-d", fx.shapes + "/test", "-b", std::to_string(kBatch), "--threads", "1",
                            "--stages", spec, "-o", out});
    REQUIRE_MESSAGE(r.rc == 0, r.output);
    check_csv(out + "/predictions.csv", test, want);
    CHECK(json::parse(slurp(out + "/report.json"))["stage_ranks"] == spec);
  }
  // --stages auto: the detector's stages measured on rank 0, then the layout it chose.
  const auto r = run_mpi(3, "pipeline_eval", {"-c", fx.run, "-d", fx.shapes + "/test", "-b", std::to_string(kBatch),
                                              "--threads", "1", "--stages", "auto", "-o", dir / "auto"});
  REQUIRE_MESSAGE(r.rc == 0, r.output);
  check_csv(dir / "auto/predictions.csv", test, want);
  CHECK(json::parse(slurp(dir / "auto/report.json"))["calibration"]["images"] == 5);  // all 5 (fewer than 16)
}
