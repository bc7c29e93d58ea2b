// Data tools: stratified sampling (exact counts, proportions, seeds, thread counts), round trips
// create_dataset -> CSV dataset and export_images -> image folder (labels and pixels), dataset
// stats against direct loops and numpy, and the three programs run as a user runs them.
// Fixtures are written at test time into temporary folders; nothing here is committed data.
#include <sys/wait.h>

#include <boost/program_options/errors.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <set>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "core/rng.h"
#include "data/csv_dataset.h"
#include "data/detection.h"
#include "data/dataset.h"
#include "data/image_folder.h"
#include "data/tools.h"
#include "data/transform.h"
#include "testing.h"

using namespace mpicnn;
using namespace mpicnn::data;
using mpicnn::testing::expect_error;
namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

using mpicnn::testing::TempDir;
using mpicnn::testing::RunResult;

namespace {

void spit(const std::string& path, const Bytes& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  REQUIRE(out.good());
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot read ", path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

Image random_image(int h, int w, int c, uint64_t seed) {
  Image img(h, w, c);
  const Rng rng(seed, 11);
  for (size_t i = 0; i < img.pixels.size(); ++i) img.pixels[i] = uint8_t(rng.below(i, 256));
  return img;
}

void require_same(const Image& a, const Image& b, const std::string& what) {
  REQUIRE_MESSAGE(a.height == b.height, what, ": height ", a.height, " vs ", b.height);
  REQUIRE_MESSAGE(a.width == b.width, what, ": width ", a.width, " vs ", b.width);
  REQUIRE_MESSAGE(a.channels == b.channels, what, ": channels ", a.channels, " vs ", b.channels);
  REQUIRE_MESSAGE(a.pixels == b.pixels, what, ": pixels differ");
}

// An image folder with classes of the given sizes; images of two sizes, some gray, some RGB.
// A class name with a comma exercises the CSV quoting.
const std::vector<std::string> kFolderClasses = {"ant", "bee", "cat, wild", "dog"};
void make_image_folder(const fs::path& root, const std::vector<int>& counts) {
  for (size_t k = 0; k < counts.size(); ++k)
    for (int j = 0; j < counts[k]; ++j) {
      const uint64_t seed = k * 1000 + uint64_t(j);
      const Image img = random_image(j % 2 ? 9 : 12, j % 2 ? 13 : 10, j % 3 == 2 ? 1 : 3, seed);
      fs::create_directories(root / kFolderClasses[k]);
      write_png((root / kFolderClasses[k] / ("img_" + std::to_string(j) + ".png")).string(), img);
    }
}

// IDX pair (train split) with n samples of h x w and labels below `classes`.
void write_idx(const fs::path& dir, int n, int h, int w, int classes, uint64_t seed) {
  auto header = [](std::vector<uint32_t> dims, uint8_t ndims) {
    Bytes b = {0, 0, 0x08, ndims};
    for (uint32_t d : dims)
      for (int s = 24; s >= 0; s -= 8) b.push_back(uint8_t(d >> s));
    return b;
  };
  Bytes images = header({uint32_t(n), uint32_t(h), uint32_t(w)}, 3), labels = header({uint32_t(n)}, 1);
  const Image px = random_image(n, h * w, 1, seed);
  images.insert(images.end(), px.pixels.begin(), px.pixels.end());
  const Rng rng(seed, 12);
  for (int i = 0; i < n; ++i)  // every class present, the rest random
    labels.push_back(uint8_t(i < classes ? i : int(rng.below(uint64_t(i), uint64_t(classes)))));
  spit((dir / "train-images-idx3-ubyte").string(), images);
  spit((dir / "train-labels-idx1-ubyte").string(), labels);
}

// Every regular file under `root` (relative path -> bytes).
std::map<std::string, std::string> tree(const fs::path& root) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(root))
    if (e.is_regular_file()) out[fs::relative(e.path(), root).string()] = slurp(e.path().string());
  return out;
}

// The dataset index a written PNG came from: its name starts with the zero-padded index.
uint64_t index_of(const std::string& path) {
  const std::string stem = fs::path(path).stem().string();
  return std::stoull(stem.substr(0, stem.find('_')));
}

std::unique_ptr<Dataset> open(const std::string& kind, const std::string& path, const std::string& split = "train") {
  DatasetSpec spec;
  spec.kind = kind;
  spec.path = path;
  spec.split = split;
  return open_dataset(spec);
}

using testing::expect_cli_error;
using testing::shell_quote;

const std::string kFashion = kFashionMnistDefaultPath;
void require_fashion_mnist() {
  REQUIRE_MESSAGE(fs::exists(fs::path(kFashion) / "train-images-idx3-ubyte.gz"),
                  "Fashion-MNIST not found in ", kFashion, " (make deps installs dataset-fashion-mnist)");
}

}  // namespace

// ---- sampling ----------------------------------------------------------------------------------

TEST_CASE("data tools: apportion is Hamilton's method with exact sums and bounds") {
  // Reference: floors, then the largest remainders (ties to the lower index), written directly.
  auto hamilton = [](const std::vector<size_t>& w, size_t total) {
    const size_t W = std::accumulate(w.begin(), w.end(), size_t(0));
    std::vector<size_t> q(w.size());
    std::vector<std::pair<size_t, size_t>> rem;  // (remainder numerator, index)
    size_t sum = 0;
    for (size_t k = 0; k < w.size(); ++k) q[k] = total * w[k] / W, sum += q[k], rem.push_back({total * w[k] % W, k});
    std::stable_sort(rem.begin(), rem.end(), [](auto a, auto b) { return a.first > b.first; });
    for (size_t j = 0; sum < total; ++j, ++sum) ++q[rem[j].second];
    return q;
  };
  const Rng rng(3, 1);
  for (uint64_t t = 0; t < 300; ++t) {
    const size_t K = 1 + rng.below(4 * t, 12);
    std::vector<size_t> w(K);
    for (size_t k = 0; k < K; ++k) w[k] = rng.below(4 * t + 1 + 1000 * k, 50);
    w[0] += 1;  // W > 0
    const size_t W = std::accumulate(w.begin(), w.end(), size_t(0));
    const size_t total = rng.below(4 * t + 2, W + 1);
    const std::vector<size_t> zeros(K, 0);
    const std::vector<size_t> q = apportion(w, total, zeros, w);
    REQUIRE(q == hamilton(w, total));
    REQUIRE(std::accumulate(q.begin(), q.end(), size_t(0)) == total);
  }
  // Bounds move shares and the total stays exact.
  const std::vector<size_t> w = {90, 9, 1}, lo = {0, 1, 1}, hi = {90, 9, 1};
  CHECK(apportion(w, 10, lo, hi) == std::vector<size_t>{8, 1, 1});
  CHECK(apportion(w, 3, lo, hi) == std::vector<size_t>{1, 1, 1});
  expect_error([&] { apportion(w, 1, lo, hi); }, "cannot share 1");

  // stratified_quotas: one of every class when the size allows, none beyond a class's count.
  const std::vector<size_t> counts = {1000, 1, 1, 0, 20};
  // Hamilton alone gives {10, 0, 0, 0, 0}; the two small classes and class 4 each take one.
  CHECK(stratified_quotas(counts, 10) == std::vector<size_t>{7, 1, 1, 0, 1});
  CHECK(stratified_quotas(counts, 1022) == counts);
  const std::vector<size_t> q2 = stratified_quotas(counts, 2);  // fewer than the 4 non-empty classes
  CHECK(q2 == std::vector<size_t>{2, 0, 0, 0, 0});
  expect_error([&] { stratified_quotas(counts, 1023); }, "cannot sample 1023 of 1022");
}

TEST_CASE("data tools: stratified split is exact, disjoint, proportional and seeded") {
  const std::vector<size_t> sizes = {300, 150, 90, 40, 12, 3, 1};
  std::vector<int32_t> labels;
  for (size_t k = 0; k < sizes.size(); ++k) labels.insert(labels.end(), sizes[k], int32_t(k));
  // Interleave the classes so dataset order is not class order.
  {
    const Rng rng(9, 9);
    for (size_t i = labels.size() - 1; i > 0; --i) std::swap(labels[i], labels[rng.below(i, i + 1)]);
  }
  const int K = int(sizes.size());
  const size_t n = labels.size();
  for (const size_t size : {size_t(1), size_t(7), size_t(50), size_t(200), n}) {
    for (const double f : {0.0, 0.2, 0.5, 1.0}) {
      CAPTURE(size);
      CAPTURE(f);
      const StratifiedSplit s = stratified_split(labels, K, size, f, 42);
      REQUIRE(s.train.size() + s.test.size() == size);
      REQUIRE(s.test.size() == size_t(std::llround(double(size) * f)));
      REQUIRE(std::is_sorted(s.train.begin(), s.train.end()));
      REQUIRE(std::is_sorted(s.test.begin(), s.test.end()));
      std::set<uint64_t> all(s.train.begin(), s.train.end());
      all.insert(s.test.begin(), s.test.end());
      REQUIRE(all.size() == size);  // every sample at most once, train and test disjoint
      REQUIRE(*all.rbegin() < n);
      std::vector<size_t> per(size_t(K), 0), test(size_t(K), 0);
      for (uint64_t i : all) ++per[size_t(labels[i])];
      for (uint64_t i : s.test) ++test[size_t(labels[i])];
      REQUIRE(per == stratified_quotas(sizes, size));
      // Proportional within one sample, plus one for each class lifted to its first sample.
      double lifted = 0;
      for (int k = 0; k < K; ++k) lifted += size >= size_t(K) && double(size) * double(sizes[size_t(k)]) < double(n);
      for (int k = 0; k < K; ++k) {
        const double ideal = double(size) * double(sizes[size_t(k)]) / double(n);
        if (size >= size_t(K)) CHECK(per[size_t(k)] >= 1);
        CHECK(std::fabs(double(per[size_t(k)]) - ideal) < 1.0 + lifted);
        // Test shares follow the class shares of the sample (bounds may move one unit).
        const double ideal_test = double(s.test.size()) * double(per[size_t(k)]) / double(size);
        CHECK(std::fabs(double(test[size_t(k)]) - ideal_test) < 2.0);
        if (f > 0 && f < 1 && per[size_t(k)] >= 2 && size == 200) {
          CHECK(test[size_t(k)] >= 1);
          CHECK(test[size_t(k)] < per[size_t(k)]);
        }
      }
    }
  }
  // A seed is a pure function; another seed gives another sample.
  const StratifiedSplit a = stratified_split(labels, K, 200, 0.2, 1), b = stratified_split(labels, K, 200, 0.2, 1),
                        c = stratified_split(labels, K, 200, 0.2, 2);
  CHECK(a.train == b.train);
  CHECK(a.test == b.test);
  CHECK(a.train != c.train);
  // Within a class every sample is about equally likely: over 300 seeds, class 0 (300 samples,
  // 101 drawn each time) gives each sample about 101 picks; a biased draw (first samples, one
  // end of the class) lands far outside this band.
  std::map<uint64_t, int> picks;
  for (uint64_t seed = 0; seed < 300; ++seed) {
    const StratifiedSplit s = stratified_split(labels, K, 200, 0.2, seed);
    for (const auto* part : {&s.train, &s.test})
      for (uint64_t i : *part)
        if (labels[i] == 0) ++picks[i];
  }
  REQUIRE(picks.size() == 300);
  for (const auto& [i, count] : picks)
    CHECK_MESSAGE((count > 60 && count < 145), "sample ", i, " picked ", count, " times");
  expect_error([&] { stratified_split(labels, K, n + 1, 0.2, 0); }, "cannot sample");
  expect_error([&] { stratified_split(labels, K, 5, 1.5, 0); }, "test fraction 1.5");
}

TEST_CASE("data tools: flag parsing, class folder names, CSV quoting") {
  CHECK(parse_resize("64", "--resize").shorter == 64);
  const ResizeSpec r = parse_resize("32x48", "--resize");
  CHECK((r.height == 32 && r.width == 48 && r.shorter == 0));
  for (const char* bad : {"", "0", "x", "64x", "x64", "-3", "12x0", "3.5", "70000"})
    expect_error([&] { parse_resize(bad, "--resize"); }, "--resize: '" + std::string(bad) + "'");
  CHECK(parse_u64("123", "--size") == 123);
  expect_error([] { parse_u64("-1", "--size"); }, "--size: '-1' is not a non-negative integer");
  expect_error([] { parse_double("0.2x", "--fraction"); }, "--fraction: '0.2x' is not a number");

  // Names that already sort and are valid are kept; otherwise label-prefixed, still sorting.
  const std::vector<std::string> cifar = {"airplane", "automobile", "bird"};
  CHECK(class_folder_names(cifar) == cifar);
  const std::vector<std::string> fm = class_folder_names(fashion_mnist_classes());
  CHECK(fm[0] == "0_T-shirt_top");
  CHECK(fm[9] == "9_Ankle boot");
  CHECK(std::is_sorted(fm.begin(), fm.end()));
  std::vector<std::string> eleven;
  for (int k = 0; k < 11; ++k) eleven.push_back(std::to_string(k));
  const std::vector<std::string> e = class_folder_names(eleven);
  CHECK(e[2] == "02_2");
  CHECK(std::is_sorted(e.begin(), e.end()));
  CHECK(class_folder_names({".hidden", "b"})[0] == "0__hidden");

  CHECK(csv_field("a/b.png") == "a/b.png");
  CHECK(csv_field("a,b \"c\".png") == "\"a,b \"\"c\"\".png\"");
  const std::vector<CsvRecord> back = parse_csv("x," + csv_field("a,b \"c\"\n.png") + "\n", "t");
  REQUIRE(back.size() == 1);
  CHECK(back[0].fields[1] == "a,b \"c\"\n.png");
  CHECK(format_flag_values(std::vector<double>{0.28604, 0.35302}) == "0.2860,0.3530");

  // The reported error is the lowest failing index's, whatever the thread count; every index
  // below it runs.
  for (const int threads : {1, 2, 7}) {
    std::vector<int> ran(200, 0), thread_of(200, -1);
    expect_error(
        [&] {
          parallel_for(200, threads, [&](size_t i, int t) {
            ran[i] = 1, thread_of[i] = t;
            MPICNN_CHECK(i != 17 && i != 5 && i != 150, "item ", i, " failed");
          });
        },
        "item 5 failed");
    CHECK(std::accumulate(ran.begin(), ran.begin() + 5, 0) == 5);
    CHECK(*std::max_element(thread_of.begin(), thread_of.end()) < threads);
  }
}

TEST_CASE("data tools: run_tool turns every error into one line naming the tool, exit 1") {
  struct Outcome {
    int rc;
    std::string err;
  };
  auto outcome = [](const std::function<int()>& body) {
    std::ostringstream err;
    const int rc = run_tool("tool_x", body, err);
    return Outcome{rc, err.str()};
  };
  const Outcome ok = outcome([] { return 0; });
  CHECK((ok.rc == 0 && ok.err.empty()));
  CHECK(outcome([] { return 3; }).rc == 3);  // the body's own exit code passes through

  // An Error prints its message() alone (not what()'s file and line), newlines flattened.
  const Outcome error = outcome([]() -> int { MPICNN_FAIL("--size: 'x' is not\na number"); });
  CHECK(error.rc == 1);
  CHECK(error.err == "tool_x: --size: 'x' is not a number\n");
  // A Boost flag error points to --help.
  const Outcome flag = outcome([]() -> int { throw boost::program_options::unknown_option("--bogus"); });
  CHECK(flag.rc == 1);
  CHECK(flag.err == "tool_x: unrecognised option '--bogus' (see --help)\n");
  const Outcome other = outcome([]() -> int { throw std::runtime_error("disk\rfull"); });
  CHECK(other.rc == 1);
  CHECK(other.err == "tool_x: disk full\n");
}

TEST_CASE("data tools: parse_class_list takes indices, ranges and names, and names the flag") {
  const std::vector<std::string> names = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal"};
  CHECK(parse_class_list("0-2", names, "--classes") == std::vector<int>{0, 1, 2});
  CHECK(parse_class_list("5,3-4,0", names, "--classes") == std::vector<int>{5, 3, 4, 0});
  CHECK(parse_class_list("T-shirt/top,Coat", names, "--classes") == std::vector<int>{0, 4});
  expect_error([&] { parse_class_list("6", names, "--classes"); }, "--classes: class 6 is out of range");
  expect_error([&] { parse_class_list("3-1", names, "--classes"); }, "--classes: range 3-1 runs backwards");
  expect_error([&] { parse_class_list("0-2,Trouser", names, "--classes"); },
               "--classes: class 1 (Trouser) is listed twice");
  expect_error([&] { parse_class_list("Shirt", names, "--classes"); }, "--classes: 'Shirt' is neither");
  expect_error([&] { parse_class_list("1-2-3", names, "--classes"); }, "--classes: '1-2-3' is neither");
}

// ---- create_dataset ---------------------------------------------------------------------------

TEST_CASE("data tools: create_dataset from an image folder reads back through the CSV dataset") {
  TempDir dir;
  const std::vector<int> counts = {12, 7, 5, 3};
  make_image_folder(dir.path / "src", counts);
  const auto src = open("imagefolder", dir / "src");
  std::map<std::string, uint64_t> index_of_path;  // canonical source file -> dataset index
  for (size_t i = 0; i < src->size(); ++i) index_of_path[fs::canonical(src->source(i)).string()] = i;

  CreateOptions opt;
  opt.output = dir / "out";
  opt.size = 20;
  opt.test_fraction = 0.25;
  opt.seed = 5;
  const CreateReport rep = create_dataset(*src, opt);
  const StratifiedSplit want = stratified_split(dataset_labels(*src), 4, 20, 0.25, 5);
  // Quotas {9, 5, 4, 2} (27 -> 20 by largest remainders); test 5 = {2, 1, 1, 1}: every class
  // with two or more keeps one on each side.
  CHECK(rep.train == std::vector<size_t>{7, 4, 3, 1});
  CHECK(rep.test == std::vector<size_t>{2, 1, 1, 1});
  CHECK(fs::exists(dir.path / "out" / "classes.txt"));
  CHECK_FALSE(fs::exists(dir.path / "out" / "images"));  // the original files are named

  for (const auto& [part, indices] : {std::pair{"train", want.train}, std::pair{"test", want.test}}) {
    const std::string csv = (dir.path / "out" / (std::string(part) + ".csv")).string();
    // Relative paths: the output and the images share a folder.
    CHECK(slurp(csv).find("\n../src/") != std::string::npos);
    const FileListData back = read_csv_dataset(csv, "train", true);
    CHECK(back.class_names == kFolderClasses);
    REQUIRE(back.size() == indices.size());
    for (size_t j = 0; j < back.size(); ++j) {
      const uint64_t i = index_of_path.at(fs::canonical(back.paths[j]).string());
      CHECK(i == indices[j]);  // the seeded sample, in dataset order
      CHECK(back.labels[j] == src->label(i));
    }
  }
  // Loaded through the CSV dataset, the pixels are the source's.
  const auto train = open("csv", dir / "out/train.csv");
  for (size_t j = 0; j < train->size(); ++j)
    require_same(train->load(j, 0), src->load(want.train[j], 0), train->source(j));

  // A non-empty output is refused; --force replaces the earlier output of create_dataset.
  expect_error([&] { create_dataset(*src, opt); }, "out: output folder is not empty (--force writes into it)");
  opt.force = true;
  opt.single_csv = true;
  create_dataset(*src, opt);
  CHECK_FALSE(fs::exists(dir.path / "out" / "train.csv"));  // the earlier run's CSVs are gone
  const FileListData one_train = read_csv_dataset(dir / "out/data.csv", "train", false);
  const FileListData one_test = read_csv_dataset(dir / "out/data.csv", "test", false);
  REQUIRE(one_train.size() == want.train.size());
  REQUIRE(one_test.size() == want.test.size());
  for (size_t j = 0; j < one_test.size(); ++j)
    CHECK(index_of_path.at(fs::canonical(one_test.paths[j]).string()) == want.test[j]);

  // In someone else's non-empty folder, --force writes CSVs but will not mix into a folder.
  fs::create_directories(dir.path / "theirs" / "images");
  spit(dir / "theirs/images/x.png", Bytes{1});
  CreateOptions o2 = opt;
  o2.output = dir / "theirs";
  expect_error([&] { create_dataset(*src, o2); }, "images: exists and was not written by create_dataset");
}

TEST_CASE("data tools: create_dataset --resize writes PNGs identical for any thread count") {
  TempDir dir;
  make_image_folder(dir.path / "src", {9, 6, 4, 2});
  const auto src = open("imagefolder", dir / "src");
  CreateOptions opt;
  opt.fraction = 0.6;  // round(0.6 * 21) = 13
  opt.seed = 11;
  opt.resize = parse_resize("8", "--resize");
  opt.threads = 1;
  opt.output = dir / "a/out";
  const CreateReport rep = create_dataset(*src, opt);
  CHECK(rep.images_written == 13);
  opt.threads = 2;
  opt.output = dir / "b/out";
  create_dataset(*src, opt);
  const auto ta = tree(dir.path / "a/out"), tb = tree(dir.path / "b/out");
  CHECK(ta.size() == 13 + 3 + 1);  // images, two CSVs and classes.txt, the marker
  CHECK(ta == tb);                 // byte-identical

  const auto back = open("csv", dir / "a/out/train.csv");
  const auto test = open("csv", dir / "a/out/test.csv");
  CHECK(back->size() + test->size() == 13);
  for (const Dataset* ds : {back.get(), test.get()})
    for (size_t j = 0; j < ds->size(); ++j) {
      const uint64_t i = index_of(ds->source(j));
      CHECK(ds->label(j) == src->label(i));
      const Image img = ds->load(j, 0);
      CHECK(std::min(img.height, img.width) == 8);
      require_same(img, resize_shorter(src->load(i, 0), 8), ds->source(j));
    }
  // The images folder is itself an image folder with the same labels.
  const FileListData as_folder = scan_image_folder(dir / "a/out/images", "train");
  for (size_t j = 0; j < as_folder.size(); ++j) CHECK(as_folder.labels[j] == src->label(index_of(as_folder.paths[j])));

  // HxW gives exactly that size.
  opt.resize = parse_resize("5x7", "--resize");
  opt.output = dir / "c";
  create_dataset(*src, opt);
  const Image one = open("csv", dir / "c/train.csv")->load(0, 0);
  CHECK((one.height == 5 && one.width == 7));
}

TEST_CASE("data tools: create_dataset from IDX files writes the samples as PNGs") {
  TempDir dir;
  write_idx(dir.path / "idx", 60, 5, 4, 4, 77);
  const auto src = open("idx", dir / "idx");
  CreateOptions opt;
  opt.output = dir / "out";
  opt.size = 40;
  opt.seed = 3;
  const CreateReport rep = create_dataset(*src, opt);
  CHECK(rep.images_written == 40);
  const StratifiedSplit want = stratified_split(dataset_labels(*src), 4, 40, 0.2, 3);
  for (const auto& [part, indices] : {std::pair{"train", want.train}, std::pair{"test", want.test}}) {
    const auto back = open("csv", (dir.path / "out" / (std::string(part) + ".csv")).string());
    CHECK(back->class_names() == src->class_names());  // classes.txt: all 10 IDX classes
    REQUIRE(back->size() == indices.size());
    for (size_t j = 0; j < back->size(); ++j) {
      const uint64_t i = index_of(back->source(j));
      CHECK(i == indices[j]);
      CHECK(back->label(j) == src->label(i));
      require_same(back->load(j, 0), src->load(i, 0), back->source(j));
    }
  }
  opt.output = dir / "out2";
  opt.size = 61;
  expect_error([&] { create_dataset(*src, opt); }, "--size: 61 is more than the 60 samples");
  CHECK_FALSE(fs::exists(dir.path / "out2"));  // nothing created for a request that cannot work
}

// ---- export_images ----------------------------------------------------------------------------

TEST_CASE("data tools: export_images of Fashion-MNIST reads back as an image folder") {
  require_fashion_mnist();
  TempDir dir;
  const std::string out = dir / "png";
  const RunResult r = testing::run_program("export_images", {"-o", out, "--limit", "300", "--threads", "2"});
  REQUIRE_MESSAGE(r.rc == 0, r.output);
  CHECK(r.output.find("9_Ankle boot") != std::string::npos);
  for (const std::string split : {"train", "test"}) {
    const auto src = open("fashion-mnist", "", split);
    const FileListData back = scan_image_folder(out, split);
    CHECK(back.class_names == class_folder_names(fashion_mnist_classes()));
    REQUIRE(back.size() == 300);
    std::set<uint64_t> seen;
    for (size_t j = 0; j < back.size(); ++j) {
      const uint64_t i = index_of(back.paths[j]);
      REQUIRE(i < 300);
      seen.insert(i);
      CHECK(back.labels[j] == src->label(i));
      require_same(read_image(back.paths[j], 0), src->load(i, 0), back.paths[j]);
    }
    CHECK(seen.size() == 300);
    // Within a class the folder order is the source order (zero-padded names).
    for (size_t j = 1; j < back.size(); ++j)
      if (back.labels[j] == back.labels[j - 1]) CHECK(index_of(back.paths[j - 1]) < index_of(back.paths[j]));
  }
  // --force over an earlier export replaces its split folders: no stale image is read back.
  const auto train = open("fashion-mnist", "", "train");
  ExportOptions again;
  again.output = out;
  again.limit = 120;
  expect_error([&] { export_images({{"train", train.get()}}, again); }, "output folder is not empty");
  again.force = true;
  export_images({{"train", train.get()}}, again);
  CHECK(scan_image_folder(out, "train").size() == 120);
  CHECK(scan_image_folder(out, "test").size() == 300);  // not asked for: kept

  // Too few samples to have every class: refused before anything is written.
  const auto test = open("fashion-mnist", "", "test");
  ExportOptions opt;
  opt.output = dir / "tiny";
  opt.limit = 3;
  expect_error([&] { export_images({{"test", test.get()}}, opt); }, "has no sample among the first 3 (raise --limit)");
  CHECK_FALSE(fs::exists(dir.path / "tiny"));
}

TEST_CASE("data tools: a LeNet pretrained on Fashion-MNIST fine-tunes on its exported gray PNGs with --in-channels 1, and pipeline_eval -c reads them so") {
  require_fashion_mnist();
  TempDir dir;
  const std::string pre = dir / "pre", png = dir / "png", ft = dir / "ft", ev = dir / "eval";
  const std::vector<std::string> quick = {"-m", "lenet", "-e", "1", "--threads", "2", "--workers", "1",
                                          "--progress", "none"};
  auto with = [](std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  // LeNet on the IDX files (1 channel), then the same kind of images as PNG files.
  RunResult r = testing::run_program("train", with(quick, {"-b", "128", "-s", pre}));
  REQUIRE_MESSAGE(r.rc == 0, r.output);
  r = testing::run_program("export_images", {"-o", png, "--limit", "500", "--threads", "2"});
  REQUIRE_MESSAGE(r.rc == 0, r.output);
  // Image folders load as RGB (torchvision's loader): the 1-channel weights say what to pass.
  const std::vector<std::string> tune = with(quick, {"-d", png, "-b", "32", "--init-weights",
                                                      pre + "/latest/model.safetensors"});
  testing::expect_cli_error("train", with(tune, {"-s", dir / "rgb"}),
                            "the weights take 1-channel input; pass --in-channels 1");
  r = testing::run_program("train", with(tune, {"--in-channels", "1", "-s", ft}));
  REQUIRE_MESSAGE(r.rc == 0, r.output);
  const auto json_of = [](const std::string& path) { return nlohmann::json::parse(std::ifstream(path)); };
  // The checkpoint records the 1-channel input; ./pipeline_eval -c decodes the PNGs that way
  // and gets the run's own test top-1 (the pretrained weights carried over: well above chance).
  CHECK(json_of(ft + "/latest/trainer.json")["input"]["channels"] == 1);
  const double top1 = json_of(ft + "/summary.json")["test_top1"];
  CHECK(top1 > 0.4);
  r = testing::run_mpi(3, "pipeline_eval", {"-c", ft, "-o", ev, "--threads", "1"});
  REQUIRE_MESSAGE(r.rc == 0, r.output);
  CHECK(std::fabs(json_of(ev + "/report.json")["top1"].get<double>() - top1) <= 0.01);
}

// ---- dataset_stats ----------------------------------------------------------------------------

TEST_CASE("data tools: dataset_stats equals a direct computation") {
  require_fashion_mnist();
  // Direct: sum and sum of squared deviations in long double over every pixel of every used image.
  auto direct = [](const Dataset& ds, const std::vector<uint64_t>& used, int C, const ResizeSpec& rs) {
    std::vector<long double> sum(size_t(C), 0), sq(size_t(C), 0);
    std::vector<Image> imgs;
    for (uint64_t i : used) imgs.push_back(rs.apply(ds.load(i, C)));
    long double n = 0;
    for (const Image& img : imgs) {
      n += (long double)img.height * img.width;
      for (size_t p = 0; p < img.pixels.size(); ++p) sum[p % size_t(C)] += img.pixels[p] / 255.0L;
    }
    std::vector<double> mean(static_cast<size_t>(C)), sd(static_cast<size_t>(C));
    for (int c = 0; c < C; ++c) mean[size_t(c)] = double(sum[size_t(c)] / n);
    for (const Image& img : imgs)
      for (size_t p = 0; p < img.pixels.size(); ++p) {
        const long double d = img.pixels[p] / 255.0L - mean[p % size_t(C)];
        sq[p % size_t(C)] += d * d;
      }
    for (int c = 0; c < C; ++c) sd[size_t(c)] = double(std::sqrt(sq[size_t(c)] / n));
    return std::pair{mean, sd};
  };

  const auto fm = open("fashion-mnist", "");
  StatsOptions opt;
  opt.limit = 1500;
  opt.seed = 4;
  opt.threads = 1;
  const DatasetStats s1 = dataset_stats(*fm, opt);
  opt.threads = 2;
  const DatasetStats s2 = dataset_stats(*fm, opt);
  CHECK(s1.mean == s2.mean);  // bit for bit: integer counts do not care about threads
  CHECK(s1.stddev == s2.stddev);
  const std::vector<uint64_t> used = stratified_split(dataset_labels(*fm), 10, 1500, 0.0, 4).train;
  const auto [mean, sd] = direct(*fm, used, 1, ResizeSpec{});
  CHECK(s1.used == 1500);
  CHECK(s1.pixels == 1500u * 784u);
  CHECK(s1.mean[0] == doctest::Approx(mean[0]).epsilon(1e-12));
  CHECK(s1.stddev[0] == doctest::Approx(sd[0]).epsilon(1e-12));
  CHECK(s1.mean[0] == doctest::Approx(0.286).epsilon(0.03));  // the known train statistics
  CHECK(s1.stddev[0] == doctest::Approx(0.353).epsilon(0.03));
  CHECK(s1.counts == std::vector<size_t>(10, 6000));
  CHECK(s1.used_counts == std::vector<size_t>(10, 150));

  // Resized first.
  opt.limit = 200;
  opt.resize = parse_resize("14x20", "--resize");
  const DatasetStats rs = dataset_stats(*fm, opt);
  const auto [rmean, rsd] = direct(*fm, stratified_split(dataset_labels(*fm), 10, 200, 0.0, 4).train, 1, opt.resize);
  CHECK(rs.pixels == 200u * 14u * 20u);
  CHECK(rs.mean[0] == doctest::Approx(rmean[0]).epsilon(1e-12));
  CHECK(rs.stddev[0] == doctest::Approx(rsd[0]).epsilon(1e-12));

  // Files with gray and RGB images: the first image decides (RGB), gray ones are replicated.
  TempDir dir;
  make_image_folder(dir.path / "src", {3, 3, 3, 3});
  const auto folder = open("imagefolder", dir / "src");
  const DatasetStats fs3 = dataset_stats(*folder, StatsOptions{});
  REQUIRE(fs3.channels == 3);
  std::vector<uint64_t> all(folder->size());
  std::iota(all.begin(), all.end(), uint64_t(0));
  const auto [fmean, fsd] = direct(*folder, all, 3, ResizeSpec{});
  for (int c = 0; c < 3; ++c) {
    CHECK(fs3.mean[size_t(c)] == doctest::Approx(fmean[size_t(c)]).epsilon(1e-12));
    CHECK(fs3.stddev[size_t(c)] == doctest::Approx(fsd[size_t(c)]).epsilon(1e-12));
  }
  CHECK(fs3.mean[0] != fs3.mean[1]);  // really per channel
}

TEST_CASE("data tools: dataset_stats program agrees with numpy on Fashion-MNIST test") {
  require_fashion_mnist();
  TempDir dir;
  const std::string json = dir / "stats.json";
  const RunResult r = testing::run_program("dataset_stats", {"-d", "fashion-mnist", "--split", "test", "--json", json});
  REQUIRE_MESSAGE(r.rc == 0, r.output);
  const char* py = std::getenv("PYTHON");
  const std::string script =
      "import gzip, json, sys, numpy as np\n"
      "d = json.load(open(sys.argv[1]))\n"
      "x = np.frombuffer(gzip.open(sys.argv[2]).read()[16:], np.uint8).astype(np.float64) / 255\n"
      "y = np.frombuffer(gzip.open(sys.argv[3]).read()[8:], np.uint8)\n"
      "assert d['images_used'] == 10000 and d['pixels_per_channel'] == x.size, d\n"
      "assert abs(d['mean'][0] - x.mean()) < 1e-12 and abs(d['std'][0] - x.std()) < 1e-12, (d, x.mean(), x.std())\n"
      "assert [c['count'] for c in d['classes']] == np.bincount(y, minlength=10).tolist()\n"
      "assert d['mean_flag'] == '%.4f' % x.mean() and d['std_flag'] == '%.4f' % x.std()\n"
      "print('--mean %.4f --std %.4f' % (x.mean(), x.std()))\n";
  const std::string cmd = shell_quote(py && *py ? py : "/usr/bin/python3") + " -c " + shell_quote(script) + " " + shell_quote(json) +
                          " " + shell_quote(kFashion + "/t10k-images-idx3-ubyte.gz") + " " +
                          shell_quote(kFashion + "/t10k-labels-idx1-ubyte.gz") + " 2>&1";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string out;
  char buf[4096];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, got);
  REQUIRE_MESSAGE(::pclose(pipe) == 0, "numpy check failed (PYTHON without numpy?): ", out);
  // The printed flag line is the one numpy computes.
  REQUIRE(!out.empty());
  CHECK_MESSAGE(r.output.find("trainer flags: " + out.substr(0, out.size() - 1)) != std::string::npos, r.output);
}

// ---- the programs -------------------------------------------------------------------------------

TEST_CASE("data tools CLI: --help exits 0 and names every option") {
  std::map<std::string, std::vector<std::string>> options = {
      {"create_dataset",
       {"--help", "--input", "--dataset", "--split", "--output", "--size", "--fraction", "--test-fraction", "--seed",
        "--single-csv", "--resize", "--absolute-paths", "--idx-classes", "--threads", "--force", "Examples:"}},
      {"export_images",
       {"--help", "--input", "--dataset", "--output", "--split", "--limit", "--idx-classes", "--threads", "--force",
        "Examples:"}},
      {"dataset_stats",
       {"--help", "--input", "--dataset", "--split", "--limit", "--seed", "--resize", "--channels", "--json",
        "--idx-classes", "--threads", "Examples:"}},
  };
  options["make_detection_dataset"] = {"--out", "--count", "--seed", "--classes", "--force"};
  for (const auto& [name, opts] : options) {
    const RunResult r = testing::run_program(name, {"--help"});
    CHECK_MESSAGE(r.rc == 0, name, " --help: exit ", r.rc);
    for (const std::string& o : opts)
      CHECK_MESSAGE(r.output.find(o) != std::string::npos, name, " --help does not mention ", o);
  }
}

TEST_CASE("data tools CLI: create_dataset runs, and every bad input is one line naming it") {
  TempDir dir;
  write_idx(dir.path / "idx", 30, 3, 3, 3, 5);
  const std::string idx = dir / "idx", out = dir / "out";
  const RunResult ok = testing::run_program("create_dataset", {"-i", idx, "-d", "idx", "-o", out, "-n", "20", "--idx-classes", "3"});
  REQUIRE_MESSAGE(ok.rc == 0, ok.output);
  CHECK(ok.output.find("total") != std::string::npos);
  CHECK(open("csv", out + "/train.csv")->size() + open("csv", out + "/test.csv")->size() == 20);

  const std::string C = "create_dataset";
  expect_cli_error(C, {"-i", idx, "-o", out, "--bogus"}, "unrecognised option '--bogus'");
  expect_cli_error(C, {"-o", out}, "--input is required");
  expect_cli_error(C, {"-i", idx}, "--output is required");
  expect_cli_error(C, {"-i", dir / "missing", "-o", dir / "o2"}, dir / "missing");
  expect_cli_error(C, {"-i", idx, "-o", dir / "o2", "--size", "0"}, "--size: must be at least 1");
  expect_cli_error(C, {"-i", idx, "-o", dir / "o2", "--size", "ten"}, "--size: 'ten'");
  expect_cli_error(C, {"-i", idx, "-o", dir / "o2", "--size", "-4"}, "--size: '-4'");
  expect_cli_error(C, {"-i", idx, "-o", dir / "o2", "--size", "5", "--fraction", "0.5"}, "--size and --fraction");
  expect_cli_error(C, {"-i", idx, "-o", dir / "o2", "--fraction", "1.5"}, "--fraction: 1.5 is outside (0, 1]");
  expect_cli_error(C, {"-i", idx, "-o", dir / "o2", "--test-fraction", "-0.1"}, "--test-fraction: -0.1");
  expect_cli_error(C, {"-i", idx, "-o", dir / "o2", "--resize", "0x5"}, "--resize: '0x5'");
  expect_cli_error(C, {"-i", idx, "-o", dir / "o2", "--threads", "0"}, "--threads: 0");
  expect_cli_error(C, {"-i", idx, "-o", dir / "o2", "--dataset", "foo"}, "--dataset: 'foo' is not one of");
  expect_cli_error(C, {"-i", idx, "-o", dir / "o2", "--split", "bar"}, "--split: 'bar' is not one of");
  expect_cli_error(C, {"-i", idx, "-d", "idx", "-o", dir / "o2", "--size", "31"}, "--size: 31 is more than the 30");
  expect_cli_error(C, {"-i", idx, "-d", "idx", "-o", out, "-n", "20"}, "output folder is not empty");
  expect_cli_error(C, {"-i", idx, "-d", "idx", "-o", dir / "o2", "--idx-classes", "2"},
                   "label 2 of sample 2 is outside [0, 2)");
  CHECK_FALSE(fs::exists(dir.path / "o2"));
  // --force over its own output works.
  const RunResult again = testing::run_program(C, {"-i", idx, "-d", "idx", "-o", out, "-n", "20", "--idx-classes", "3", "--force"});
  CHECK_MESSAGE(again.rc == 0, again.output);
}

TEST_CASE("data tools CLI: export_images and dataset_stats reject bad input with one line") {
  TempDir dir;
  write_idx(dir.path / "idx", 30, 3, 3, 3, 5);
  const std::string idx = dir / "idx";
  fs::create_directories(dir.path / "full");
  spit(dir / "full/x", Bytes{1});
  const std::string E = "export_images";
  expect_cli_error(E, {"-o", dir / "o", "--split", "nope"}, "--split: 'nope' is not one of train, test, both");
  expect_cli_error(E, {"-o", dir / "o", "--limit", "-3"}, "--limit: '-3'");
  expect_cli_error(E, {"-o", dir / "o", "--limit", "0"}, "--limit: must be at least 1");
  expect_cli_error(E, {"-i", dir / "missing", "-o", dir / "o"}, dir / "missing");
  expect_cli_error(E, {"--limit", "5"}, "--output is required");
  expect_cli_error(E, {"-o", dir / "full", "--limit", "100"}, "full: output folder is not empty");
  expect_cli_error(E, {"-i", idx, "-d", "idx", "-o", dir / "o", "--split", "test"}, "t10k-images-idx3-ubyte");
  expect_cli_error(E, {"-o", dir / "o", "--limit", "2", "--split", "train"}, "raise --limit");
  expect_cli_error(E, {"-i", dir / "full", "-d", "csv", "-o", dir / "o"}, "--dataset: 'csv' is not one of");
  expect_cli_error(E, {"-o", dir / "o", "--frobnicate"}, "unrecognised option '--frobnicate'");

  const std::string S = "dataset_stats";
  expect_cli_error(S, {}, "--input is required");
  expect_cli_error(S, {"-i", idx, "-d", "idx", "--channels", "2"}, "--channels: '2' is not one of 0, 1, 3");
  expect_cli_error(S, {"-i", idx, "-d", "idx", "--resize", "big"}, "--resize: 'big'");
  expect_cli_error(S, {"-i", idx, "-d", "idx", "--limit", "0"}, "--limit: must be at least 1");
  expect_cli_error(S, {"-i", dir / "missing"}, dir / "missing");
  expect_cli_error(S, {"-d", "synthetic", "--json", dir / "no/such/dir/s.json"}, dir / "no/such/dir/s.json");
  expect_cli_error(S, {"-i", idx, "--split", "test", "-d", "idx"}, "t10k-images-idx3-ubyte");
  const RunResult ok = testing::run_program(S, {"-i", idx, "-d", "idx", "--idx-classes", "3", "--resize", "6"});
  CHECK_MESSAGE(ok.rc == 0, ok.output);
  CHECK(ok.output.find("trainer flags: --mean 0.") != std::string::npos);
}

TEST_CASE("data tools: --skip-bad leaves a corrupt image out and reports it; without it, one error naming it") {
  TempDir dir;
  make_image_folder(dir.path / "src", {5, 4});
  // A truncated PNG in class 1: the dataset lists it, decoding fails.
  const fs::path broken = dir.path / "src" / kFolderClasses[1] / "img_broken.png";
  std::string bytes = slurp((dir.path / "src" / kFolderClasses[1] / "img_0.png").string());
  spit(broken.string(), Bytes(bytes.begin(), bytes.begin() + long(bytes.size() / 2)));
  const auto src = open("imagefolder", dir / "src");
  REQUIRE(src->size() == 10);

  StatsOptions so;
  so.threads = 2;
  expect_error([&] { dataset_stats(*src, so); }, "img_broken.png");
  so.skip_bad = true;
  const DatasetStats with_bad = dataset_stats(*src, so);
  REQUIRE(with_bad.skipped.size() == 1);
  CHECK(with_bad.skipped[0].source == broken.string());
  CHECK(with_bad.used == 9);
  CHECK(with_bad.used_counts == std::vector<size_t>{5, 4});
  CHECK(format_stats(with_bad).find("skipped 1 unreadable image") != std::string::npos);
  fs::remove(broken);  // the statistics are those of the readable images alone
  const DatasetStats clean = dataset_stats(*open("imagefolder", dir / "src"), so);
  CHECK(clean.skipped.empty());
  CHECK(clean.mean == with_bad.mean);
  CHECK(clean.stddev == with_bad.stddev);
  spit(broken.string(), Bytes(bytes.begin(), bytes.begin() + long(bytes.size() / 2)));

  CreateOptions co;
  co.fraction = 1.0;
  co.test_fraction = 0.3;
  co.resize = parse_resize("6", "--resize");
  co.output = dir / "a";
  expect_error([&] { create_dataset(*src, co); }, "img_broken.png");
  co.skip_bad = true;
  co.output = dir / "b";
  const CreateReport rep = create_dataset(*src, co);
  REQUIRE(rep.skipped.size() == 1);
  CHECK(rep.images_written == 9);
  const auto tr = open("csv", dir / "b/train.csv"), te = open("csv", dir / "b/test.csv");
  CHECK(tr->size() + te->size() == 9);
  for (const Dataset* ds : {tr.get(), te.get()})
    for (size_t j = 0; j < ds->size(); ++j) CHECK(ds->load(j, 0).height > 0);  // every row loads
  CHECK(format_report(rep).find("skipped 1 unreadable image") != std::string::npos);
}

TEST_CASE("data tools CLI: make_detection_dataset writes a VOC set that reads back, bad flags are one line") {
  TempDir dir;
  const std::string out = dir / "shapes";
  const RunResult ok = testing::run_program(
      "make_detection_dataset", {"--out", out, "--count", "4", "--seed", "3", "--classes", "circle,ring"});
  REQUIRE_MESSAGE(ok.rc == 0, ok.output);
  const data::DetectionSet set = data::read_voc_folder(out);
  CHECK(set.samples.size() == 4u);
  CHECK(set.classes == std::vector<std::string>{"circle", "ring"});
  CHECK(set.num_objects() >= 4u);
  CHECK(ok.output.find("wrote 4 images with " + std::to_string(set.num_objects()) + " objects") != std::string::npos);
  expect_cli_error("make_detection_dataset", {"--out", out, "--count", "4"}, "not empty");
  expect_cli_error("make_detection_dataset", {"--count", "4"}, "--out");
  expect_cli_error("make_detection_dataset", {"--out", dir / "x", "--count", "0"}, "--count");
  expect_cli_error("make_detection_dataset", {"--out", dir / "y", "--count", "2", "--classes", "hexagon"}, "hexagon");
}
