// The cost of the checkpoint CRC-32s on a real model: zlib's CRC-32 over the weight bytes alone,
// then writing model.safetensors (the writer's CRC pass included), reading it back raw and with
// SafetensorsReader (read + verify every tensor's CRC), and a whole save_checkpoint /
// load_checkpoint (model + SGD momentum + trainer.json). Best of N; the files go to DIR (its
// filesystem decides the write times: fsync included).
// Usage: checkpoint_bench [model=resnet50] [dir=/tmp] [reps=3]
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "core/timer.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "models/registry.h"
#include "optim/sgd.h"

using namespace mpicnn;
namespace fs = std::filesystem;

namespace {

// ms of the fastest of `reps` calls.
template <typename F>
double best_ms(int reps, F&& f) {
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    Timer t;
    f();
    best = std::min(best, t.seconds() * 1e3);
  }
  return best;
}

size_t raw_read(const std::string& path) {
  std::vector<char> buf(size_t(fs::file_size(path)));
  const int fd = ::open(path.c_str(), O_RDONLY);
  size_t got = 0;
  for (ssize_t n; got < buf.size() && (n = ::read(fd, buf.data() + got, buf.size() - got)) > 0;) got += size_t(n);
  ::close(fd);
  return got;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string name = argc > 1 ? argv[1] : "resnet50";
    const fs::path dir = fs::path(argc > 2 ? argv[2] : "/tmp") / ("ckbench-" + std::to_string(::getpid()));
    const int reps = argc > 3 ? std::atoi(argv[3]) : 3;
    fs::create_directories(dir);
    auto model = build_model(name, {}, 0);
    SGD opt(model->params(), {.lr = 0.1, .momentum = 0.9});
    const Tensor& w = model->params().values();
    const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(w.data()), size_t(w.numel()) * 4);
    const double gb = double(bytes.size()) / 1e9;
    const double crc_ms = best_ms(reps, [&] { (void)crc32_of(bytes); });
    const std::string file = (dir / "model.safetensors").string();
    const double write_ms = best_ms(reps, [&] { model->save_state_dict(file); });
    const double raw_ms = best_ms(reps, [&] { (void)raw_read(file); });
    const double read_ms = best_ms(reps, [&] { SafetensorsReader r(file); });
    TrainerState st;
    st.run_started = "2026-01-01T00:00:00Z";
    const double save_ms = best_ms(reps, [&] { save_checkpoint(dir.string(), *model, opt, st, 1); });
    const double load_ms = best_ms(reps, [&] { load_checkpoint(dir.string(), *model, opt); });
    std::printf("%s: %zu weight bytes (%.1f MB); model.safetensors %ju bytes\n", name.c_str(), bytes.size(),
                gb * 1e3, uintmax_t(fs::file_size(file)));
    std::printf("crc32 (zlib) of the weights:          %7.1f ms  %5.2f GB/s\n", crc_ms, gb / (crc_ms / 1e3));
    std::printf("write model.safetensors (CRC incl.):  %7.1f ms  %5.2f GB/s  (CRC share %.0f%%)\n", write_ms,
                gb / (write_ms / 1e3), 100 * crc_ms / write_ms);
    std::printf("read raw (page cache):                %7.1f ms  %5.2f GB/s\n", raw_ms, gb / (raw_ms / 1e3));
    std::printf("SafetensorsReader (read + verify):    %7.1f ms  %5.2f GB/s  (verify share %.0f%%)\n", read_ms,
                gb / (read_ms / 1e3), 100 * (read_ms - raw_ms) / read_ms);
    std::printf("save_checkpoint (model+optim+json):   %7.1f ms\n", save_ms);
    std::printf("load_checkpoint (verify + restore):   %7.1f ms\n", load_ms);
    fs::remove_all(dir);
  } catch (const Error& e) {
    std::fprintf(stderr, "checkpoint_bench: %s\n", e.message().c_str());
    return 1;
  }
  return 0;
}
