#include "io/atomic_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "core/error.h"

namespace lt {

namespace {
std::string errno_text() { return std::strerror(errno); }
constexpr const char* kDiskFix = "check free space, permissions and that the directory exists";
}  // namespace

AtomicFileWriter::AtomicFileWriter(const std::string& path)
    : path_(path), tmp_path_(path + ".tmp." + std::to_string(::getpid())) {
  fd_ = ::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error("cannot create file for writing: " + errno_text(), tmp_path_, kDiskFix);
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_path_.c_str());
}

void AtomicFileWriter::write(const void* data, size_t bytes) {
  LT_ASSERT(fd_ >= 0 && !committed_, "write after commit");
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    // Linux writes at most ~2 GiB per call; loop over short writes.
    ssize_t n = ::write(fd_, p, bytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error("write failed after " + std::to_string(written_) + " bytes: " + errno_text(), path_, kDiskFix);
    }
    if (n == 0) throw Error("write made no progress", path_, kDiskFix);
    p += n;
    bytes -= static_cast<size_t>(n);
    written_ += static_cast<size_t>(n);
  }
}

void AtomicFileWriter::commit() {
  LT_ASSERT(fd_ >= 0 && !committed_, "commit twice");
  // fsync before rename: otherwise a crash can leave the new name pointing at empty data.
  if (::fsync(fd_) != 0) throw Error("fsync failed: " + errno_text(), path_, kDiskFix);
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) throw Error("close failed: " + errno_text(), path_, kDiskFix);
  if (std::rename(tmp_path_.c_str(), path_.c_str()) != 0)
    throw Error("cannot rename " + tmp_path_ + " into place: " + errno_text(), path_, kDiskFix);
  committed_ = true;
  // Make the rename itself durable. Best effort: some file systems refuse fsync on a directory.
  std::string dir = std::filesystem::path(path_).parent_path().string();
  int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void prepare_output_file(const std::string& path, const std::string& where) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty() && !std::filesystem::is_directory(parent, ec)) {
    std::filesystem::create_directories(parent, ec);
    if (ec)
      throw Error("cannot create the directory " + parent.string() + " for " + path + ": " + ec.message(), where,
                  "give a path whose directory exists or can be created");
  }
  try {
    AtomicFileWriter probe(path);  // not committed: the temporary file goes again
  } catch (const Error& e) {
    throw Error(std::string("cannot write ") + path + ": " + e.what(), where,
                "give a path in a writable directory");
  }
}

void write_file_atomic(const std::string& path, const std::string& text) {
  AtomicFileWriter w(path);
  w.write(text.data(), text.size());
  w.commit();
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open file for reading", path, "check that the path exists and is readable");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw Error("read failed", path, "check the file system");
  return ss.str();
}

}  // namespace lt
