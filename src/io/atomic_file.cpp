// AtomicFile: temp file + fsync + rename + directory fsync (POSIX).
// Not portable to Windows (rename over an open file and directory fsync differ there).
#include "io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/check.h"

namespace mpicnn {

static std::string errno_text(int err) { return std::strerror(err); }

static std::string parent_dir(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? std::string(".") : dir;
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  CHECK(!path_.empty(), "cannot write a file with an empty path");
  // The pid and a process-wide counter make the name unique among our own writers; O_EXCL
  // guards against anything else (a stale temp from a crashed run) holding the name.
  static std::atomic<uint64_t> counter{0};
  for (int attempt = 0; attempt < 100; ++attempt) {
    temp_ = path_ + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
    // Mode 0666 lets the umask decide permissions, as for any newly created file.
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ >= 0) return;
    if (errno != EEXIST) break;
  }
  const int err = errno;
  temp_.clear();
  FAIL("cannot write ", path_, ": ", errno_text(err));
}

AtomicFile::~AtomicFile() { discard(); }

void AtomicFile::discard() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!committed_ && !temp_.empty()) ::unlink(temp_.c_str());
  temp_.clear();
}

void AtomicFile::write(const void* data, size_t bytes) {
  CHECK(fd_ >= 0, "cannot write ", path_, ": file already committed or failed");
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    // Linux transfers at most ~2 GiB per call; short writes are normal on some filesystems.
    const ssize_t n = ::write(fd_, p, bytes < (size_t(1) << 30) ? bytes : (size_t(1) << 30));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      discard();
      FAIL("cannot write ", path_, ": ", errno_text(err));
    }
    p += n;
    bytes -= size_t(n);
  }
}

void AtomicFile::commit() {
  CHECK(fd_ >= 0, "cannot write ", path_, ": file already committed or failed");
  int err = 0;
  if (::fsync(fd_) != 0) err = errno;
  if (::close(fd_) != 0 && err == 0) err = errno;  // NFS may report write errors only here
  fd_ = -1;
  if (err == 0 && ::rename(temp_.c_str(), path_.c_str()) != 0) err = errno;
  if (err != 0) {
    discard();
    FAIL("cannot write ", path_, ": ", errno_text(err));
  }
  committed_ = true;
  temp_.clear();
  // Without this the rename itself may be lost on power failure, leaving the old file.
  const std::string dir = parent_dir(path_);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  CHECK(dfd >= 0, "wrote ", path_, " but cannot open its directory to sync it: ",
        errno_text(errno));
  err = ::fsync(dfd) != 0 ? errno : 0;
  ::close(dfd);
  // Some filesystems (certain FUSE and network mounts) cannot sync a directory at all; the
  // rename is then as durable as that filesystem makes it, which is not an error of ours.
  CHECK(err == 0 || err == EINVAL || err == ENOTSUP, "wrote ", path_,
        " but cannot sync its directory: ", errno_text(err));
}

void write_file_atomic(const std::string& path, std::span<const uint8_t> bytes) {
  AtomicFile f(path);
  f.write(bytes);
  f.commit();
}

}  // namespace mpicnn
