// Tar shards (data/shards.h, data/shard_stream.h, the pack/unpack/inspect tools): brace
// patterns; what pack writes is what Python's tarfile reads, and shards Python writes from a
// torchvision ImageFolder are what we read (keys, labels, image bytes); the index and the scan
// agree; an epoch's stream is a seeded, complete, repeatable order whatever the loader threads;
// every damaged shard is one Error naming it.
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "data/image_folder.h"
#include "data/loader.h"
#include "data/shard_stream.h"
#include "data/shards.h"
#include "data/tools.h"
#include "testing.h"

using namespace mpicnn;
using namespace mpicnn::data;
namespace fs = std::filesystem;
using testing::expect_error;
using testing::shell_quote;

namespace {

// key -> (label, extension, size, crc32), as shards_python.py read prints it.
using Listing = std::map<std::string, std::tuple<int, std::string, size_t, unsigned long>>;

Listing python_listing(const std::vector<std::string>& tars) {
  std::string args = "read";
  for (const std::string& t : tars) args.append(" ").append(shell_quote(t));
  Listing out;
  std::istringstream in(testing::python_output("shards_python.py", args));
  std::string key, ext;
  int label;
  size_t size;
  unsigned long crc;
  while (in >> key >> label >> ext >> size >> crc) out[key] = {label, ext, size, crc};
  return out;
}

DatasetSpec spec(const std::string& kind, const std::string& path, const std::string& split) {
  DatasetSpec s;
  s.kind = kind;
  s.path = path;
  s.split = split;
  return s;
}

unsigned long crc_of(const std::vector<uint8_t>& b) { return crc32(0L, b.data(), uInt(b.size())); }

Listing our_listing(const std::vector<std::string>& tars, int classes = 0) {
  Listing out;
  for (const std::string& t : tars) {
    ShardReader r(t, classes);
    for (ShardSample s; r.next(s);) out[s.key] = {s.label, s.image_ext, s.image.size(), crc_of(s.image)};
  }
  return out;
}

std::vector<std::string> paths_of(const ShardSet& set) {
  std::vector<std::string> p;
  for (const ShardFile& f : set.shards) p.push_back(f.path);
  return p;
}

// A tar of the given members (name, bytes) written by Python's tarfile, so that member lists
// ShardWriter would refuse (no label, two images, no extension) can be built.
void python_tar(const std::string& path, const std::vector<std::pair<std::string, std::string>>& members) {
  std::string script = "import io,tarfile,sys\nt=tarfile.open(sys.argv[1],'w')\n";
  for (const auto& [name, data] : members)
    script += "d=" + std::string("b'") + data + "'\ni=tarfile.TarInfo('" + name + "');i.size=len(d);t.addfile(i,io.BytesIO(d))\n";
  script += "t.close()\n";
  const fs::path py = fs::path(path).replace_extension(".py");
  std::ofstream(py) << script;
  const char* env = std::getenv("PYTHON");
  const std::string cmd = shell_quote(env && *env ? env : "/usr/bin/python3") + " " + shell_quote(py.string()) + " " +
                          shell_quote(path);
  REQUIRE(std::system(cmd.c_str()) == 0);
}

}  // namespace

TEST_CASE("shards: brace patterns expand as WebDataset's braceexpand does") {
  CHECK(expand_braces("a.tar") == std::vector<std::string>{"a.tar"});
  CHECK(expand_braces("s-{000..002}.tar") == std::vector<std::string>{"s-000.tar", "s-001.tar", "s-002.tar"});
  CHECK(expand_braces("s-{8..10}.tar") == std::vector<std::string>{"s-8.tar", "s-9.tar", "s-10.tar"});
  CHECK(expand_braces("{train,test}-{0..1}.tar") ==
        std::vector<std::string>{"train-0.tar", "train-1.tar", "test-0.tar", "test-1.tar"});
  CHECK(expand_braces("d/x-{000098..000101}.tar").back() == "d/x-000101.tar");
  expect_error([] { expand_braces("s-{3..1}.tar"); }, "s-{3..1}.tar: the range {3..1} goes down");
  expect_error([] { expand_braces("s-{1..x}.tar"); }, "is not a range of numbers");
  expect_error([] { expand_braces("s-{000..001.tar"); }, "'{' without '}'");
  expect_error([] { expand_braces("s-000..001}.tar"); }, "'}' without '{'");
  expect_error([] { expand_braces("s-{a}.tar"); }, "neither a range {A..B} nor a list {a,b}");
  expect_error([] { expand_braces("s-{{0..1}}.tar"); }, "nested braces");
  CHECK(is_shard_path("nowhere/train-{000000..000146}.tar"));
  CHECK(!is_shard_path("nowhere/train-{000000..000146}.csv"));
}

TEST_CASE("shards: pack writes what Python's tarfile reads; Python's shards of an ImageFolder read back the same") {
  testing::TempDir dir;
  testing::run_python("shards_python.py", "folder " + shell_quote(dir / "img") + " 12 3");
  const std::unique_ptr<Dataset> train = open_dataset(spec("imagefolder", dir / "img", "train"));
  const std::unique_ptr<Dataset> test = open_dataset(spec("imagefolder", dir / "img", "test"));
  PackOptions opt;
  opt.output = dir / "ours";
  opt.shard_samples = 10;
  opt.seed = 5;
  const std::vector<PackedSplit> packed = pack_shards({{"train", train.get()}, {"test", test.get()}}, opt);
  REQUIRE(packed.size() == 2);
  CHECK(packed[0].files.size() == 4);  // 36 samples, 10 a shard
  CHECK(packed[0].samples == 36);
  CHECK(packed[1].samples == 9);

  // Python reads our shards: every key, its label and image bytes as the source dataset has them
  // (keys are positions in the seeded order of the training split).
  const Listing py = python_listing(packed[0].files);
  REQUIRE(py.size() == 36);
  const std::vector<uint64_t> order = shuffled_order(36, 5, 0);
  for (size_t k = 0; k < 36; ++k) {
    const auto& [label, ext, size, crc] = py.at(std::string(6 - std::to_string(k).size(), '0') + std::to_string(k));
    CHECK(label == train->label(order[k]));
    CHECK(ext == "jpg");
    CHECK(crc == crc_of(train->read(order[k])));
  }
  CHECK(our_listing(packed[0].files) == py);

  // The index and a scan agree (the scan names the classes by number).
  const ShardSet indexed = open_shard_set(dir / "ours", "train");
  CHECK(indexed.size() == 36);
  CHECK(indexed.class_names == train->class_names());
  CHECK(open_shard_set(dir / "ours", "test").size() == 9);
  CHECK(open_shard_set(dir / "ours", "all").size() == 45);
  CHECK(!shards_hold_one_split(dir / "ours"));
  const ShardSet pattern = open_shard_set(dir / "ours/train-{000000..000003}.tar", "all");
  CHECK(paths_of(pattern) == packed[0].files);
  CHECK(pattern.class_names == train->class_names());  // the index beside the shards
  fs::copy(dir / "ours", dir / "noindex", fs::copy_options::recursive);
  fs::remove(dir / "noindex/shards.json");
  const ShardSet scanned = open_shard_set(dir / "noindex", "train");
  CHECK(scanned.size() == 36);
  CHECK(scanned.class_names == std::vector<std::string>{"0", "1", "2"});
  for (size_t s = 0; s < scanned.shards.size(); ++s) CHECK(scanned.shards[s].samples == indexed.shards[s].samples);
  std::ofstream(dir / "list.txt") << "# two shards\nours/train-000001.tar\n\n" << (dir / "ours/train-000003.tar") << "\n";
  const ShardSet listed = open_shard_set(dir / "list.txt", "train");
  CHECK(listed.shards.size() == 2);
  CHECK(listed.size() == 16);
  CHECK(listed.shards[1].first_id == 10);
  expect_error([&] { open_shard_set(dir / "list.txt", "test"); }, "no test shards (a shard pattern, list or file is one split)");
  expect_error([&] { open_shard_set(dir / "ours/train-{000000..000009}.tar", "all"); }, "train-000004.tar: no such shard");

  // Python's shards of torchvision's ImageFolder: the same keys, labels and bytes here.
  testing::run_python("shards_python.py", "write " + shell_quote(dir / "img/train") + " " + shell_quote(dir / "py") + " 16");
  const ShardSet theirs = open_shard_set(dir / "py", "train");
  CHECK(theirs.shards.size() == 3);
  CHECK(theirs.size() == 36);
  CHECK(our_listing(paths_of(theirs), 3) == python_listing(paths_of(theirs)));

  // unpack: an image folder with the same labels and bytes.
  unpack_shards({{"train", &indexed}}, {dir / "unpacked", false});
  const std::unique_ptr<Dataset> back = open_dataset(spec("imagefolder", dir / "unpacked", "train"));
  REQUIRE(back->size() == 36);
  CHECK(back->class_names() == train->class_names());
  std::multiset<std::pair<int, unsigned long>> a, b;
  for (size_t i = 0; i < 36; ++i) a.insert({train->label(i), crc_of(train->read(i))}), b.insert({back->label(i), crc_of(back->read(i))});
  CHECK(a == b);
}

TEST_CASE("shards: an epoch's stream is complete, seeded and the same for any loader threads") {
  testing::TempDir dir;
  InMemoryData d;
  d.name = "tiny";
  d.channels = 1, d.height = 2, d.width = 2;
  d.class_names = {"a", "b", "c"};
  d.files = {"tiny.bin"};
  for (int i = 0; i < 50; ++i) {
    for (int p = 0; p < 4; ++p) d.pixels.push_back(uint8_t(i * 4 + p));
    d.labels.push_back(i % 3);
    d.file_index.push_back(0);
    d.record.push_back(uint64_t(i));
  }
  const InMemoryDataset ds(d);
  PackOptions opt;
  opt.output = dir / "s";
  opt.shard_samples = 8;  // 7 shards: 6 of 8, one of 2
  pack_shards({{"train", &ds}}, opt);
  const ShardSet set = open_shard_set(dir / "s", "train");
  REQUIRE(set.shards.size() == 7);
  const std::vector<uint64_t> packed_order = shuffled_order(50, 0, 0);

  // The ids a stream hands out, through a loader with `workers` threads.
  auto ids = [&](StreamOptions so, int workers) {
    ShardStream stream(set, so);
    LoaderOptions lo;
    lo.batch_size = 4;
    lo.workers = workers;
    Loader loader(stream, Shape{3, 2, 2}, SampleFn{}, lo);
    std::vector<uint64_t> order(stream.size() - so.skip);
    for (size_t i = 0; i < order.size(); ++i) order[i] = so.skip + i;
    loader.start_epoch(0, order);
    std::vector<uint64_t> out;
    for (Batch b; loader.next(b);)
      for (int i = 0; i < b.size; ++i) {
        out.push_back(stream.id(b.indices[size_t(i)]));
        // The label travels with the sample (id k: the k-th of pack's seeded order).
        CHECK(b.labels[size_t(i)] == ds.label(packed_order[stream.id(b.indices[size_t(i)])]));
      }
    return out;
  };
  StreamOptions all;
  all.shards = {3, 0, 6, 1, 5, 2, 4};
  all.samples = 50;
  all.buffer = 10;
  all.seed = 1;
  all.stream = 2;
  all.window = 3;  // fewer positions ahead than the loader asks for: it must not stall
  const std::vector<uint64_t> a = ids(all, 0);
  CHECK(std::set<uint64_t>(a.begin(), a.end()).size() == 50);  // every sample once
  CHECK(ids(all, 3) == a);
  std::vector<uint64_t> in_shard_order;
  for (size_t s : all.shards)
    for (uint64_t j = 0; j < set.shards[s].samples; ++j) in_shard_order.push_back(set.shards[s].first_id + j);
  CHECK(a != in_shard_order);  // shuffled by the buffer
  StreamOptions other = all;
  other.stream = 3;
  CHECK(ids(other, 2) != a);
  StreamOptions plain = all;
  plain.buffer = 0;
  CHECK(ids(plain, 2) == in_shard_order);

  // More positions than the shards hold: read again from the first; fewer: the rest left out.
  StreamOptions two = plain;
  two.shards = {6, 1};  // 2 + 8 samples
  two.samples = 13;
  const std::vector<uint64_t> wrap = ids(two, 2);
  CHECK(wrap == std::vector<uint64_t>{48, 49, 8, 9, 10, 11, 12, 13, 14, 15, 48, 49, 8});
  two.samples = 4;
  CHECK(ids(two, 1) == std::vector<uint64_t>{48, 49, 8, 9});
  StreamOptions skip = all;  // a resumed epoch: the same stream from position 20
  skip.skip = 20;
  CHECK(ids(skip, 2) == std::vector<uint64_t>(a.begin() + 20, a.end()));

  // Positions are read once.
  ShardStream s(set, plain);
  CHECK(s.read(0).size() > 0);
  CHECK(s.source(0) == (dir / "s/train-000003.tar") + "#000024");
  expect_error([&] { s.read(0); }, "read twice");

  // Ranks split the shuffled shard list: disjoint, together the whole list, another each epoch.
  std::set<size_t> seen;
  for (int r = 0; r < 3; ++r)
    for (size_t sh : shard_plan(7, 3, r, 1, 0, true, true)) CHECK(seen.insert(sh).second);
  CHECK(seen.size() == 7);
  CHECK(shard_plan(7, 3, 0, 1, 0, true, true) != shard_plan(7, 3, 0, 1, 1, true, true));
  CHECK(shard_plan(7, 3, 1, 1, 0, false, true) == std::vector<size_t>{1, 4});
  CHECK(shard_plan(7, 3, 1, 1, 0, false, false).size() == 7);
}

TEST_CASE("shards: a damaged shard is one Error naming it and the sample") {
  testing::TempDir dir;
  python_tar(dir / "nocls.tar", {{"a.jpg", "x"}, {"a.cls", "1"}, {"b.jpg", "y"}, {"c.jpg", "z"}, {"c.cls", "0"}});
  expect_error([&] { open_shard_set(dir / "nocls.tar", "all"); }, "nocls.tar: sample b has no .cls member (its label)");
  python_tar(dir / "badlabel.tar", {{"a.png", "x"}, {"a.cls", "seven"}});
  expect_error([&] { open_shard_set(dir / "badlabel.tar", "all"); },
               "badlabel.tar: sample a: label 'seven' is not a class number >= 0");
  python_tar(dir / "range.tar", {{"a.png", "x"}, {"a.cls", "3"}});
  ShardReader r3(dir / "range.tar", 3);
  ShardSample s;
  expect_error([&] { r3.next(s); }, "range.tar: sample a: label '3' is not a class number in [0, 3)");
  python_tar(dir / "noimage.tar", {{"a.txt", "x"}, {"a.cls", "0"}});
  expect_error([&] { open_shard_set(dir / "noimage.tar", "all"); }, "noimage.tar: sample a has no image");
  python_tar(dir / "webp.tar", {{"a.webp", "x"}, {"a.cls", "0"}});
  expect_error([&] { open_shard_set(dir / "webp.tar", "all"); }, "; .webp is not read");
  python_tar(dir / "twoimages.tar", {{"a.png", "x"}, {"a.jpg", "y"}, {"a.cls", "0"}});
  expect_error([&] { open_shard_set(dir / "twoimages.tar", "all"); }, "sample a has two images (.png and .jpg)");
  python_tar(dir / "nodot.tar", {{"README", "x"}});
  expect_error([&] { open_shard_set(dir / "nodot.tar", "all"); }, "nodot.tar: member 'README' is not named KEY.EXT");

  // Truncated in the middle of a member: libarchive's error, named.
  std::string big(5000, 'q');
  python_tar(dir / "whole.tar", {{"a.jpg", big}, {"a.cls", "0"}, {"b.jpg", big}, {"b.cls", "1"}});
  fs::copy_file(dir / "whole.tar", dir / "cut.tar");
  fs::resize_file(dir / "cut.tar", 7000);
  expect_error([&] { open_shard_set(dir / "cut.tar", "all"); }, "cut.tar: ");
  ShardReader cut(dir / "cut.tar", 0);
  expect_error([&] { while (cut.next(s)) {} }, "cut.tar: damaged or truncated tar");
  // Cut at a member boundary, it reads as a shorter shard: the index's count catches it.
  fs::create_directories(dir / "set");
  fs::copy_file(dir / "whole.tar", dir / "set/train-000000.tar");
  fs::copy_file(dir / "whole.tar", dir / "set/train-000001.tar");
  std::ofstream(dir / "set/shards.json")
      << R"({"classes": ["x", "y"], "splits": {"train": [{"file": "train-000000.tar", "samples": 2},
            {"file": "train-000001.tar", "samples": 3}]}})";
  const ShardSet set = open_shard_set(dir / "set", "train");
  CHECK(set.size() == 5);
  StreamOptions so;
  so.shards = {1};
  so.samples = 3;
  ShardStream stream(set, so);
  CHECK(stream.read(0).size() == 5000);
  CHECK(stream.read(1).size() == 5000);
  expect_error([&] { stream.read(2); }, "train-000001.tar: holds 2 samples, its index gives 3");
  std::ofstream(dir / "set/shards.json") << "{\"classes\": []}";
  expect_error([&] { open_shard_set(dir / "set", "train"); }, "shards.json: not a shard index");
  expect_error([&] { open_dataset(spec("shards", dir / "set", "train")); }, "tar shards are read as a stream by ./train only");
}
