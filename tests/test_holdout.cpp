// The automatic validation split (data/holdout.h): per-class counts, stratification,
// determinism from the seed, disjointness from the training side, and which data holds one
// split only.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "data/holdout.h"
#include "data/image.h"
#include "testing.h"

using namespace mpicnn;
using namespace mpicnn::data;
namespace fs = std::filesystem;

TEST_CASE("holdout: per-class counts round, keep at least one of each side, skip single samples") {
  CHECK(holdout_count(100, 0.1) == 10);
  CHECK(holdout_count(15, 0.1) == 2);   // 1.5 rounds away from zero
  CHECK(holdout_count(14, 0.1) == 1);
  CHECK(holdout_count(4, 0.1) == 1);    // 0.4 rounds to 0: at least 1 of a class of >= 2
  CHECK(holdout_count(2, 0.1) == 1);
  CHECK(holdout_count(1, 0.5) == 0);    // a class of one sample keeps it for training
  CHECK(holdout_count(0, 0.5) == 0);
  CHECK(holdout_count(3, 0.9) == 2);    // never the whole class
  CHECK(holdout_count(100, 0) == 0);
  testing::expect_error([] { (void)holdout_count(10, 1.0); }, "not in [0, 1)");
  testing::expect_error([] { (void)holdout_count(10, -0.1); }, "not in [0, 1)");
}

TEST_CASE("holdout: stratified, deterministic from the seed, disjoint from the rest") {
  // Classes of 40, 25, 7, 2 and 1 samples, interleaved.
  const std::vector<int> sizes = {40, 25, 7, 2, 1};
  std::vector<int32_t> labels;
  for (int round = 0; round < 40; ++round)
    for (size_t c = 0; c < sizes.size(); ++c)
      if (round < sizes[c]) labels.push_back(int32_t(c));
  const std::vector<uint64_t> held = holdout_indices(labels, 0.2, 5);
  std::map<int32_t, uint64_t> per_class;
  for (const uint64_t i : held) ++per_class[labels[i]];
  CHECK(per_class[0] == 8);
  CHECK(per_class[1] == 5);
  CHECK(per_class[2] == 1);  // round(1.4)
  CHECK(per_class[3] == 1);  // at least one
  CHECK(per_class.count(4) == 0);
  CHECK(held.size() == 15);
  CHECK(std::is_sorted(held.begin(), held.end()));
  CHECK(std::adjacent_find(held.begin(), held.end()) == held.end());

  CHECK(holdout_indices(labels, 0.2, 5) == held);  // the same seed: the same samples
  CHECK(holdout_indices(labels, 0.2, 6) != held);  // another seed: others
  CHECK(holdout_indices(labels, 0, 5).empty());

  const std::vector<uint64_t> rest = complement(labels.size(), held);
  CHECK(rest.size() + held.size() == labels.size());
  std::set<uint64_t> all(rest.begin(), rest.end());
  for (const uint64_t i : held) CHECK(all.insert(i).second);  // disjoint
  CHECK(all.size() == labels.size());

  // The dataset form takes the labels the dataset reports, and subset_dataset keeps the ids.
  FileListData f;
  f.name = "list";
  f.class_names = {"a", "b", "c", "d", "e"};
  for (size_t i = 0; i < labels.size(); ++i) {
    f.paths.push_back("img" + std::to_string(i) + ".png");
    f.labels.push_back(labels[i]);
  }
  const FileListDataset ds(f);
  CHECK(holdout_indices(ds, 0.2, 5) == held);
  const auto sub = subset_dataset(ds, held);
  REQUIRE(sub->size() == held.size());
  for (size_t k = 0; k < held.size(); ++k) {
    CHECK(sub->id(k) == held[k]);
    CHECK(sub->label(k) == labels[held[k]]);
    CHECK(sub->source(k) == "img" + std::to_string(held[k]) + ".png");
  }
  CHECK(describe_holdout(0.1, 600) == "10% held out, 600 images, stratified");
}

TEST_CASE("holdout: which data holds one split only") {
  testing::TempDir dir;
  auto touch_png = [](const fs::path& p) {
    fs::create_directories(p.parent_path());
    Image img(4, 4, 1);
    write_png(p.string(), img);
  };
  const fs::path flat = dir.path / "flat", split = dir.path / "split", valonly = dir.path / "valonly";
  touch_png(flat / "cat" / "1.png");
  touch_png(split / "train" / "cat" / "1.png");
  touch_png(split / "test" / "cat" / "1.png");
  touch_png(valonly / "train" / "cat" / "1.png");
  touch_png(valonly / "val" / "cat" / "1.png");
  auto one = [](const fs::path& p, const std::string& kind = "auto") {
    DatasetSpec s;
    s.kind = kind;
    s.path = p.string();
    return holds_one_split(s);
  };
  CHECK(one(flat));
  CHECK(one(flat, "imagefolder"));
  CHECK_FALSE(one(split));
  CHECK_FALSE(one(valonly));
  std::ofstream(dir.path / "plain.csv") << "\xEF\xBB\xBFpath,label\nflat/cat/1.png,0\n";
  std::ofstream(dir.path / "withsplit.csv") << "path,\"label\", split\nflat/cat/1.png,0,train\n";
  CHECK(one(dir.path / "plain.csv"));
  CHECK_FALSE(one(dir.path / "withsplit.csv"));
  fs::create_directories(dir.path / "csvdir");
  std::ofstream(dir.path / "csvdir" / "train.csv") << "path,label\n../flat/cat/1.png,0\n";
  CHECK(one(dir.path / "csvdir"));
  std::ofstream(dir.path / "csvdir" / "test.csv") << "path,label\n../flat/cat/1.png,0\n";
  CHECK_FALSE(one(dir.path / "csvdir"));
  DatasetSpec synth;
  synth.kind = "synthetic";
  CHECK_FALSE(holds_one_split(synth));
}

TEST_CASE("holdout: class_subset keeps the listed classes, relabelled in the order given") {
  InMemoryData m;
  m.name = "mem";
  m.channels = m.height = m.width = 1;
  m.class_names = {"a", "b", "c", "d"};
  m.files = {"f"};
  for (int i = 0; i < 12; ++i) {
    m.pixels.push_back(uint8_t(i));
    m.labels.push_back(i % 4);
    m.file_index.push_back(0);
    m.record.push_back(uint64_t(i));
  }
  const InMemoryDataset ds(m);
  const std::vector<int> keep = {3, 1};
  const auto sub = class_subset(ds, keep);
  CHECK(sub->class_names() == std::vector<std::string>{"d", "b"});
  REQUIRE(sub->size() == 6);
  for (size_t k = 0; k < sub->size(); ++k) {
    const uint64_t i = sub->id(k);  // the full dataset's index
    CHECK(sub->label(k) == (m.labels[i] == 3 ? 0 : 1));
    CHECK(sub->load(k, 1).pixels[0] == uint8_t(i));
  }
  CHECK(sub->describe().find("mem (classes 3,1)") == 0);
  testing::expect_error([&] { (void)class_subset(ds, std::vector<int>{1, 1}); }, "class 1 is listed twice");
  testing::expect_error([&] { (void)class_subset(ds, std::vector<int>{4}); }, "no class 4 (it has 4)");
}
