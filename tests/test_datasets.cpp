// Datasets: every format read from fixtures written at test time (IDX raw and gzip, CIFAR-10/100
// records, image folders compared with torchvision's ImageFolder, CSV with quoting), the real
// Fashion-MNIST from Debian's package, auto-detection, synthetic data, shards and their byte
// form, and every bad input with an error that names the file (and the CSV line).
#include <sys/stat.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "core/rng.h"
#include "data/cifar.h"
#include "data/csv_dataset.h"
#include "data/dataset.h"
#include "data/idx.h"
#include "data/image_folder.h"
#include "data/preprocess.h"
#include "data/registry.h"
#include "data/synthetic.h"
#include "testing.h"

#define STB_IMAGE_WRITE_STATIC
#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STBI_WRITE_NO_STDIO
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wsign-compare"
#include <stb_image_write.h>
#pragma GCC diagnostic pop

using namespace mpicnn;
using namespace mpicnn::data;
using mpicnn::testing::expect_error;
namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

using mpicnn::testing::TempDir;

namespace {

void spit(const std::string& path, const Bytes& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  REQUIRE(out.good());
}
void spit(const std::string& path, const std::string& text) { spit(path, Bytes(text.begin(), text.end())); }

Bytes gzip(const Bytes& in) {
  z_stream zs{};
  REQUIRE(deflateInit2(&zs, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  Bytes out(deflateBound(&zs, uLong(in.size())) + 32);
  zs.next_in = const_cast<Bytef*>(in.data());
  zs.avail_in = uInt(in.size());
  zs.next_out = out.data();
  zs.avail_out = uInt(out.size());
  REQUIRE(deflate(&zs, Z_FINISH) == Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

Bytes random_bytes(size_t n, uint64_t seed, uint32_t below = 256) {
  Rng rng(seed, 1);
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) b[i] = uint8_t(rng.below(i, below));
  return b;
}

Bytes idx(const std::vector<uint32_t>& dims, const Bytes& data, uint8_t type = 0x08) {
  Bytes b = {0, 0, type, uint8_t(dims.size())};
  for (uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8) b.push_back(uint8_t(d >> s));
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

Image random_image(int h, int w, int c, uint64_t seed) {
  Image img(h, w, c);
  img.pixels = random_bytes(img.pixels.size(), seed);
  return img;
}

void png(const std::string& path, const Image& img) {
  fs::create_directories(fs::path(path).parent_path());
  write_png(path, img);
}

void write_jpeg(const std::string& path, const Image& img) {
  Bytes out;
  auto sink = [](void* ctx, void* data, int size) {
    auto* v = static_cast<Bytes*>(ctx);
    v->insert(v->end(), static_cast<uint8_t*>(data), static_cast<uint8_t*>(data) + size);
  };
  REQUIRE(stbi_write_jpg_to_func(sink, &out, img.width, img.height, img.channels, img.pixels.data(), 90));
  spit(path, out);
}

void write_bmp(const std::string& path, const Image& img) {
  Bytes out;
  auto sink = [](void* ctx, void* data, int size) {
    auto* v = static_cast<Bytes*>(ctx);
    v->insert(v->end(), static_cast<uint8_t*>(data), static_cast<uint8_t*>(data) + size);
  };
  REQUIRE(stbi_write_bmp_to_func(sink, &out, img.width, img.height, img.channels, img.pixels.data()));
  spit(path, out);
}

std::unique_ptr<Dataset> open(const std::string& kind, const std::string& path, const std::string& split = "train") {
  DatasetSpec spec;
  spec.kind = kind;
  spec.path = path;
  spec.split = split;
  return open_dataset(spec);
}

// A Fashion-MNIST-shaped pair of IDX files with n images of h x w in `dir`.
struct IdxFixture {
  Bytes images, labels;
  IdxFixture(size_t n, uint32_t h, uint32_t w, uint64_t seed)
      : images(random_bytes(n * h * w, seed)), labels(random_bytes(n, seed + 1, 10)) {}
};

}  // namespace

TEST_CASE("dataset idx: raw and gzipped files read the same samples") {
  TempDir dir;
  const IdxFixture f(7, 5, 4, 11);
  const Bytes im = idx({7, 5, 4}, f.images), lb = idx({7}, f.labels);
  spit(dir / "raw/train-images-idx3-ubyte", im);
  spit(dir / "raw/train-labels-idx1-ubyte", lb);
  spit(dir / "gz/train-images-idx3-ubyte.gz", gzip(im));
  spit(dir / "gz/train-labels-idx1-ubyte.gz", gzip(lb));
  // gzip is detected by its magic bytes, not by the name.
  spit(dir / "named/train-images-idx3-ubyte", gzip(im));
  spit(dir / "named/train-labels-idx1-ubyte.gz", lb);
  for (const char* sub : {"raw", "gz", "named"}) {
    CAPTURE(sub);
    auto ds = open("idx", dir / sub);
    REQUIRE(ds->size() == 7);
    CHECK(ds->num_classes() == 10);
    CHECK(ds->class_names()[3] == "3");
    CHECK((ds->channels() == 1 && ds->height() == 5 && ds->width() == 4));
    for (size_t i = 0; i < 7; ++i) {
      CHECK(ds->label(i) == f.labels[i]);
      const Image img = ds->load(i, 0);
      REQUIRE((img.height == 5 && img.width == 4 && img.channels == 1));
      CHECK(img.pixels == Bytes(f.images.begin() + i * 20, f.images.begin() + (i + 1) * 20));
      const Image rgb = ds->load(i, 3);  // gray -> RGB replicates
      CHECK((rgb.channels == 3 && rgb.pixels[3 * 7 + 2] == img.pixels[7]));
    }
    CHECK(ds->source(2).ends_with("train-images-idx3-ubyte" + std::string(sub == std::string("gz") ? ".gz" : "") + "#2"));
  }
  // Concatenated gzip members are one stream, as gzip -d reads them.
  Bytes two = gzip(Bytes(im.begin(), im.begin() + 30));
  const Bytes rest = gzip(Bytes(im.begin() + 30, im.end()));
  two.insert(two.end(), rest.begin(), rest.end());
  spit(dir / "multi/x-images-idx3-ubyte", two);
  spit(dir / "multi/x-labels-idx1-ubyte", lb);
  auto ds = open("auto", dir / "multi/x-images-idx3-ubyte");
  CHECK(ds->load(6, 0).pixels == Bytes(f.images.end() - 20, f.images.end()));
}

TEST_CASE("dataset idx: every bad file is an error naming it") {
  TempDir dir;
  const IdxFixture f(6, 3, 3, 5);
  auto write = [&](const std::string& sub, const Bytes& im, const Bytes& lb) {
    spit(dir / (sub + "/train-images-idx3-ubyte"), im);
    spit(dir / (sub + "/train-labels-idx1-ubyte"), lb);
    return dir / sub;
  };
  const Bytes im = idx({6, 3, 3}, f.images), lb = idx({6}, f.labels);
  const std::string imf = "train-images-idx3-ubyte", lbf = "train-labels-idx1-ubyte";
  expect_error([&] { open("idx", dir / "nowhere"); }, "nowhere: no such file or folder");
  spit(dir / "nolabels/train-images-idx3-ubyte", im);
  expect_error([&] { open("idx", dir / "nolabels"); }, "nolabels: no train-labels-idx1-ubyte[.gz]");
  expect_error([&] { open("idx", dir / "nolabels", "test"); }, "no t10k-images-idx3-ubyte[.gz]");
  // A header that lies about its size: more data declared than present, and less.
  expect_error([&] { open("idx", write("lie_big", idx({7, 3, 3}, f.images), lb)); },
               imf + ": truncated: the header says 7 x 3 x 3 = 63 bytes of data, the file has 54");
  expect_error([&] { open("idx", write("lie_small", idx({5, 3, 3}, f.images), lb)); },
               imf + ": 9 bytes of data after the 5 x 3 x 3");
  Bytes trunc(im.begin(), im.end() - 1);
  expect_error([&] { open("idx", write("trunc", trunc, lb)); }, "trunc/" + imf + ": truncated");
  Bytes trailing = im;
  trailing.push_back(0);
  expect_error([&] { open("idx", write("trailing", trailing, lb)); }, "trailing/" + imf + ": 1 bytes of data after");
  // Garbage after the gzip stream, a cut gzip stream, corrupt compressed bytes.
  Bytes gz = gzip(im);
  Bytes gz_trailing = gz;
  gz_trailing.insert(gz_trailing.end(), {1, 2, 3});
  expect_error([&] { open("idx", write("gz_trailing", gz_trailing, lb)); }, imf + ": unexpected bytes after the gzip data");
  expect_error([&] { open("idx", write("gz_cut", Bytes(gz.begin(), gz.end() - 12), lb)); },
               imf + ": truncated gzip data");
  Bytes gz_bad = gz;
  for (size_t i = 12; i < gz_bad.size() - 8; ++i) gz_bad[i] ^= 0x5a;
  expect_error([&] { open("idx", write("gz_bad", gz_bad, lb)); }, imf + ": corrupt gzip data");
  // Wrong magic, wrong element type, zero dimension, files swapped.
  expect_error([&] { open("idx", write("magic", Bytes{1, 2, 3, 4, 5, 6, 7, 8}, lb)); }, imf + ": not an IDX file (magic 0x01020304)");
  expect_error([&] { open("idx", write("type", idx({6, 3, 3}, f.images, 0x0D), lb)); },
               imf + ": IDX element type 0d is not supported");
  expect_error([&] { open("idx", write("zero", idx({6, 0, 3}, {}), lb)); }, imf + ": IDX dimension 1 is 0");
  expect_error([&] { open("idx", write("swapped", lb, im)); },
               imf + ": expected an IDX file with 3 dimensions (magic 0x00000803), found magic 0x00000801");
  // Counts, labels.
  expect_error([&] { open("idx", write("count", im, idx({5}, Bytes(f.labels.begin(), f.labels.end() - 1)))); },
               imf + " has 6 images but ");
  Bytes big = f.labels;
  big[4] = 12;
  expect_error([&] { open("idx", write("label", im, idx({6}, big))); }, lbf + ": label 12 of sample 4 is outside [0, 10)");
  DatasetSpec spec;
  spec.kind = "idx";
  spec.path = dir / "label";
  spec.idx_num_classes = 13;  // "unless told"
  CHECK(open_dataset(spec)->label(4) == 12);
}

TEST_CASE("dataset fashion-mnist from Debian's dataset-fashion-mnist package") {
  const std::string root = kFashionMnistDefaultPath;
  REQUIRE_MESSAGE(fs::exists(root + "/train-labels-idx1-ubyte.gz"), "install dataset-fashion-mnist (make deps)");
  // An independent read of the labels and the first image through zlib's gzread.
  auto direct = [&](const std::string& file, size_t n) {
    gzFile g = gzopen((root + "/" + file).c_str(), "rb");
    REQUIRE(g != nullptr);
    Bytes b(n);
    REQUIRE(gzread(g, b.data(), unsigned(n)) == int(n));
    gzclose(g);
    return b;
  };
  for (const std::string split : {"train", "test"}) {
    CAPTURE(split);
    DatasetSpec spec;
    spec.kind = "fashion-mnist";  // default path
    spec.split = split;
    auto ds = open_dataset(spec);
    const size_t n = split == "train" ? 60000 : 10000;
    const std::string prefix = split == "train" ? "train" : "t10k";
    REQUIRE(ds->size() == n);
    CHECK((ds->num_classes() == 10 && ds->channels() == 1 && ds->height() == 28 && ds->width() == 28));
    CHECK((ds->class_names()[0] == "T-shirt/top" && ds->class_names()[9] == "Ankle boot"));
    const Bytes labels = direct(prefix + "-labels-idx1-ubyte.gz", 8 + n);
    int mismatches = 0;
    for (size_t i = 0; i < n; ++i) mismatches += ds->label(i) != labels[8 + i];
    CHECK(mismatches == 0);
    const Bytes first = direct(prefix + "-images-idx3-ubyte.gz", 16 + 2 * 784);
    CHECK(ds->load(1, 1).pixels == Bytes(first.begin() + 16 + 784, first.end()));
    CHECK(ds->source(1) == root + "/" + prefix + "-images-idx3-ubyte.gz#1");
  }
  CHECK(detect_dataset_kind(root) == "fashion-mnist");
  CHECK(open("auto", root, "test")->size() == 10000);
}

TEST_CASE("dataset cifar10 and cifar100 binary records") {
  TempDir dir;
  const std::string c10 = dir / "c10/cifar-10-batches-bin";
  std::map<std::string, Bytes> files;
  for (int k = 1; k <= 5; ++k) files["data_batch_" + std::to_string(k) + ".bin"] = {};
  files["test_batch.bin"] = {};
  uint64_t seed = 1;
  for (auto& [name, bytes] : files) {
    for (int r = 0; r < 3; ++r) {
      bytes.push_back(uint8_t((seed + r) % 10));
      const Bytes px = random_bytes(3072, seed * 10 + r);
      bytes.insert(bytes.end(), px.begin(), px.end());
    }
    spit(c10 + "/" + name, bytes);
    ++seed;
  }
  std::string meta;
  for (int k = 0; k < 10; ++k) meta += "name" + std::to_string(k) + "\n";
  spit(c10 + "/batches.meta.txt", meta + "\n");  // the real file ends with a blank line
  for (const std::string& path : {dir / "c10", c10}) {
    auto tr = open("cifar10", path);
    REQUIRE(tr->size() == 15);
    CHECK((tr->channels() == 3 && tr->height() == 32 && tr->width() == 32 && tr->num_classes() == 10));
    CHECK(tr->class_names()[7] == "name7");
    const Bytes& b2 = files["data_batch_2.bin"];
    const size_t rec = 3073, r = 1, i = 3 + r;  // record 1 of batch 2
    CHECK(tr->label(i) == b2[r * rec]);
    CHECK(tr->source(i) == c10 + "/data_batch_2.bin#1");
    const Image img = tr->load(i, 3);
    int bad = 0;
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 32; ++y)
        for (int x = 0; x < 32; ++x) bad += img.pixels[size_t((y * 32 + x) * 3 + c)] != b2[r * rec + 1 + size_t(c * 1024 + y * 32 + x)];
    CHECK(bad == 0);
    CHECK(open("cifar10", path, "test")->size() == 3);
    CHECK(detect_dataset_kind(path) == "cifar10");
  }
  // CIFAR-100: coarse byte, fine byte; the fine labels count.
  Bytes c100;
  for (int r = 0; r < 4; ++r) {
    c100.push_back(uint8_t(r * 5));
    c100.push_back(uint8_t(90 + r));
    const Bytes px = random_bytes(3072, 99 + r);
    c100.insert(c100.end(), px.begin(), px.end());
  }
  spit(dir / "c100/cifar-100-binary/train.bin", c100);
  spit(dir / "c100/cifar-100-binary/test.bin", Bytes(c100.begin(), c100.begin() + 3074));
  auto ds = open("auto", dir / "c100");
  REQUIRE(ds->size() == 4);
  CHECK((ds->num_classes() == 100 && ds->label(3) == 93 && ds->class_names()[93] == "93"));
  CHECK(ds->load(2, 3).pixels[5 * 3 + 1] == c100[2 * 3074 + 2 + 1024 + 5]);
  CHECK(open("cifar100", dir / "c100", "test")->size() == 1);

  // Bad inputs.
  Bytes cut = files["data_batch_3.bin"];
  cut.pop_back();
  spit(c10 + "/data_batch_3.bin", cut);
  expect_error([&] { open("cifar10", c10); },
               "data_batch_3.bin: size 9218 is not a positive multiple of the 3073-byte cifar10 record");
  fs::remove(c10 + "/data_batch_3.bin");
  expect_error([&] { open("cifar10", c10); }, "data_batch_3.bin: missing (cifar10 train file)");
  Bytes badlabel = files["test_batch.bin"];
  badlabel[3073] = 10;
  spit(c10 + "/test_batch.bin", badlabel);
  expect_error([&] { open("cifar10", c10, "test"); }, "test_batch.bin: label 10 of record 1 is outside [0, 10)");
  spit(c10 + "/test_batch.bin", files["test_batch.bin"]);
  spit(c10 + "/batches.meta.txt", std::string("a\nb\n"));
  expect_error([&] { open("cifar10", c10, "test"); }, "batches.meta.txt: 2 class names, expected 10");
  expect_error([&] { open("cifar100", dir / "nothing"); }, "nothing: no such folder");
}

namespace {

// torchvision's ImageFolder listing of `root` (tests/python/imagefolder_dataset.py).
std::pair<std::vector<std::string>, std::vector<std::pair<int, std::string>>> torchvision_listing(const std::string& root) {
  std::istringstream in(testing::python_output("imagefolder_dataset.py", testing::shell_quote(root)));
  std::string line;
  std::getline(in, line);
  std::vector<std::string> classes;
  std::istringstream cl(line);
  for (std::string c; std::getline(cl, c, '\t');) classes.push_back(c);
  std::vector<std::pair<int, std::string>> samples;
  while (std::getline(in, line)) {
    const size_t tab = line.find('\t');
    samples.emplace_back(std::stoi(line.substr(0, tab)), line.substr(tab + 1));
  }
  return {classes, samples};
}

}  // namespace

TEST_CASE("dataset imagefolder: torchvision's order, splits, hidden files, symlinks") {
  TempDir dir;
  const std::string root = dir / "faces";
  const Image a = random_image(6, 5, 3, 1), g = random_image(4, 4, 1, 2);
  for (const std::string split : {"train", "test"}) {
    png(root + "/" + split + "/dog/z.png", a);
    png(root + "/" + split + "/cat/b.PNG", g);
  }
  fs::create_directories(root + "/train/cat/a");
  png(root + "/train/cat/a/b.png", a);    // torchvision: after cat/b.PNG, before cat/c.jpg? (os.walk order)
  write_jpeg(root + "/train/cat/c.jpg", a);
  write_bmp(root + "/train/cat/d.Bmp", a);
  write_jpeg(root + "/train/cat/a b/e.jpeg", a);
  spit(root + "/train/cat/notes.txt", std::string("not an image"));
  fs::create_directories(root + "/elsewhere");
  png(root + "/elsewhere/linked.png", g);
  fs::create_symlink(root + "/elsewhere", root + "/train/dog/link_dir");
  fs::create_symlink(root + "/train/dog/z.png", root + "/train/dog/y_link.png");
  fs::create_symlink(root + "/train/dog", root + "/train/dog/link_dir_cycle");  // a cycle, walked once

  // The same listing as torchvision's ImageFolder (which walks a cycle without end, so it
  // sees a tree without one).
  fs::remove(root + "/train/dog/link_dir_cycle");
  const auto [tv_classes, tv_samples] = torchvision_listing(root + "/train");
  fs::create_symlink(root + "/train/dog", root + "/train/dog/link_dir_cycle");
  // Hidden files and folders are ignored (torchvision would list .hidden.png).
  png(root + "/train/dog/.hidden.png", a);
  png(root + "/train/.cache/x.png", a);
  png(root + "/train/dog/.git/x.png", a);

  auto ds = open("imagefolder", root, "train");
  REQUIRE(ds->class_names() == tv_classes);
  REQUIRE(ds->size() == tv_samples.size());
  for (size_t i = 0; i < ds->size(); ++i) {
    CHECK(ds->label(i) == tv_samples[i].first);
    CHECK(ds->source(i) == tv_samples[i].second);
  }
  CHECK(ds->size() == 8);
  CHECK((ds->channels() == 0 && ds->height() == 0));  // sizes vary
  // PNG and BMP are lossless: the pixels come back exactly; JPEG decodes to the right size.
  for (size_t i = 0; i < ds->size(); ++i) {
    const std::string s = ds->source(i);
    const Image img = ds->load(i, 0);
    if (s.ends_with("z.png") || s.ends_with("d.Bmp") || s.ends_with("a/b.png")) CHECK(img.pixels == a.pixels);
    if (s.ends_with("b.PNG") || s.ends_with("linked.png")) CHECK(img.pixels == g.pixels);
    if (s.ends_with(".jpg") || s.ends_with(".jpeg")) CHECK((img.height == 6 && img.width == 5 && img.channels == 3));
    const Bytes raw = ds->read(i);  // read and decode separately give the same image
    CHECK(ds->decode(raw, i, 1).pixels == ds->load(i, 1).pixels);
  }
  CHECK(open("auto", root, "test")->size() == 2);
  CHECK(detect_dataset_kind(root) == "imagefolder");

  // val/ stands in for test/; a root without splits is one split.
  fs::rename(root + "/test", root + "/val");
  CHECK(open("imagefolder", root, "test")->size() == 2);
  fs::remove_all(root + "/val");
  expect_error([&] { open("imagefolder", root, "test"); }, root + ": has no test/ folder (nor val/), so there is no test split");
  CHECK(open("imagefolder", root + "/train", "train")->size() == 8);
  CHECK(open("imagefolder", root + "/train", "all")->size() == 8);
  expect_error([&] { open("imagefolder", root + "/train", "test"); },
               "/train: has no train/ and test/ folders, so it holds one split only and there is no test split");
}

TEST_CASE("dataset imagefolder: bad folders and bad images") {
  TempDir dir;
  const Image a = random_image(8, 8, 3, 3);
  const std::string root = dir / "r";
  png(root + "/train/cat/1.png", a);
  png(root + "/train/dog/1.png", a);
  png(root + "/test/cat/1.png", a);
  png(root + "/test/cow/1.png", a);
  expect_error([&] { open("imagefolder", root); }, "train/ and test/ have different class folders (dog is only in");
  expect_error([&] { open("imagefolder", dir / "missing"); }, "/missing: no such folder");
  fs::create_directories(dir / "flat");
  spit(dir / "flat/x.png", std::string("x"));
  expect_error([&] { open("imagefolder", dir / "flat"); }, "/flat: no class folders");
  fs::create_directories(dir / "e/empty");
  png(dir / "e/full/1.png", a);
  spit(dir / "e/empty/readme.txt", std::string("no images"));
  expect_error([&] { open("imagefolder", dir / "e"); }, "e/empty: empty class folder");

  // Bad image files fail when loaded, naming the file: truncated, corrupt, another format.
  png(dir / "ok.png", a);
  const Bytes full = read_file_bytes(dir / "ok.png");
  spit(dir / "b/x/truncated.png", Bytes(full.begin(), full.begin() + std::ptrdiff_t(full.size() / 2)));
  spit(dir / "b/x/corrupt.jpg", random_bytes(300, 4));
  spit(dir / "b/x/gif.png", std::string("GIF89a\x01\x00\x01\x00\x00\x00\x00;", 13));
  spit(dir / "b/x/empty.bmp", Bytes{});
  auto ds = open("imagefolder", dir / "b");
  REQUIRE(ds->size() == 4);
  for (size_t i = 0; i < ds->size(); ++i) {
    CAPTURE(ds->source(i));
    expect_error([&] { ds->load(i, 3); }, ds->source(i) + ": ");
  }
  REQUIRE(ds->source(2).ends_with("gif.png"));  // sorted: corrupt, empty, gif, truncated
  fs::remove(dir / "b/x/gif.png");
  expect_error([&] { ds->load(2, 3); }, "gif.png: cannot open");  // gone since listed
  DatasetSpec spec;
  spec.kind = "imagefolder";
  spec.path = dir / "b";
  spec.check_files = true;
  CHECK(open_dataset(spec)->size() == 3);
  expect_error([&] { open("webdataset", dir / "b"); }, "unknown dataset kind 'webdataset'");
}

TEST_CASE("dataset csv: columns, quoting, splits, classes.txt") {
  TempDir dir;
  const Image a = random_image(3, 4, 3, 7);
  png(dir / "data/img/a,1.png", a);
  png(dir / "data/img/q\"uote.png", a);
  png(dir / "data/img/b.png", a);
  png(dir / "abs/c.png", a);
  const std::string abs_path = dir / "abs/c.png";
  spit(dir / "data/faces.csv", "\xEF\xBB\xBFpath,label,split,extra\r\n"
                              "\"img/a,1.png\",2,train,x\r\n"
                              "\"img/q\"\"uote.png\", 0 ,test,\"multi\nline\"\r\n"
                              "\r\n"
                              "img/b.png,1,train,\r\n" +
                                  abs_path + ",3,train,y\r\n");
  auto tr = open("csv", dir / "data/faces.csv", "train");
  REQUIRE(tr->size() == 3);
  CHECK(tr->source(0) == dir / "data/img/a,1.png");
  CHECK(tr->source(2) == abs_path);
  CHECK((tr->label(0) == 2 && tr->label(1) == 1 && tr->label(2) == 3));
  CHECK(tr->num_classes() == 4);  // max label of all rows + 1, names are the indices
  CHECK(tr->class_names()[3] == "3");
  CHECK(tr->load(0, 0).pixels == a.pixels);
  auto te = open("auto", dir / "data/faces.csv", "test");
  REQUIRE(te->size() == 1);
  CHECK((te->source(0) == dir / "data/img/q\"uote.png" && te->label(0) == 0 && te->num_classes() == 4));
  CHECK(open("csv", dir / "data/faces.csv", "all")->size() == 4);
  expect_error([&] { open("csv", dir / "data/faces.csv", "val"); }, "faces.csv: no rows with split 'val' (splits present: 'test', 'train')");

  spit(dir / "data/classes.txt", std::string("cat\ndog\nowl\nfox\nyak\n\n"));
  CHECK(open("csv", dir / "data/faces.csv", "all")->class_names() == std::vector<std::string>{"cat", "dog", "owl", "fox", "yak"});
  // Without a split column the file is one split.
  spit(dir / "data/test.csv", std::string("label,path\n1,img/b.png\n"));
  CHECK(open("csv", dir / "data/test.csv", "all")->label(0) == 1);
  expect_error([&] { open("csv", dir / "data/test.csv", "test"); }, "test.csv: has no split column");

  // A folder as create_dataset writes it: SPLIT.csv picked by the split, detected as csv.
  spit(dir / "out/train.csv", std::string("path,label\n../data/img/b.png,1\n../abs/c.png,0\n"));
  spit(dir / "out/test.csv", std::string("path,label\n../data/img/b.png,1\n"));
  CHECK(detect_dataset_kind(dir / "out") == "csv");
  CHECK(open("auto", dir / "out", "train")->size() == 2);
  CHECK(open("auto", dir / "out", "test")->size() == 1);
  expect_error([&] { open("csv", dir / "out", "all"); }, "out: a CSV dataset folder without data.csv (split 'all')");
  expect_error([&] { open("csv", dir / "out", "val"); }, "out: a CSV dataset folder without val.csv or data.csv");

  // Quoting edge cases through the parser.
  const auto recs = parse_csv("a,\"b\"\"c\",\"\"\n\"x\ny\",2\n", "t.csv");
  REQUIRE(recs.size() == 2);
  CHECK(recs[0].fields == std::vector<std::string>{"a", "b\"c", ""});
  CHECK((recs[1].line == 2 && recs[1].fields[0] == "x\ny"));
}

TEST_CASE("dataset csv: malformed rows and missing files name the file and line") {
  TempDir dir;
  png(dir / "ok.png", random_image(2, 2, 1, 1));
  const std::string csv = dir / "d.csv";
  auto bad = [&](const std::string& text, const std::string& why, bool check_files = false) {
    spit(csv, text);
    DatasetSpec spec;
    spec.kind = "csv";
    spec.path = csv;
    spec.split = "all";
    spec.check_files = check_files;
    expect_error([&] { open_dataset(spec); }, csv + why);
  };
  bad("path,label\nok.png,1\nok.png,1,extra\n", " line 3: 3 fields, expected 2");
  bad("path,label\nok.png\n", " line 2: 1 fields, expected 2");
  bad("path,label\nok.png,cat\n", " line 2: label 'cat' is not a class index");
  bad("path,label\nok.png,1\n\"multi\nline.png\",1\nok.png,-1\n", " line 5: label '-1' is not a class index");
  bad("path,label\nok.png,1.5\n", " line 2: label '1.5' is not a class index");
  bad("path,label\nok.png,\n", " line 2: label '' is not a class index");
  bad("path,label\n,1\n", " line 2: empty path");
  bad("path,label\n\"ok.png,1\n", " line 2: unterminated quoted field");
  bad("path,label\n\"ok.png\"x,1\n", " line 2: text after a closing quote");
  bad("file,class\nok.png,1\n", " line 1: header must name the columns path and label");
  bad("path,label,path\nok.png,1,ok.png\n", " line 1: column 'path' appears twice");
  bad("path,label\n", ": no rows after the header");
  bad("", ": empty file");
  bad("path,label\nok.png,0\nmissing.png,1\n", " line 3: missing image file " + dir / "missing.png", true);
  expect_error([&] { open("csv", dir / "nope.csv", "all"); }, "nope.csv: no such file");
  spit(dir / "classes.txt", std::string("a\nb\n"));
  bad("path,label\nok.png,0\nok.png,2\n", " line 3: label 2 is outside the 2 classes of " + dir / "classes.txt");
  // Without the up-front check, a missing file fails when it is loaded, naming it.
  spit(csv, "path,label\nok.png,0\ngone.png,1\n");
  auto ds = open("csv", csv, "all");
  CHECK(ds->load(0, 1).pixels.size() == 4);
  expect_error([&] { ds->load(1, 1); }, dir / "gone.png" + ": cannot open");
}

TEST_CASE("dataset synthetic: deterministic, split-dependent, learnable") {
  SyntheticSpec sp;
  sp.seed = 42;
  sp.train_size = 400;
  sp.test_size = 200;
  sp.classes = 5;
  sp.channels = 3;
  sp.height = 12;
  sp.width = 10;
  const SyntheticDataset tr(sp, "train"), tr2(sp, "train"), te(sp, "test");
  CHECK((tr.size() == 400 && te.size() == 200 && tr.channels() == 3 && tr.height() == 12 && tr.num_classes() == 5));
  std::vector<int> count(5);
  for (size_t i = 0; i < tr.size(); ++i) {
    REQUIRE((tr.label(i) >= 0 && tr.label(i) < 5));
    ++count[size_t(tr.label(i))];
    CHECK(tr.read(i) == tr2.read(i));
  }
  for (int c : count) CHECK(c > 40);  // every class is drawn
  CHECK(tr.read(0) != te.read(0));
  SyntheticSpec other = sp;
  other.seed = 43;
  CHECK(SyntheticDataset(other, "train").read(0) != tr.read(0));
  // Learnable: nearest class mean (over pixels) on train classifies test far above chance.
  const size_t n = 12 * 10 * 3;
  std::vector<double> mean(5 * n, 0.0);
  for (size_t i = 0; i < tr.size(); ++i) {
    const Bytes px = tr.read(i);
    for (size_t p = 0; p < n; ++p) mean[size_t(tr.label(i)) * n + p] += px[p] / double(count[size_t(tr.label(i))]);
  }
  int correct = 0;
  for (size_t i = 0; i < te.size(); ++i) {
    const Bytes px = te.read(i);
    int best = -1;
    double best_d = 1e300;
    for (int k = 0; k < 5; ++k) {
      double d = 0;
      for (size_t p = 0; p < n; ++p) d += (px[p] - mean[size_t(k) * n + p]) * (px[p] - mean[size_t(k) * n + p]);
      if (d < best_d) best_d = d, best = k;
    }
    correct += best == te.label(i);
  }
  CHECK(correct > 180);  // > 90%; chance is 20%
  DatasetSpec spec;
  spec.kind = "synthetic";
  spec.synthetic = sp;
  spec.split = "test";
  auto ds = open_dataset(spec);
  CHECK((ds->size() == 200 && ds->load(3, 1).channels == 1 && ds->source(3) == "synthetic-test#3"));
}

TEST_CASE("dataset registry: one row per kind that every list reads") {
  std::set<int> orders;
  std::vector<std::string> names{"auto"};
  for (const data::DatasetKind& k : data::dataset_kinds()) {
    INFO(k.name);
    names.push_back(k.name);
    CHECK(data::find_dataset_kind(k.name) == &k);
    if (k.detect_order > 0) {
      CHECK(bool(k.recognise));
      CHECK(orders.insert(k.detect_order).second);  // auto-detection tries one kind at a time
    }
    if (k.task == Task::Detection) {
      CHECK(!k.open);  // data/detection.h opens these
      continue;
    }
    CHECK(bool(k.open) != k.streamed);  // streamed kinds are read by dist/split_data.h
    CHECK((k.mean.size() == 1 || k.mean.size() == 3));
    CHECK(k.mean.size() == k.stddev.size());
    for (int channels : {1, 3}) CHECK(!data::kind_normalization(k.name, channels).mean.empty());
  }
  CHECK(data::dataset_choices() == names);
  const std::vector<std::string> indexed = data::dataset_choices(Task::Classify, /*streamed=*/false);
  CHECK(std::find(indexed.begin(), indexed.end(), "shards") == indexed.end());
  CHECK(data::kinds_without_path() == "fashion-mnist and synthetic");
  CHECK(data::find_dataset_kind("auto") == nullptr);
  // Kinds without a path open without one; an unknown or detection kind names the kinds.
  data::DatasetSpec spec;
  spec.kind = "synthetic";
  CHECK(data::open_dataset(spec)->size() == spec.synthetic.train_size);
  spec.kind = "voc";
  spec.path = ".";
  std::string message;
  try {
    data::open_dataset(spec);
  } catch (const Error& e) {
    message = e.message();
  }
  CHECK(message == "unknown dataset kind 'voc' (auto, fashion-mnist, mnist, idx, imagefolder, csv, "
                   "cifar10, cifar100, synthetic)");
}

TEST_CASE("dataset auto-detection fails with one clear line") {
  TempDir dir;
  fs::create_directories(dir / "empty");
  expect_error([&] { detect_dataset_kind(dir / "empty"); }, "empty: cannot tell the dataset format");
  expect_error([&] { detect_dataset_kind(dir / "nope"); }, "nope: no such file or folder");
  spit(dir / "x.json", std::string("{}"));
  expect_error([&] { open("auto", dir / "x.json"); }, "x.json: cannot tell the dataset format of this file");
  spit(dir / "mnist/t10k-images-idx3-ubyte.gz", Bytes{});
  CHECK(detect_dataset_kind(dir / "mnist") == "idx");
  CHECK(detect_dataset_kind(dir / "mnist/t10k-images-idx3-ubyte.gz") == "idx");
  spit(dir / "fashion_data/train-images-idx3-ubyte", Bytes{});
  CHECK(detect_dataset_kind(dir / "fashion_data") == "fashion-mnist");
  spit(dir / "d.CSV", std::string("path,label\n"));
  CHECK(detect_dataset_kind(dir / "d.CSV") == "csv");
  expect_error([&] { open("auto", ""); }, "no dataset path given");
}

TEST_CASE("dataset shards and their byte form") {
  InMemoryData d;
  d.name = "toy";
  d.channels = 1;
  d.height = 2;
  d.width = 3;
  d.pixels = random_bytes(5 * 6, 9);
  d.labels = {0, 1, 2, 1, 0};
  d.class_names = {"a", "b", "c"};
  d.files = {"f0.bin", "f1.bin"};
  d.file_index = {0, 0, 1, 1, 1};
  d.record = {0, 1, 0, 1, 2};
  const std::vector<uint64_t> pick = {4, 2};
  const InMemoryDataset shard(deserialize_in_memory(serialize(d.subset(pick))));
  REQUIRE(shard.size() == 2);
  CHECK((shard.label(0) == 0 && shard.label(1) == 2 && shard.id(0) == 4 && shard.id(1) == 2));
  CHECK((shard.source(0) == "f1.bin#2" && shard.source(1) == "f1.bin#0"));
  CHECK(shard.read(1) == Bytes(d.pixels.begin() + 12, d.pixels.begin() + 18));
  // A shard of a shard keeps the original ids.
  const std::vector<uint64_t> one = {1};
  CHECK(InMemoryDataset(shard.data().subset(one)).id(0) == 2);
  Bytes ser = serialize(d);
  expect_error([&] { deserialize_in_memory(Bytes(ser.begin(), ser.end() - 1)); }, "serialized in-memory dataset: truncated");
  ser.push_back(0);
  expect_error([&] { deserialize_in_memory(ser); }, "1 unexpected trailing bytes");
  d.labels[1] = 3;
  expect_error([&] { InMemoryDataset bad(d); }, "f0.bin#1: label 3 is outside [0, 3)");

  FileListData f;
  f.name = "list";
  f.paths = {"a.png", "b,c.png", "d.png"};
  f.labels = {1, 0, 1};
  f.class_names = {"x", "y"};
  const std::vector<uint64_t> two = {2, 1};
  const FileListDataset fs2(deserialize_file_list(serialize(f.subset(two))));
  CHECK((fs2.size() == 2 && fs2.source(1) == "b,c.png" && fs2.label(0) == 1 && fs2.id(0) == 2));
  expect_error([&] { deserialize_file_list(serialize(d)); }, "serialized file-list dataset: bad magic");
}
