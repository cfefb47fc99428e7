// One preallocated scratch file of the NVMe tier, in the user's --offload-dir (RAII).
//
// Setup order, so that every environment problem is an lt::Error before any data moves:
//  1. the directory exists, is a directory, and its filesystem is not read-only;
//  2. statvfs shows at least `bytes` available to us (the planned total), else the error
//     names the directory, the bytes needed and available, and what to do;
//  3. a uniquely named file "lazytrain-offload-<pid>-XXXXXX.bin" is created (mkstemp:
//     unique per process and per store);
//  4. fallocate reserves all of it, so no write can hit ENOSPC in the middle of a step;
//  5. it is reopened with O_DIRECT; a filesystem that refuses O_DIRECT (EINVAL; older
//     tmpfs, some FUSE and network filesystems) falls back to buffered I/O with a note on
//     stderr, since correctness does not depend on it, only the page cache's footprint.
// The file is closed and unlinked by the destructor, also when a later setup step throws.
// A process killed by SIGKILL leaves its file behind: the pid in the name says whose.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>

namespace lt {

class OffloadFile {
 public:
  OffloadFile(const std::filesystem::path& dir, size_t bytes, bool want_direct_io);
  ~OffloadFile();
  OffloadFile(const OffloadFile&) = delete;
  OffloadFile& operator=(const OffloadFile&) = delete;

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  size_t bytes() const { return bytes_; }
  bool direct_io() const { return direct_; }

  // Throws lt::Error unless `dir` is a writable directory with `bytes` available.
  static void check_directory(const std::filesystem::path& dir, size_t bytes);

 private:
  std::string path_;
  int fd_ = -1;
  size_t bytes_ = 0;
  bool direct_ = false;
};

// "Input/output error (errno 5)"
std::string errno_text(int err);

}  // namespace lt
