// Crash-safe file replacement: data goes to a temporary file next to the target, which is
// fsync'ed, renamed over the target, and the directory fsync'ed. Readers see the old file
// or the complete new one, never a torn one. Not a lock: two concurrent writers of the same
// path each produce a complete file and the last rename wins.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace mpicnn {

// Streams bytes into a temporary "<path>.tmp.<pid>.<n>" in the target's directory. commit()
// publishes it as `path`; destroying an uncommitted AtomicFile removes the temporary and
// leaves whatever was at `path` untouched. Errors name the target path.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t bytes);
  void write(std::span<const uint8_t> bytes) { write(bytes.data(), bytes.size()); }
  // fsync, close, rename over the target, fsync the directory. Once only.
  void commit();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_; }

 private:
  void discard() noexcept;
  std::string path_, temp_;
  int fd_ = -1;
  bool committed_ = false;
};

// One-shot form: the whole file from one buffer.
void write_file_atomic(const std::string& path, std::span<const uint8_t> bytes);

}  // namespace mpicnn
