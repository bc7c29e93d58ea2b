// data::default_preprocess, the one source of default recipes: each dataset kind's statistics,
// the 1-channel rule (checked against what the channel conversion really feeds a gray model),
// torchvision's 256/224 rule, and ./train's checkpoint agreeing with ./pipeline_eval's default
// recipe on every dataset kind, for 1- and 3-channel models.

#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <tuple>

#include "core/rng.h"
#include "data/dataset.h"
#include "data/image.h"
#include "data/preprocess.h"
#include "data/transform.h"
#include "eval/options.h"
#include "eval/setup.h"
#include "io/checkpoint.h"
#include "models/registry.h"
#include "testing.h"

using namespace mpicnn;
namespace fs = std::filesystem;
using mpicnn::testing::run_program;
using mpicnn::testing::TempDir;

namespace {

using Bytes = std::vector<uint8_t>;

void spit(const fs::path& path, const Bytes& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  REQUIRE(out.good());
}

Bytes noise(size_t n, uint64_t seed, uint32_t below = 256) {
  const Rng rng(seed, 1);
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) b[i] = uint8_t(rng.below(i, below));
  return b;
}

Bytes idx(const std::vector<uint32_t>& dims, const Bytes& data) {
  Bytes b = {0, 0, 0x08, uint8_t(dims.size())};
  for (uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8) b.push_back(uint8_t(d >> s));
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

// Train and test IDX files of n 28x28 images each.
void write_idx(const fs::path& dir, uint32_t n) {
  for (const char* split : {"train", "t10k"}) {
    spit(dir / (std::string(split) + "-images-idx3-ubyte"), idx({n, 28, 28}, noise(n * 784, n)));
    spit(dir / (std::string(split) + "-labels-idx1-ubyte"), idx({n}, noise(n, n + 1, 10)));
  }
}

// CIFAR binary records: [coarse label,] label, 3072 pixels (R plane, G plane, B plane).
void write_cifar(const fs::path& dir, int classes, int n) {
  const std::vector<std::string> names =
      classes == 10 ? std::vector<std::string>{"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                                               "data_batch_4.bin", "data_batch_5.bin", "test_batch.bin"}
                    : std::vector<std::string>{"train.bin", "test.bin"};
  uint64_t seed = 1;
  for (const std::string& name : names) {
    Bytes b;
    for (int r = 0; r < n; ++r, ++seed) {
      if (classes == 100) b.push_back(0);
      b.push_back(uint8_t(seed % uint64_t(classes)));
      const Bytes px = noise(3072, seed);
      b.insert(b.end(), px.begin(), px.end());
    }
    spit(dir / name, b);
  }
}

// An image folder (train/ and test/, two classes, images of varying sizes) and a CSV of the
// same files with a split column.
void write_images(const fs::path& dir) {
  std::ofstream csv(dir / "images.csv");
  csv << "path,label,split\n";
  int k = 0;
  for (const char* split : {"train", "test"})
    for (const char* cls : {"a", "b"})
      for (int i = 0; i < 3; ++i, ++k) {
        data::Image img(30 + 7 * k, 40 - 3 * k, 3);
        img.pixels = noise(img.pixels.size(), uint64_t(100 + k));
        const fs::path path = dir / "folder" / split / cls / ("img" + std::to_string(k) + ".png");
        fs::create_directories(path.parent_path());
        data::write_png(path.string(), img);
        csv << path.string() << "," << (cls[0] == 'a' ? 0 : 1) << "," << split << "\n";
      }
}

struct Kind {
  std::string kind, path;  // path empty: synthetic
};

std::vector<Kind> write_every_kind(const TempDir& dir) {
  write_idx(dir.path / "fashion", 8);
  write_idx(dir.path / "digits", 8);
  write_cifar(dir.path / "c10", 10, 2);
  write_cifar(dir.path / "c100", 100, 2);
  write_images(dir.path);
  return {{"fashion-mnist", dir / "fashion"}, {"mnist", dir / "digits"},     {"idx", dir / "digits"},
          {"cifar10", dir / "c10"},           {"cifar100", dir / "c100"},    {"imagefolder", dir / "folder"},
          {"csv", dir / "images.csv"},        {"synthetic", ""}};
}

// The recipe ./pipeline_eval uses without preprocessing flags: for weights of `model` with
// `channels` input channels, or for a checkpoint.
data::Preprocess eval_default(const Kind& k, const std::string& checkpoint, const std::string& weights,
                              int channels) {
  eval::EvalOptions o;
  o.dataset = k.kind;
  o.data = k.path;
  if (!checkpoint.empty()) {
    o.checkpoint = checkpoint;
  } else {
    o.weights = weights;
    o.model = "lenet";
    o.in_channels = channels;
  }
  std::unique_ptr<data::Dataset> ds;
  return eval::make_setup(o, ds).preprocess;
}

// What ./train decides for the dataset's train split and a model of `channels` channels (the
// query trainer.cpp's plan_input makes without preprocessing flags).
data::Preprocess train_default(const Kind& k, int channels) {
  data::DatasetSpec spec;
  spec.kind = k.kind;
  spec.path = k.path;
  const auto ds = data::open_dataset(spec);
  data::PreprocessQuery q;
  q.kind = k.kind;
  q.channels = channels;
  q.data_height = ds->height();
  q.data_width = ds->width();
  q.default_size = model_spec("lenet").default_size;
  return data::default_preprocess(q).eval;
}

void check_same(const data::Preprocess& a, const data::Preprocess& b) {
  CHECK(data::geometry_name(a.geometry) == std::string(data::geometry_name(b.geometry)));
  CHECK(a.channels == b.channels);
  CHECK(a.height == b.height);
  CHECK(a.width == b.width);
  CHECK(a.resize == b.resize);
  CHECK(a.mean == b.mean);
  CHECK(a.stddev == b.stddev);
}

}  // namespace

TEST_CASE("preprocess: each kind's statistics and the 256/224 rule") {
  using data::kind_normalization;
  CHECK(kind_normalization("fashion-mnist", 1).mean == std::vector<float>{data::kFashionMnistMean});
  CHECK(kind_normalization("fashion-mnist", 3).stddev == std::vector<float>{data::kFashionMnistStd});
  CHECK(kind_normalization("mnist", 1).mean == std::vector<float>{data::kMnistMean});
  CHECK(kind_normalization("imagefolder", 3).mean ==
        std::vector<float>(data::kImageNetMean.begin(), data::kImageNetMean.end()));
  CHECK(kind_normalization("csv", 3).stddev ==
        std::vector<float>(data::kImageNetStd.begin(), data::kImageNetStd.end()));
  CHECK(kind_normalization("cifar100", 3).mean ==
        std::vector<float>(data::kCifar10Mean.begin(), data::kCifar10Mean.end()));
  CHECK(kind_normalization("synthetic", 3).mean == std::vector<float>{0.5f});
  // 1-channel models of RGB data: luma-weighted, neither the red channel nor the plain average.
  const data::Normalization gray = kind_normalization("imagefolder", 1);
  REQUIRE(gray.mean.size() == 1);
  CHECK(gray.mean[0] == doctest::Approx(0.299 * 0.485 + 0.587 * 0.456 + 0.114 * 0.406).epsilon(1e-6));
  CHECK(gray.stddev[0] == doctest::Approx(0.299 * 0.229 + 0.587 * 0.224 + 0.114 * 0.225).epsilon(1e-6));
  const data::Normalization cgray = kind_normalization("cifar10", 1);
  CHECK(cgray.mean[0] == doctest::Approx(0.299 * 0.4914 + 0.587 * 0.4822 + 0.114 * 0.4465).epsilon(1e-6));
  CHECK(cgray.stddev[0] == doctest::Approx(0.299 * 0.2470 + 0.587 * 0.2435 + 0.114 * 0.2616).epsilon(1e-6));
  testing::expect_error([] { kind_normalization("auto", 3); }, "no default normalisation for dataset kind 'auto'");
  testing::expect_error([] { kind_normalization("csv", 2); }, "channels must be 1 or 3");

  CHECK(data::eval_resize(224) == 256);
  CHECK(data::eval_resize(28) == 32);
  data::PreprocessQuery q;
  q.kind = "csv";
  const data::InputPreprocess files = data::default_preprocess(q);
  CHECK(files.eval.geometry == data::Geometry::ResizeCenterCrop);
  CHECK((files.height == 224 && files.eval.resize == 256));
  q.augment = "imagenet";
  CHECK(data::default_preprocess(q).train.geometry == data::Geometry::RandomResizedCrop);
  // Every recipe of image files is one the Transform takes (--augment imagenet was refused once:
  // the evaluation's resize had been left in the training spec).
  for (const char* augment : {"none", "flip", "imagenet"}) {
    CAPTURE(augment);
    q.augment = augment;
    const data::InputPreprocess pp = data::default_preprocess(q);
    CHECK_NOTHROW(data::Transform{pp.train});
    CHECK_NOTHROW(data::Transform{pp.eval});
  }
  q = {};
  q.kind = "cifar10", q.data_height = q.data_width = 32, q.augment = "crop-flip";
  const data::InputPreprocess cifar = data::default_preprocess(q);
  CHECK(cifar.eval.geometry == data::Geometry::None);
  CHECK((cifar.train.geometry == data::Geometry::PadRandomCrop && cifar.train.padding == 4 && cifar.train.hflip));
  q.image_size = 40;
  testing::expect_error([&] { data::default_preprocess(q); }, "--augment crop-flip: pads and crops");
  q.augment = "none";
  CHECK(data::default_preprocess(q).eval.geometry == data::Geometry::Resize);
}

TEST_CASE("preprocess: the 1-channel statistics are those of the luma the loader feeds") {
  // Strongly correlated channels with different levels and contrasts, as in photographs: the
  // luma's measured mean and std are where the rule puts them, the red channel's or the plain
  // average's are not.
  data::Image rgb(64, 64, 3);
  const Rng rng(5, 2);
  for (size_t i = 0; i < 64 * 64; ++i) {
    const double base = rng.uniform(3 * i), n = 12 * (rng.uniform(3 * i + 1) - 0.5);
    rgb.pixels[3 * i] = uint8_t(std::lround(10 + 60 * base + n));
    rgb.pixels[3 * i + 1] = uint8_t(std::lround(40 + 200 * base - n));
    rgb.pixels[3 * i + 2] = uint8_t(std::lround(20 + 120 * base + 0.5 * n));
  }
  const data::Image gray = data::convert_channels(rgb, 1);
  auto stats = [](const data::Image& im, int c) {
    double s = 0, ss = 0;
    const size_t n = size_t(im.height) * im.width;
    for (size_t i = 0; i < n; ++i) {
      const double v = im.pixels[i * size_t(im.channels) + size_t(c)] / 255.0;
      s += v, ss += v * v;
    }
    const double m = s / double(n);
    return std::pair<float, float>{float(m), float(std::sqrt(ss / double(n) - m * m))};
  };
  std::array<float, 3> mean{}, stddev{};
  for (int c = 0; c < 3; ++c) std::tie(mean[size_t(c)], stddev[size_t(c)]) = stats(rgb, c);
  const auto [lm, ls] = stats(gray, 0);
  // The engine's rule through kind_normalization's arithmetic on these statistics.
  const double rule_mean = 0.299 * mean[0] + 0.587 * mean[1] + 0.114 * mean[2];
  const double rule_std = 0.299 * stddev[0] + 0.587 * stddev[1] + 0.114 * stddev[2];
  CHECK(std::abs(lm - rule_mean) < 2e-3);  // the conversion rounds to 8 bits
  CHECK(ls <= rule_std + 2e-3);
  CHECK(ls >= 0.97 * rule_std);
  CHECK(std::abs(lm - mean[0]) > 0.05);                                // red alone
  CHECK(std::abs(lm - (mean[0] + mean[1] + mean[2]) / 3) > 0.05);      // plain average
  // And kind_normalization applies that same weighting to its RGB tables.
  const data::Normalization g = data::kind_normalization("cifar10", 1);
  CHECK(g.mean[0] == doctest::Approx(0.299 * data::kCifar10Mean[0] + 0.587 * data::kCifar10Mean[1] +
                                     0.114 * data::kCifar10Mean[2]).epsilon(1e-6));
}

TEST_CASE("preprocess: ./train's checkpoint and ./pipeline_eval default to the same recipe on every dataset kind") {
  TempDir dir;
  const std::vector<Kind> kinds = write_every_kind(dir);
  for (const Kind& k : kinds) {
    CAPTURE(k.kind);
    // ./train as users run it: the recipe it records is the one it trained and evaluated with.
    const std::string run = dir / ("run-" + k.kind);
    std::vector<std::string> args = {"--dataset", k.kind, "--model", "lenet", "--epochs", "1", "--batch-size", "2",
                                     "--threads", "1", "--workers", "0", "--progress", "none", "-s", run};
    if (!k.path.empty()) args.insert(args.begin(), {"-d", k.path});
    const auto trained = run_program("train", args);
    REQUIRE_MESSAGE(trained.rc == 0, trained.output);
    const CheckpointPaths ck = resolve_checkpoint(run);
    const InputRecord rec = read_trainer_state(ck.trainer).input;
    data::Preprocess recorded;
    recorded.geometry = data::parse_geometry(rec.geometry, ck.trainer);
    recorded.channels = rec.channels;
    recorded.height = rec.height, recorded.width = rec.width, recorded.resize = rec.resize;
    recorded.mean = rec.mean, recorded.stddev = rec.stddev;
    check_same(recorded, train_default(k, rec.channels));
    // ./pipeline_eval on that checkpoint, and on its weights alone, without preprocessing flags.
    check_same(eval_default(k, run, "", 0), recorded);
    check_same(eval_default(k, "", ck.model, rec.channels), recorded);
    // A model of either channel count: the weights' default recipe is the trainer's.
    for (int channels : {1, 3}) {
      CAPTURE(channels);
      check_same(eval_default(k, "", ck.model, channels), train_default(k, channels));
    }
  }
}
