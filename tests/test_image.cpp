// Image decode, PIL-exact resize and crops, and the preprocessing transforms: decoder round
// trips and errors; resize/crop and the eval recipe against PIL/torchvision computed at test
// time (tests/python/preprocess_torch.py), with a torchvision model's predictions on both; the
// augmentation's determinism, thread independence and torchvision bounds.
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "core/check.h"
#include "core/rng.h"
#include "data/image.h"
#include "data/transform.h"
#include "io/safetensors.h"
#include "recipes.h"
#include "testing.h"

using namespace mpicnn;
using namespace mpicnn::data;
using mpicnn::testing::cifar_train;
using mpicnn::testing::expect_error;
using mpicnn::testing::imagenet_eval;
using mpicnn::testing::imagenet_train;
using mpicnn::testing::normalize_only;
using mpicnn::testing::source_dir;
namespace fs = std::filesystem;

using mpicnn::testing::TempDir;

namespace {
using mpicnn::testing::run_python;
using mpicnn::testing::shell_quote;

// Deterministic test picture: gradients plus per-pixel noise of amplitude `noise` (0..255),
// so resampling sees both smooth regions and every byte value.
Image test_image(int h, int w, int c, uint64_t seed, int noise = 96) {
  Image img(h, w, c);
  const Rng rng(seed, stream_id("test_image"));
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int k = 0; k < c; ++k) {
        const std::size_t i = (std::size_t(y) * w + x) * c + k;
        const double smooth = 127.5 + 100 * std::sin(0.05 * (k + 1) * x + 0.03 * y + double(seed % 7));
        const double v = smooth + noise * (rng.uniform(i) - 0.5);
        img.pixels[i] = uint8_t(std::clamp(int(std::lround(v)), 0, 255));
      }
  return img;
}

void add_u8(SafetensorsWriter& w, const std::string& name, const Image& img) {
  w.add(name, DType::U8, {img.height, img.width, img.channels}, img.pixels);
}

Image read_u8(const SafetensorsReader& r, const std::string& name) {
  const TensorInfo& t = r.info(name);
  REQUIRE_MESSAGE((t.dtype == DType::U8 && t.shape.size() == 3), name, ": not an H x W x C U8 tensor");
  Image img(int(t.shape[0]), int(t.shape[1]), int(t.shape[2]));
  const auto b = r.bytes(name);
  std::copy(b.begin(), b.end(), img.pixels.begin());
  return img;
}

// Largest |a - b| over all bytes; -1 if the shapes differ.
int max_diff(const Image& a, const Image& b) {
  if (a.height != b.height || a.width != b.width || a.channels != b.channels) return -1;
  int m = 0;
  for (std::size_t i = 0; i < a.pixels.size(); ++i)
    m = std::max(m, std::abs(int(a.pixels[i]) - int(b.pixels[i])));
  return m;
}

std::string dims(const Image& a) {
  std::ostringstream os;
  os << a.height << "x" << a.width << "x" << a.channels;
  return os.str();
}

Image channels_of(const Image& in, int first, int count) {
  Image out(in.height, in.width, count);
  for (std::size_t p = 0; p < std::size_t(in.height) * in.width; ++p)
    for (int k = 0; k < count; ++k) out.pixels[p * count + k] = in.pixels[p * in.channels + first + k];
  return out;
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  REQUIRE(f.good());
}

// Float (C, H, W) of a transform with mean 0, std 1 back to 8 bits: v / 255 * 255 rounds to v.
Image to_u8(const std::vector<float>& x, int c, int h, int w) {
  Image img(h, w, c);
  for (int k = 0; k < c; ++k)
    for (int i = 0; i < h * w; ++i)
      img.pixels[std::size_t(i) * c + k] = uint8_t(std::lround(x[std::size_t(k) * h * w + i] * 255.0f));
  return img;
}

}  // namespace

// ---- decode ------------------------------------------------------------------------------------

TEST_CASE("image decode: PNG, JPEG, BMP round trips and PIL's channel conversions") {
  TempDir dir;
  struct Case {
    std::string name, format, mode;
    int h, w;
    std::string options = "";  // JPEG: progressive, 444 (preprocess_torch.py encode)
  };
  // JPEGs: baseline 4:2:0 at odd sizes (the chroma upsampling's edges), 4:4:4, progressive, gray
  // (mode L, one component), CMYK (four components, Adobe's inverted convention) and one with an
  // EXIF orientation tag, which PIL's open (torchvision's loader) does not apply.
  const std::vector<Case> cases = {
      {"png_l", "png", "L", 37, 53},
      {"png_la", "png", "LA", 20, 11},
      {"png_rgb", "png", "RGB", 41, 29},
      {"png_rgba", "png", "RGBA", 16, 33},
      {"png_p", "png", "P", 25, 25},
      {"bmp_l", "bmp", "L", 19, 23},
      {"bmp_rgb", "bmp", "RGB", 30, 17},
      {"jpg_l", "jpg", "L", 48, 40},
      {"jpg_rgb", "jpg", "RGB", 45, 61},
      {"jpg_rgb_444", "jpg", "RGB", 31, 27, "444"},
      {"jpg_progressive", "jpg", "RGB", 67, 93, "progressive"},
      {"jpg_l_progressive", "jpg", "L", 35, 50, "progressive"},
      {"jpg_cmyk", "jpg", "CMYK", 29, 43},
      {"jpg_cmyk_progressive", "jpg", "CMYK", 40, 24, "progressive"},
      {"jpg_exif_rotated", "jpg", "RGB", 21, 34, "exif6"},  // decoded as stored, not rotated
      {"png_1px", "png", "RGB", 1, 1},
      {"jpg_1px", "jpg", "RGB", 1, 1},
      {"gif", "gif", "P", 8, 8},
  };
  SafetensorsWriter inputs;
  std::map<std::string, Image> source;
  {
    std::ofstream list(dir / "encode.txt");
    uint64_t seed = 1;
    for (const Case& c : cases) {
      source[c.name] = test_image(c.h, c.w, 4, seed++);
      add_u8(inputs, c.name, source[c.name]);
      list << c.name << ' ' << c.format << ' ' << c.mode << ' ' << c.options << '\n';
    }
  }
  inputs.write(dir / "inputs.safetensors");
  run_python("preprocess_torch.py", "encode " + shell_quote(dir.path.string()));
  const SafetensorsReader pil(dir / "decoded.safetensors");

  for (const Case& c : cases) {
    const std::string path = dir / (c.name + "." + c.format);
    if (c.format == "gif") {  // PIL can write it; we do not read GIF
      expect_error([&] { read_image(path, 3); }, path);
      continue;
    }
    // PIL writes gray BMPs with a gray palette; stb_image expands palettes to RGB, so the stored
    // form of those is RGB with three equal channels (PIL calls it L: same values either way).
    // CMYK JPEGs are stored as RGB (PIL's convert("RGB"), what torchvision's loader asks for).
    const bool gray = (c.mode == "L" || c.mode == "LA") && c.format != "bmp";
    const Image keep = read_image(path, 0), rgb = read_image(path, 3), l = read_image(path, 1);
    CHECK_MESSAGE(keep.channels == (gray ? 1 : 3), c.name, ": decoded ", dims(keep));
    const Image pil_rgb = read_u8(pil, c.name + ".rgb"), pil_l = read_u8(pil, c.name + ".l");
    // Every format identical to PIL (JPEG too: the same libjpeg-turbo with PIL's settings), and
    // lossless ones (except the quantized palette) to what was saved.
    const int d_rgb = max_diff(rgb, pil_rgb), d_l = max_diff(l, pil_l),
              d_keep = max_diff(keep, gray ? pil_l : pil_rgb);
    MESSAGE(c.name, ": max |ours - PIL| RGB ", d_rgb, ", L ", d_l, ", as stored ", d_keep);
    CHECK_MESSAGE(d_rgb == 0, c.name, ": RGB differs from PIL by ", d_rgb, " (-1: shape)");
    CHECK_MESSAGE(d_l == 0, c.name, ": L differs from PIL by ", d_l, " (-1: shape)");
    CHECK_MESSAGE(d_keep == 0, c.name, ": as-stored differs from PIL by ", d_keep, " (-1: shape)");
    if (c.format != "jpg" && c.mode != "P")
      CHECK_MESSAGE(max_diff(convert_channels(keep, c.mode[0] == 'L' ? 1 : 3),
                             channels_of(source[c.name], 0, c.mode[0] == 'L' ? 1 : 3)) == 0,
                    c.name, ": lossless round trip changed pixels");
    // convert_channels is PIL's convert: from our own decode, exactly.
    CHECK_MESSAGE(max_diff(convert_channels(keep, 1), pil_l) == 0, c.name, ": convert to L differs from PIL");
    CHECK_MESSAGE(max_diff(convert_channels(keep, 3), pil_rgb) == 0, c.name,
                  ": convert to RGB differs from PIL");
  }

  // write_png round trip, gray and RGB.
  for (int c : {1, 3}) {
    const Image img = test_image(13, 21, c, 40 + c);
    const std::string path = dir / ("ours_" + std::to_string(c) + ".png");
    write_png(path, img);
    CHECK(max_diff(read_image(path, 0), img) == 0);
  }

  // Broken files: each an Error naming the file.
  const std::vector<uint8_t> png = read_file_bytes(dir / "png_rgb.png");
  const std::vector<uint8_t> jpg = read_file_bytes(dir / "jpg_rgb.jpg");
  const std::vector<uint8_t> bmp = read_file_bytes(dir / "bmp_rgb.bmp");
  auto broken = [&](const std::string& name, std::vector<uint8_t> bytes) {
    const std::string path = dir / name;
    write_bytes(path, bytes);
    expect_error([&] { read_image(path, 3); }, path);
    expect_error([&] { decode_image(bytes, 0, "sample 17"); }, "sample 17");
  };
  const std::vector<std::pair<std::string, std::vector<uint8_t>>> files = {
      {"png", png}, {"jpg", jpg}, {"bmp", bmp}};
  for (const auto& [name, bytes] : files) {
    for (double keep : {0.5, 0.9}) {
      std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + std::ptrdiff_t(double(bytes.size()) * keep));
      broken("truncated_" + std::to_string(int(keep * 100)) + "." + name, cut);
    }
    std::vector<uint8_t> bad = bytes;  // the header after the signature overwritten
    for (std::size_t i = 2; i < 40 && i < bad.size(); ++i) bad[i] = 0xFF;
    broken("corrupt." + name, bad);
  }
  broken("empty.png", {});
  // A chunk that runs past the end is refused before stb allocates its declared length (an
  // 86-byte file from tests/fuzz asked for 2 GB); the walk stops at IEND, so trailing bytes pass.
  std::vector<uint8_t> cut(png.begin(), png.end() - 20);
  expect_error([&] { decode_image(cut, 0, "cut.png"); }, "cut.png: truncated or corrupt PNG (chunk 'IDAT' at byte");
  std::vector<uint8_t> trailing = png;
  trailing.insert(trailing.end(), {1, 2, 3});
  CHECK(decode_image(trailing, 0, "trailing.png").pixels == decode_image(png, 0, "png").pixels);
  const std::string text = "not an image, just text\n";
  broken("notes.txt", std::vector<uint8_t>(text.begin(), text.end()));
  expect_error([&] { read_image(dir / "missing.png", 3); }, dir / "missing.png");
  expect_error([&] { read_image(dir / "png_rgb.png", 2); }, "png_rgb.png");
}

// Damaged JPEGs get PIL's decision: where Image.open(f).convert("RGB") raises, we fail naming the
// file (saying "truncated JPEG" where PIL says "image file is truncated"); where PIL decodes
// past the damage (libjpeg warnings: bad Huffman codes, stray markers, junk between header
// segments), we decode the same pixels.
TEST_CASE("image decode: damaged JPEGs fail or decode exactly where PIL does") {
  TempDir dir;
  SafetensorsWriter inputs;
  {
    std::ofstream list(dir / "encode.txt");
    uint64_t seed = 7;
    for (const char* line : {"baseline jpg RGB", "progressive jpg RGB progressive", "gray jpg L",
                             "cmyk jpg CMYK"}) {
      const std::string name = std::string(line).substr(0, std::string(line).find(' '));
      add_u8(inputs, name, test_image(72, 96, 4, seed++));
      list << line << '\n';
    }
  }
  inputs.write(dir / "inputs.safetensors");
  run_python("preprocess_torch.py", "encode " + shell_quote(dir.path.string()));

  std::vector<std::string> files;
  {
    std::ofstream list(dir / "decode.txt");
    for (const std::string base : {"baseline", "progressive", "gray", "cmyk"}) {
      const std::vector<uint8_t> jpg = read_file_bytes(dir / (base + ".jpg"));
      REQUIRE((jpg.size() > 600 && jpg[jpg.size() - 2] == 0xFF && jpg[jpg.size() - 1] == 0xD9));
      auto add = [&](const std::string& what, const std::vector<uint8_t>& bytes) {
        files.push_back(base + "_" + what + ".jpg");
        write_bytes(dir / files.back(), bytes);
        list << files.back() << '\n';
      };
      add("intact", jpg);
      for (double keep : {0.3, 0.9, 0.99}) {  // cut inside the (last) scan
        const auto n = std::ptrdiff_t(double(jpg.size()) * keep);
        add("cut" + std::to_string(int(keep * 100)), std::vector<uint8_t>(jpg.begin(), jpg.begin() + n));
      }
      add("no_eoi", std::vector<uint8_t>(jpg.begin(), jpg.end() - 2));
      // The EOI marker replaced by zeros: a baseline file's scanlines all decode, then the data
      // ends while libjpeg looks for EOI, which PIL accepts (its decoder stops once all rows are
      // out); a progressive file needs every scan, up to EOI, before its first row.
      std::vector<uint8_t> zero_eoi(jpg.begin(), jpg.end() - 2);
      zero_eoi.resize(zero_eoi.size() + 16, 0);
      add("eoi_zeroed", zero_eoi);
      std::vector<uint8_t> flipped = jpg;  // entropy-coded bytes garbled
      for (std::size_t i = jpg.size() * 3 / 5; i < jpg.size() * 3 / 5 + 8; ++i) flipped[i] ^= 0x5A;
      add("garbled", flipped);
      std::vector<uint8_t> junk = jpg;  // two stray bytes after the first header segment
      const std::size_t first_end = 4 + (std::size_t(jpg[4]) << 8 | jpg[5]);
      junk.insert(junk.begin() + std::ptrdiff_t(first_end), {0x12, 0x34});
      add("header_junk", junk);
      std::vector<uint8_t> marker = jpg;  // a stray RST0 marker inside the scan
      marker[jpg.size() / 2] = 0xFF, marker[jpg.size() / 2 + 1] = 0xD0;
      add("stray_rst", marker);
    }
  }
  run_python("preprocess_torch.py", "decode " + shell_quote(dir.path.string()));
  const SafetensorsReader pil(dir / "pil_decoded.safetensors");
  int decoded = 0, failed = 0, truncated = 0;
  for (const std::string& f : files) {
    const std::string path = dir / f;
    if (pil.contains(f + ".error")) {
      const auto b = pil.bytes(f + ".error");
      const std::string why(b.begin(), b.end());
      INFO(f, ": PIL raises ", why);  // printed with a failing check of this file
      const bool cut = why.find("truncated") != std::string::npos;
      expect_error([&] { read_image(path, 3); }, path);
      if (cut) expect_error([&] { read_image(path, 3); }, "truncated JPEG");
      ++failed, truncated += cut;
    } else {
      Image ours;
      try {
        ours = read_image(path, 3);
      } catch (const Error& e) {
        FAIL_CHECK(f, ": PIL decodes it, we fail: ", e.message());
        continue;
      }
      const int d = max_diff(ours, read_u8(pil, f + ".rgb"));
      CHECK_MESSAGE(d == 0, f, ": differs from PIL by ", d, " (-1: shape)");
      ++decoded;
    }
  }
  // Both outcomes must occur, or the comparison above proves little.
  CHECK(decoded > 12);  // the intact files and those PIL decodes past damage
  CHECK(truncated >= 12);  // every cut file
  MESSAGE(files.size(), " files: PIL decodes ", decoded, ", raises on ", failed, " (", truncated,
          " truncated)");
}

// A JPEG header can declare far more pixels than its data holds. Decoding a file of several scans
// fills a coefficient buffer of the whole image before the first row, so its cost is known from
// the header, and a file whose decoding would take more than 512 MiB is refused before libjpeg
// allocates anything; a single-scan file of the same size is not refused for memory (its rows
// come out as the data arrives): cut short, it fails as truncated, as in PIL.
TEST_CASE("image decode: JPEG headers declaring huge images are refused before decoding") {
  TempDir dir;
  SafetensorsWriter inputs;
  {
    std::ofstream list(dir / "encode.txt");
    add_u8(inputs, "progressive", test_image(16, 16, 4, 3));
    add_u8(inputs, "baseline", test_image(16, 16, 4, 4));
    list << "progressive jpg CMYK progressive\nbaseline jpg RGB\n";
  }
  inputs.write(dir / "inputs.safetensors");
  run_python("preprocess_torch.py", "encode " + shell_quote(dir.path.string()));
  // Rewrites the height and width of the frame header (SOF0 or SOF2).
  auto declare = [&](const std::string& name, int side, double keep = 1.0) {
    std::vector<uint8_t> jpg = read_file_bytes(dir / (name + ".jpg"));
    jpg.resize(std::size_t(double(jpg.size()) * keep));
    std::size_t i = 2;
    while (i + 9 < jpg.size() && !(jpg[i] == 0xFF && (jpg[i + 1] == 0xC0 || jpg[i + 1] == 0xC2)))
      i += 2 + (std::size_t(jpg[i + 2]) << 8 | jpg[i + 3]);
    REQUIRE(i + 9 < jpg.size());
    jpg[i + 5] = jpg[i + 7] = uint8_t(side >> 8);
    jpg[i + 6] = jpg[i + 8] = uint8_t(side & 0xFF);
    const std::string path = dir / (name + "_" + std::to_string(side) + ".jpg");
    write_bytes(path, jpg);
    return path;
  };
  // 13377^2 pixels is under PIL's limit: 4 components x 2 bytes of coefficients + 3 of output.
  const std::string big = declare("progressive", 13377);
  expect_error([&] { read_image(big, 3); }, big + ": decoding this 13377x13377 multi-scan (progressive) JPEG takes ");
  expect_error([&] { read_image(big, 3); }, "more than the limit of 512 MiB");
  // 2000^2 x 11 bytes is 42 MiB: decoded (rows past the data are libjpeg's gray, as in PIL).
  const Image small = read_image(declare("progressive", 2000), 3);
  CHECK((small.height == 2000 && small.width == 2000 && small.channels == 3));
  const std::string baseline = declare("baseline", 13377, 0.8);  // cut inside the scan
  expect_error([&] { read_image(baseline, 3); }, baseline + ": truncated JPEG");
}

// ---- resize and crops vs PIL / torchvision -----------------------------------------------------

TEST_CASE("image resize and crops equal PIL and torchvision") {
  TempDir dir;
  std::ostringstream list;
  SafetensorsWriter inputs;
  struct Ours {
    std::string key;
    Image img;
  };
  std::vector<Ours> ours;
  int id = 0;
  auto input = [&](int h, int w, int c) {
    std::string key(1, 'i');  // (not "i" + ...: GCC 12 warns -Wrestrict on that falsely)
    key += std::to_string(id++);
    Image img = test_image(h, w, c, uint64_t(id));
    add_u8(inputs, key, img);
    return std::pair{key, img};
  };
  // (h, w) -> (oh, ow): upscale, downscale by large and non-integer factors, 1-pixel images,
  // identity, one side only.
  const std::vector<std::array<int, 4>> resizes = {
      {1, 1, 1, 1},        {1, 1, 5, 7},         {7, 5, 1, 1},         {1, 9, 3, 2},
      {9, 1, 2, 3},        {375, 500, 256, 341}, {500, 375, 341, 256}, {480, 640, 256, 341},
      {90, 120, 256, 341}, {224, 224, 224, 224}, {224, 224, 224, 100}, {224, 224, 100, 224},
      {33, 17, 7, 3},      {10, 1000, 3, 997},   {1000, 10, 997, 3},   {2, 3, 300, 299},
      {401, 397, 13, 11},  {640, 480, 37, 29},   {300, 300, 299, 301}, {64, 64, 32, 32},
      {65, 63, 33, 31}};
  for (int c : {1, 3})
    for (const auto& r : resizes) {
      auto [key, img] = input(r[0], r[1], c);
      list << key << " resize " << r[2] << ' ' << r[3] << '\n';
      ours.push_back({key, resize(img, r[2], r[3])});
    }
  const std::vector<std::array<int, 3>> shorter = {{375, 500, 256}, {500, 375, 256}, {480, 640, 256},
                                                   {333, 500, 256}, {257, 383, 256}, {256, 256, 256},
                                                   {90, 120, 256},  {1, 7, 5}};
  for (int c : {1, 3})
    for (const auto& s : shorter) {
      auto [key, img] = input(s[0], s[1], c);
      list << key << " shorter " << s[2] << '\n';
      ours.push_back({key, resize_shorter(img, s[2])});
    }
  // Center crops: odd differences (Python rounds half to even), crops larger than the image.
  const std::vector<std::array<int, 4>> centers = {
      {256, 341, 224, 224}, {257, 383, 224, 224}, {258, 259, 224, 224}, {225, 226, 224, 224},
      {100, 120, 224, 224}, {101, 300, 224, 150}, {7, 7, 4, 3},         {5, 4, 9, 8}};
  for (int c : {1, 3})
    for (const auto& cc : centers) {
      auto [key, img] = input(cc[0], cc[1], c);
      list << key << " center " << cc[2] << ' ' << cc[3] << '\n';
      ours.push_back({key, center_crop(img, cc[2], cc[3])});
    }
  const std::vector<std::array<int, 6>> crops = {{30, 40, 5, 7, 10, 12},
                                                 {30, 40, -3, -4, 10, 12},
                                                 {30, 40, 25, 35, 10, 12},
                                                 {30, 40, -5, -5, 40, 50},
                                                 {30, 40, 31, 0, 4, 4}};
  for (const auto& k : crops) {
    auto [key, img] = input(k[0], k[1], 3);
    list << key << " crop " << k[2] << ' ' << k[3] << ' ' << k[4] << ' ' << k[5] << '\n';
    ours.push_back({key, crop(img, k[2], k[3], k[4], k[5])});
  }
  // The fused path Transform uses: a source box resized, then a window of that (partly outside),
  // optionally mirrored, as float output converted back to 8 bits.
  const Rng rng(99, stream_id("place cases"));
  for (int n = 0; n < 48; ++n) {
    const int c = n % 2 ? 3 : 1;
    const int h = 1 + int(rng.below(6 * n, 400)), w = 1 + int(rng.below(6 * n + 1, 400));
    auto [key, img] = input(h, w, c);
    Placement p;
    p.src_height = 1 + int(rng.below(6 * n + 2, uint64_t(h)));
    p.src_width = 1 + int(rng.below(6 * n + 3, uint64_t(w)));
    p.src_top = int(rng.below(6 * n + 4, uint64_t(h - p.src_height + 1)));
    p.src_left = int(rng.below(6 * n + 5, uint64_t(w - p.src_width + 1)));
    const Rng r2(7, uint64_t(n));
    p.resized_height = 1 + int(r2.below(0, 300));
    p.resized_width = 1 + int(r2.below(1, 300));
    const int H = 1 + int(r2.below(2, 64)), W = 1 + int(r2.below(3, 64));
    p.top = int(r2.below(4, uint64_t(p.resized_height + 20))) - 10;
    p.left = int(r2.below(5, uint64_t(p.resized_width + 20))) - 10;
    p.flip = r2.below(6, 2) == 1;
    Preprocess spec;
    spec.channels = c, spec.height = H, spec.width = W;
    const Transform tf(spec);
    std::vector<float> x(tf.output_numel());
    tf.render(x.data(), img, p);
    list << key << " place " << p.src_top << ' ' << p.src_left << ' ' << p.src_height << ' ' << p.src_width
         << ' ' << p.resized_height << ' ' << p.resized_width << ' ' << p.top << ' ' << p.left << ' ' << H
         << ' ' << W << ' ' << int(p.flip) << '\n';
    ours.push_back({key, to_u8(x, c, H, W)});
  }
  inputs.write(dir / "inputs.safetensors");
  std::ofstream(dir / "resize.txt") << list.str();
  run_python("preprocess_torch.py", "resize " + shell_quote(dir.path.string()));

  const SafetensorsReader pil(dir / "outputs.safetensors");
  std::istringstream lines(list.str());
  int worst = 0, differing = 0;
  for (const Ours& o : ours) {
    std::string line;
    std::getline(lines, line);
    const Image want = read_u8(pil, o.key);
    const int d = max_diff(o.img, want);
    CHECK_MESSAGE(d == 0, line, ": ours ", dims(o.img), ", PIL ", dims(want), ", max |diff| ", d);
    worst = std::max(worst, d);
    differing += d != 0;
  }
  MESSAGE(ours.size(), " resize/crop cases vs PIL: max |diff| ", worst, ", ", differing, " differ");
}

// ---- the eval recipe vs torchvision, and a torchvision model on both --------------------------

TEST_CASE("image eval recipe matches torchvision; a torchvision model's predictions agree") {
  TempDir dir;
  // 100 photo-like images (10 sizes from 120x90 to 640x480, every 7th gray), PNG and JPEG q90.
  run_python("photo_images.py", shell_quote(dir.path.string()) + " 100 --png-level 1");
  std::vector<std::string> names;
  {
    std::ifstream list(dir / "list.txt");
    for (std::string n; std::getline(list, n);)
      if (!n.empty()) names.push_back(n);
  }
  REQUIRE(names.size() == 200);
  // preprocess_torch.py normalises its gray set with ImageNet's first channel: this compares
  // pixels and rounding, not the engine's choice of 1-channel statistics.
  Preprocess gray_spec = imagenet_eval(224, 256, 1);
  gray_spec.mean = {kImageNetMean[0]};
  gray_spec.stddev = {kImageNetStd[0]};
  const Transform rgb(imagenet_eval()), gray(gray_spec);
  REQUIRE(rgb.output_numel() == 3u * 224 * 224);
  {
    // The decoded JPEG pixels themselves, as stored (gray ones 1 channel), before any resize.
    SafetensorsWriter w;
    for (const std::string& name : names)
      if (fs::path(name).extension() == ".jpg") add_u8(w, name, read_image(dir / name, 0));
    w.write(dir / "ours_decoded.safetensors");
  }
  for (const std::string set : {"png", "jpg", "gray"}) {
    const Transform& tf = set == "gray" ? gray : rgb;
    const std::string ext = set == "jpg" ? ".jpg" : ".png";
    std::vector<float> all;
    Image img;
    int64_t n = 0;
    for (const std::string& name : names) {
      if (fs::path(name).extension() != ext) continue;
      const std::string path = dir / name;
      decode_image(img, read_file_bytes(path), 0, path);  // as stored; apply converts
      all.resize(all.size() + tf.output_numel());
      tf.apply(all.data() + all.size() - tf.output_numel(), img, 0, uint64_t(n), path);
      ++n;
    }
    SafetensorsWriter w;
    w.add_f32("x", all.data(), {n, tf.channels(), 224, 224});
    w.write(dir / ("ours_" + set + ".safetensors"));
  }
  run_python("preprocess_torch.py", "eval " + shell_quote(dir.path.string()));

  const SafetensorsReader r(dir / "eval.safetensors");
  // JPEG: the same libjpeg-turbo called with PIL's settings gives the same bytes.
  const std::vector<float> decoded = r.read_f32("jpg.decoded_max");
  REQUIRE(decoded.size() == 100);
  const float decoded_worst = *std::max_element(decoded.begin(), decoded.end()),
              decoded_least = *std::min_element(decoded.begin(), decoded.end());
  MESSAGE("jpg: ", decoded.size(), " images decoded, |ours - PIL| max ", decoded_worst, " (-1: shape)");
  CHECK_MESSAGE((decoded_worst == 0 && decoded_least == 0), "decoded JPEG pixels differ from PIL's by up to ",
                decoded_worst, " (-1: a shape differs)");
  for (const std::string set : {"png", "jpg", "gray"}) {
    const std::vector<float> mx = r.read_f32(set + ".max_levels"), mean = r.read_f32(set + ".mean_levels");
    const double worst = *std::max_element(mx.begin(), mx.end());
    double avg = 0;
    for (float v : mean) avg += v / double(mean.size());
    MESSAGE(set, ": ", mx.size(), " images, |ours - torchvision| max ", worst, " levels (of 255), mean ", avg,
            ", bit-identical: ", r.read_i64(set + ".identical")[0]);
    // Same pixels, PIL's resize to the bit, and the lookup table rounds as torchvision does.
    CHECK_MESSAGE(worst == 0.0, set, " tensors differ from torchvision's by up to ", worst, " levels");
    CHECK_MESSAGE(r.read_i64(set + ".identical")[0] == 1, set, " tensors are not bit-identical");
  }
  for (const std::string fmt : {"png", "jpg"}) {
    const std::vector<int64_t> theirs = r.read_i64(fmt + ".pred_torchvision"),
                               ours = r.read_i64(fmt + ".pred_ours");
    REQUIRE(theirs.size() == ours.size());
    int agree = 0;
    for (std::size_t i = 0; i < ours.size(); ++i) agree += ours[i] == theirs[i];
    const std::set<int64_t> classes(theirs.begin(), theirs.end());
    const double frac = double(agree) / double(ours.size());
    MESSAGE(fmt, ": mobilenet_v3_small (seed 0) top-1 agrees on ", agree, " of ", ours.size(), " images (",
            100 * frac, "%); ", classes.size(), " distinct classes predicted");
    // Agreement only means something when the predictions depend on the image.
    CHECK_MESSAGE(classes.size() >= 5, fmt, ": only ", classes.size(), " distinct classes");
    CHECK_MESSAGE(frac >= 0.99, fmt, ": predictions agree on ", 100 * frac, "% of images");
  }
}

// ---- augmentation ------------------------------------------------------------------------------

namespace {
std::vector<float> run(const Transform& tf, const Image& img, uint64_t epoch, uint64_t index) {
  std::vector<float> x(tf.output_numel());
  tf.apply(x.data(), img, epoch, index, "sample " + std::to_string(index));
  return x;
}
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
}  // namespace

TEST_CASE("transform augmentation is a function of (seed, epoch, index) only") {
  const Image img = test_image(180, 240, 3, 5);
  const Transform tf(imagenet_train(42, 64)), copy(tf.spec());
  Preprocess other_seed = tf.spec();
  other_seed.seed = 43;
  const Transform tf43(other_seed);
  int same_epoch = 0, same_index = 0, same_seed = 0;
  for (uint64_t i = 0; i < 16; ++i) {
    const std::vector<float> a = run(tf, img, 3, i);
    CHECK(same_bits(a, run(tf, img, 3, i)));
    CHECK(same_bits(a, run(copy, img, 3, i)));
    same_epoch += same_bits(a, run(tf, img, 4, i));
    same_index += same_bits(a, run(tf, img, 3, i + 1000));
    same_seed += same_bits(a, run(tf43, img, 3, i));
  }
  // Two independent RandomResizedCrop draws giving the same output would be a fluke.
  CHECK(same_epoch == 0);
  CHECK(same_index == 0);
  CHECK(same_seed == 0);
  CHECK(tf.random());
  CHECK_FALSE(Transform(imagenet_eval()).random());
}

TEST_CASE("transform output does not depend on threads or call order") {
  const Image rgb = test_image(150, 200, 3, 8), gray = test_image(120, 90, 1, 9),
              small = test_image(32, 32, 3, 10);
  const Transform rrc(imagenet_train(5, 72)), eval(imagenet_eval(64, 72)), cifar(cifar_train(5));
  struct Job {
    const Transform* tf;
    const Image* img;
  };
  const std::vector<Job> jobs = {
      {&rrc, &rgb}, {&rrc, &gray}, {&eval, &rgb}, {&eval, &gray}, {&cifar, &small}};
  constexpr int kSamples = 48;
  std::vector<std::vector<float>> serial, threaded(jobs.size() * kSamples);
  for (const Job& j : jobs)
    for (int i = 0; i < kSamples; ++i) serial.push_back(run(*j.tf, *j.img, 2, uint64_t(i)));
  // Four threads, each taking every fourth sample in reverse, all at once on shared transforms.
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int k = int(threaded.size()) - 1 - t; k >= 0; k -= 4)
        threaded[size_t(k)] =
            run(*jobs[size_t(k / kSamples)].tf, *jobs[size_t(k / kSamples)].img, 2, uint64_t(k % kSamples));
    });
  for (auto& th : threads) th.join();
  int mismatches = 0;
  for (std::size_t k = 0; k < serial.size(); ++k) mismatches += !same_bits(serial[k], threaded[k]);
  CHECK(mismatches == 0);
}

namespace {
Preprocess gray_model_spec() {
  Preprocess p = imagenet_eval(64, 72, 1);
  p.mean = {0.5f};
  p.stddev = {0.25f};
  return p;
}
Preprocess unnormalised_spec() {  // x / 255 only
  Preprocess p = imagenet_eval(48, 0);
  p.mean.clear();
  p.stddev.clear();
  return p;
}

// Images and transforms covering every path of apply()'s halves: random resized crop with
// flips, resize + center crop, CIFAR pad-crop, RGB into a 1-channel model, gray into a
// 3-channel one, a crop reaching outside the image (zero padding), no normalisation.
struct SplitCases {
  Image rgb = test_image(150, 200, 3, 8), gray = test_image(120, 90, 1, 9), small = test_image(32, 32, 3, 10);
  Transform rrc{imagenet_train(5, 72)}, eval{imagenet_eval(64, 72)}, cifar{cifar_train(5)},
      to_gray{gray_model_spec()}, padded{imagenet_eval(96, 0)}, unnormalised{unnormalised_spec()};
  std::vector<std::pair<const Transform*, const Image*>> jobs() const {
    return {{&rrc, &rgb},     {&rrc, &gray},      {&eval, &rgb},      {&eval, &gray},
            {&cifar, &small}, {&to_gray, &rgb}, {&padded, &small}, {&unnormalised, &gray}};
  }
};

// What gpu::Backend::normalize_u8 computes for one sample (kernels/transform.cu): out (C, H, W)
// from (H, W, C) bytes, (v / 255 - mean[c]) / std[c] rounded at each step, mirrored on flip.
std::vector<float> normalize_u8_reference(const std::vector<uint8_t>& px, bool flip, int C, int H, int W,
                                          const std::vector<float>& mean, const std::vector<float>& sd) {
  std::vector<float> out(size_t(C) * H * W);
  for (int c = 0; c < C; ++c)
    for (int h = 0; h < H; ++h)
      for (int w = 0; w < W; ++w) {
        const float v = float(px[(size_t(h) * W + size_t(flip ? W - 1 - w : w)) * C + c]);
        out[(size_t(c) * H + h) * W + w] = (v / 255.0f - mean[size_t(c)]) / sd[size_t(c)];
      }
  return out;
}
}  // namespace

TEST_CASE("transform geometry then normalize equals apply, bit for bit") {
  // The evaluation pipeline resamples on one rank and normalises on another.
  const SplitCases cases;
  const auto jobs = cases.jobs();
  const Transform& eval = cases.eval;
  const Image& small = cases.small;
  int mismatches = 0, flipped = 0;
  for (const auto& [tf, img] : jobs)
    for (uint64_t i = 0; i < 12; ++i) {
      const Image window = tf->geometry(*img, 2, i);
      CHECK(window.height == tf->height());
      CHECK(window.width == tf->width());
      CHECK(window.channels == (tf->channels() == 1 ? 1 : img->channels));
      std::vector<float> split(tf->output_numel());
      tf->normalize(split.data(), window);
      mismatches += !same_bits(split, run(*tf, *img, 2, i));
      flipped += tf->place(img->height, img->width, 2, i).flip;
    }
  CHECK(mismatches == 0);
  CHECK(flipped > 0);  // the flip path was exercised
  std::vector<float> out(eval.output_numel());
  CHECK_THROWS_WITH(eval.normalize(out.data(), small), doctest::Contains("32x32 window for a 64x64"));
}

TEST_CASE("transform window, normalised and mirrored as the GPU does, equals apply bit for bit") {
  // GPU training loads 8-bit windows and normalises them on the device.
  const SplitCases cases;
  const auto jobs = cases.jobs();
  const Transform& unnormalised = cases.unnormalised;
  int mismatches = 0, flipped = 0;
  for (const auto& [tf, img] : jobs) {
    CHECK(tf->mean().size() == size_t(tf->channels()));
    CHECK(tf->stddev().size() == size_t(tf->channels()));
    for (uint64_t i = 0; i < 12; ++i) {
      std::vector<uint8_t> px(tf->output_numel(), 77);  // stale bytes must not survive
      const bool flip = tf->window(px.data(), *img, 2, i);
      CHECK(flip == tf->place(img->height, img->width, 2, i).flip);
      flipped += flip;
      mismatches += !same_bits(normalize_u8_reference(px, flip, tf->channels(), tf->height(), tf->width(),
                                                      tf->mean(), tf->stddev()),
                               run(*tf, *img, 2, i));
    }
  }
  CHECK(mismatches == 0);
  CHECK(flipped > 0);
  CHECK(unnormalised.mean() == std::vector<float>{0.f, 0.f, 0.f});
  CHECK(unnormalised.stddev() == std::vector<float>{1.f, 1.f, 1.f});
}

TEST_CASE("transform RandomResizedCrop stays within torchvision's bounds; fallback; crop + resize") {
  const Transform tf(imagenet_train(3));
  const Preprocess& s = tf.spec();
  const std::vector<std::pair<int, int>> sizes = {{375, 500}, {500, 375}, {224, 224}, {50, 80}, {3, 7}};
  for (const auto& [h, w] : sizes) {
    std::set<int> tops, lefts;
    int flips = 0;
    for (uint64_t i = 0; i < 400; ++i) {
      const Placement p = tf.place(h, w, 1, i, "s");
      REQUIRE((p.src_top >= 0 && p.src_left >= 0 && p.src_height >= 1 && p.src_width >= 1 &&
               p.src_top + p.src_height <= h && p.src_left + p.src_width <= w));
      CHECK((p.resized_height == 224 && p.resized_width == 224 && p.top == 0 && p.left == 0));
      const double ch = p.src_height, cw = p.src_width, area = double(h) * w;
      const bool fallback_shape =
          (p.src_top == (h - p.src_height) / 2 && p.src_left == (w - p.src_width) / 2);
      // Rounded sides of a draw with area in [0.08, 1] * area and aspect in [3/4, 4/3].
      const bool drawn = (cw - 0.5) * (ch - 0.5) <= s.scale_max * area + 1e-9 &&
                         (cw + 0.5) * (ch + 0.5) >= s.scale_min * area - 1e-9 &&
                         (cw - 0.5) / (ch + 0.5) <= s.ratio_max && (cw + 0.5) / (ch - 0.5) >= s.ratio_min;
      CHECK_MESSAGE((drawn || fallback_shape), h, "x", w, " sample ", i, ": box ", ch, "x", cw);
      tops.insert(p.src_top), lefts.insert(p.src_left);
      flips += p.flip;
    }
    if (h >= 50) CHECK((tops.size() > 10 && lefts.size() > 10));
    CHECK((flips > 150 && flips < 250));
  }
  // No draw can fit a 20 x 1000 image (the crop would be at most 20 rows): always torchvision's
  // fallback, the central crop with the ratio clamped to 4/3 (and 3/4 for the tall image).
  for (uint64_t i = 0; i < 20; ++i) {
    const Placement wide = tf.place(20, 1000, 0, i, "wide"), tall = tf.place(1000, 20, 0, i, "tall");
    CHECK((wide.src_top == 0 && wide.src_left == 486 && wide.src_height == 20 && wide.src_width == 27));
    CHECK((tall.src_top == 486 && tall.src_left == 0 && tall.src_height == 27 && tall.src_width == 20));
  }
  // The fused render equals crop, then resize, then flip, on 8-bit images.
  Preprocess plain = s;
  plain.mean.clear(), plain.stddev.clear();
  const Transform raw(plain);
  const Image img = test_image(97, 131, 3, 12);
  for (uint64_t i = 0; i < 8; ++i) {
    const Placement p = raw.place(img.height, img.width, 0, i, "s");
    Image want = resize(crop(img, p.src_top, p.src_left, p.src_height, p.src_width), 224, 224);
    if (p.flip)
      for (int y = 0; y < 224; ++y)
        for (int x = 0; x < 112; ++x)
          for (int c = 0; c < 3; ++c) std::swap(want.row(y)[x * 3 + c], want.row(y)[(223 - x) * 3 + c]);
    CHECK(max_diff(to_u8(run(raw, img, 0, i), 3, 224, 224), want) == 0);
  }
  // And the eval geometry equals resize_shorter + center_crop.
  Preprocess ev = imagenet_eval(200, 230);
  ev.mean.clear(), ev.stddev.clear();
  CHECK(max_diff(to_u8(run(Transform(ev), img, 0, 0), 3, 200, 200),
                 center_crop(resize_shorter(img, 230), 200, 200)) == 0);
}

TEST_CASE("transform flip is an exact mirror; pad-crop adds zeros only outside the image") {
  Image img = test_image(32, 32, 3, 21);
  for (auto& v : img.pixels) v = std::max<uint8_t>(v, 1);  // so a 0 can only come from padding
  Preprocess spec = cifar_train(11);
  spec.mean.clear(), spec.stddev.clear();  // output = v / 255
  const Transform tf(spec);
  std::set<std::pair<int, int>> offsets;
  int flips = 0;
  for (uint64_t i = 0; i < 300; ++i) {
    const Placement p = tf.place(32, 32, 0, i, "s");
    REQUIRE((p.top >= -4 && p.top <= 4 && p.left >= -4 && p.left <= 4));
    offsets.insert({p.top, p.left});
    flips += p.flip;
    const std::vector<float> got = run(tf, img, 0, i);
    Placement q = p;
    q.flip = false;
    std::vector<float> plain(tf.output_numel());
    tf.render(plain.data(), img, q);
    int wrong = 0;
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 32; ++y)
        for (int x = 0; x < 32; ++x) {
          const int sy = y + p.top, sx = x + p.left;
          const bool inside = sy >= 0 && sy < 32 && sx >= 0 && sx < 32;
          const float want = inside ? float(img.row(sy)[sx * 3 + c]) / 255.0f : 0.0f;
          const std::size_t at = (std::size_t(c) * 32 + y) * 32;
          wrong += plain[at + x] != want;
          wrong += got[at + (p.flip ? 31 - x : x)] != plain[at + x];
        }
    CHECK_MESSAGE(wrong == 0, "sample ", i, ": ", wrong, " wrong values");
  }
  CHECK(offsets.size() >= 60);  // of the 81 possible
  CHECK((flips > 110 && flips < 190));
}

TEST_CASE("transform specs: recipes, channel conversion, validation errors") {
  // Fashion-MNIST: identity + normalize, exactly torchvision's float rounding.
  const Transform fm(normalize_only(28, 28, 1, {kFashionMnistMean}, {kFashionMnistStd}));
  const Image digit = test_image(28, 28, 1, 30);
  const std::vector<float> x = run(fm, digit, 0, 0);
  int wrong = 0;
  for (int i = 0; i < 28 * 28; ++i)
    wrong += x[size_t(i)] != (float(digit.pixels[size_t(i)]) / 255.0f - kFashionMnistMean) / kFashionMnistStd;
  CHECK(wrong == 0);
  expect_error([&] { run(fm, test_image(27, 28, 1, 1), 0, 5); }, "sample 5: image is 27x28, expected 28x28");
  // An RGB image for a gray model goes through PIL's luma first; gray for an RGB model replicates.
  const Image color = test_image(28, 28, 3, 31);
  CHECK(same_bits(run(fm, color, 0, 0), run(fm, convert_channels(color, 1), 0, 0)));
  const Transform fm3(normalize_only(28, 28, 3, {0.5f}, {0.25f}));
  CHECK(same_bits(run(fm3, digit, 0, 0), run(fm3, convert_channels(digit, 3), 0, 0)));
  // Explicit resize to H x W for fixed-size datasets.
  Preprocess fixed = normalize_only(20, 30, 3, {}, {});
  fixed.geometry = Geometry::Resize;
  CHECK(max_diff(to_u8(run(Transform(fixed), color, 0, 0), 3, 20, 30), resize(color, 20, 30)) == 0);

  Preprocess p = imagenet_eval();
  CHECK((p.geometry == Geometry::ResizeCenterCrop && p.resize == 256 && p.height == 224 && p.width == 224));
  p.mean = {0.1f, 0.2f};
  expect_error([&] { Transform t(p); }, "mean has 2 values");
  p = imagenet_eval();
  p.stddev = {0.2f, 0.0f, 0.2f};
  expect_error([&] { Transform t(p); }, "std must be non-zero");
  p = imagenet_eval();
  p.channels = 2;
  expect_error([&] { Transform t(p); }, "channels must be 1 or 3");
  p = normalize_only(28, 28, 1, {}, {});
  p.resize = 32;
  expect_error([&] { Transform t(p); }, "needs a center crop");
  p = imagenet_train(1);
  p.scale_min = 0;
  expect_error([&] { Transform t(p); }, "scale");
  const Transform cifar(cifar_train(1));
  CHECK((cifar.spec().padding == 4 && cifar.height() == 32 && cifar.spec().hflip));
  std::vector<float> out(cifar.output_numel());
  const Image wide = test_image(20, 40, 3, 1);
  expect_error([&] { cifar.apply(out.data(), wide, 0, 9); }, "sample 9: image is 20x40");  // unnamed
  expect_error([&] { cifar.apply(out.data(), wide, 0, 9, "cat.png"); }, "cat.png: image is 20x40");
}
