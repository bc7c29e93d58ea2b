// Shared by the libFuzzer harnesses (tests/fuzz/fuzz_*.cpp): a scratch folder for parsers that
// only read from a path, and the small framing helpers that split one fuzz input into several
// files. Not a test framework: each harness is one LLVMFuzzerTestOneInput.
#pragma once
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>

namespace fuzz {

// One folder per process, removed at exit: under $MPICNN_FUZZ_TMP when set (the test suite
// points it into its own scratch folder, so a crashed run leaves nothing behind), else in
// /dev/shm (no disk writes per input) or /tmp. Reused by every input, so a harness deletes
// what it wrote last time first.
inline const std::string& scratch_dir() {
  // Never destroyed: the exit handler that removes the folder runs after static destructors.
  static const std::string* const dir = [] {
    const char* base = std::getenv("MPICNN_FUZZ_TMP");
    if (!base || !*base) base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    auto* d = new std::string(std::string(base) + "/mpicnn-fuzz.XXXXXX");
    if (!mkdtemp(d->data())) std::abort();
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch_dir(), ec);
    });
    return d;
  }();
  return *dir;
}

inline std::string scratch_path(const std::string& name) { return scratch_dir() + "/" + name; }

// Writes bytes to `path` (replacing it); aborts on an I/O error, which is the harness's, not
// the parser's.
inline void write_file(const std::string& path, std::span<const uint8_t> bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) std::abort();
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) std::abort();
    done += size_t(n);
  }
  ::close(fd);
}

inline void remove_file(const std::string& path) { ::unlink(path.c_str()); }

// Reads the input front to back: fixed-size little-endian fields, then byte runs (short
// reads give what is left, so every input is valid framing).
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : p_(data), left_(size) {}
  uint8_t u8() { return left_ ? (--left_, *p_++) : 0; }
  uint32_t u16() { return u8() | uint32_t(u8()) << 8; }
  uint32_t u32() { return u16() | u16() << 16; }
  std::span<const uint8_t> take(size_t n) {
    n = n < left_ ? n : left_;
    std::span<const uint8_t> s(p_, n);
    p_ += n, left_ -= n;
    return s;
  }
  std::span<const uint8_t> rest() { return take(left_); }

 private:
  const uint8_t* p_;
  size_t left_;
};

}  // namespace fuzz
