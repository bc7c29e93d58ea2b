// Single-thread throughput of the eval input pipeline: read file, decode, Resize(256),
// CenterCrop(224), ToTensor + Normalize (ImageNet), per image format in a folder.
// Not a loader benchmark (no threads, no batching); bench/pil_image_bench.py is its peer.
//
// Usage: image_bench DIR [PASSES] [--stages]
// Reads DIR/list.txt (or every .png/.jpg/.jpeg/.bmp in DIR), runs PASSES passes (default 3)
// over the files of each format, prints "FORMAT images/s" from the best pass. --stages also
// prints where the time goes (read, decode, transform) from a separately timed pass.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "core/check.h"
#include "data/image.h"
#include "data/transform.h"

namespace fs = std::filesystem;
using namespace mpicnn;
using namespace mpicnn::data;
using Clock = std::chrono::steady_clock;

static double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

int main(int argc, char** argv) try {
  CHECK(argc >= 2, "usage: image_bench DIR [PASSES] [--stages]");
  const fs::path dir = argv[1];
  int passes = 3;
  bool stages = false;
  for (int i = 2; i < argc; ++i) {
    if (std::string(argv[i]) == "--stages")
      stages = true;
    else
      passes = std::stoi(argv[i]);
  }
  std::vector<std::string> names;
  if (std::ifstream list(dir / "list.txt"); list) {
    for (std::string line; std::getline(list, line);)
      if (!line.empty()) names.push_back(line);
  } else {
    for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
  }
  std::map<std::string, std::vector<std::string>> by_format;
  for (const auto& n : names) {
    std::string ext = fs::path(n).extension().string();
    if (ext == ".jpeg") ext = ".jpg";
    if (ext == ".png" || ext == ".jpg" || ext == ".bmp")
      by_format[ext.substr(1)].push_back((dir / n).string());
  }
  CHECK(!by_format.empty(), dir.string(), ": no .png, .jpg or .bmp files");

  PreprocessQuery q;  // torchvision's eval recipe: Resize(256), CenterCrop(224), ImageNet stats
  q.kind = "imagefolder";
  const Transform tf(default_preprocess(q).eval);
  std::vector<float> out(tf.output_numel());  // (3, 224, 224)
  Image img;                                  // reused across images, as a loader thread does
  double checksum = 0;
  for (const auto& [format, files] : by_format) {
    double best = 1e300;
    for (int p = 0; p < passes; ++p) {
      const auto t0 = Clock::now();
      for (const auto& f : files) {
        const std::vector<uint8_t> bytes = read_file_bytes(f);
        decode_image(img, bytes, 0, f);
        tf.apply(out.data(), img, 0, 0, f);
        checksum += out[out.size() / 2];
      }
      best = std::min(best, seconds(t0, Clock::now()));
    }
    std::printf("%s %.1f images/s (%zu files, best of %d passes)\n", format.c_str(), files.size() / best,
                files.size(), passes);
    if (stages) {
      double t_read = 0, t_decode = 0, t_tf = 0;
      for (const auto& f : files) {
        const auto a = Clock::now();
        const std::vector<uint8_t> bytes = read_file_bytes(f);
        const auto b = Clock::now();
        decode_image(img, bytes, 0, f);
        const auto c = Clock::now();
        tf.apply(out.data(), img, 0, 0, f);
        const auto d = Clock::now();
        t_read += seconds(a, b), t_decode += seconds(b, c), t_tf += seconds(c, d);
        checksum += out[0];
      }
      const double n = double(files.size()) / 1e3;
      std::printf("  %s per image: read %.3f ms, decode %.3f ms, resize+crop+normalize %.3f ms\n",
                  format.c_str(), t_read / n, t_decode / n, t_tf / n);
    }
  }
  std::fprintf(stderr, "checksum %g\n", checksum);
  return 0;
} catch (const Error& e) {
  std::fprintf(stderr, "%s\n", e.message().c_str());
  return 1;
}
