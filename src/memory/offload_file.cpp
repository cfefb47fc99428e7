#include "memory/offload_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <vector>

#include "core/error.h"
#include "memory/compute_arena.h"  // format_bytes

namespace lt {

std::string errno_text(int err) {
  return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")";
}

namespace {

const char* kFixDir = "pass --offload-dir a directory on a writable local filesystem with enough space";

}  // namespace

void OffloadFile::check_directory(const std::filesystem::path& dir, size_t bytes) {
  const std::string where = "offload directory " + dir.string();
  struct stat st{};
  if (::stat(dir.c_str(), &st) != 0)
    throw Error("cannot use the offload directory: " + errno_text(errno), where,
                "create it, or " + std::string(kFixDir));
  if (!S_ISDIR(st.st_mode)) throw Error("the offload path is not a directory", where, kFixDir);
  struct statvfs vfs{};
  if (::statvfs(dir.c_str(), &vfs) != 0)
    throw Error("cannot query free space: " + errno_text(errno), where, kFixDir);
  if (vfs.f_flag & ST_RDONLY)
    throw Error("the offload directory is on a read-only filesystem", where,
                "remount it read-write, or " + std::string(kFixDir));
  // f_bavail: blocks available to unprivileged users, the space we may count on.
  const unsigned long long available = static_cast<unsigned long long>(vfs.f_bavail) * vfs.f_frsize;
  if (bytes > available)
    throw Error("not enough free space for the NVMe tier: need " + format_bytes(bytes) + ", available " +
                    format_bytes(available) + ", short by " + format_bytes(bytes - available),
                where,
                "free space there, pass --offload-dir on a larger filesystem, or re-plan with a smaller "
                "NVMe budget (more recomputation or host offload)");
}

OffloadFile::OffloadFile(const std::filesystem::path& dir, size_t bytes, bool want_direct_io) : bytes_(bytes) {
  check_directory(dir, bytes);
  const std::string where = "offload directory " + dir.string();
  std::string name = (dir / ("lazytrain-offload-" + std::to_string(::getpid()) + "-XXXXXX.bin")).string();
  std::vector<char> templ(name.begin(), name.end());
  templ.push_back('\0');
  fd_ = ::mkostemps(templ.data(), 4, O_CLOEXEC);
  if (fd_ < 0) {
    const int err = errno;
    if (err == EROFS) throw Error("the offload directory is on a read-only filesystem", where, kFixDir);
    throw Error("cannot create an offload file: " + errno_text(err), where, kFixDir);
  }
  path_ = templ.data();
  // From here the destructor does not run if we throw: clean up by hand.
  auto fail = [&](const std::string& what, const std::string& fix) {
    ::close(fd_);
    ::unlink(path_.c_str());
    fd_ = -1;
    throw Error(what, "offload file " + path_, fix);
  };
  if (bytes > 0 && ::fallocate(fd_, 0, 0, static_cast<off_t>(bytes)) != 0) {
    const int err = errno;
    if (err == ENOSPC)
      fail("not enough free space to preallocate " + format_bytes(bytes) + ": " + errno_text(err),
           "free space there, pass --offload-dir on a larger filesystem, or re-plan with a smaller NVMe budget");
    if (err == EOPNOTSUPP)
      fail("this filesystem cannot preallocate files (fallocate): " + errno_text(err),
           "pass --offload-dir on ext4, xfs, btrfs or tmpfs");
    fail("cannot preallocate " + format_bytes(bytes) + ": " + errno_text(err), kFixDir);
  }
  if (want_direct_io) {
    const int dfd = ::open(path_.c_str(), O_RDWR | O_DIRECT | O_CLOEXEC);
    if (dfd >= 0) {
      ::close(fd_);
      fd_ = dfd;
      direct_ = true;
    } else if (errno == EINVAL) {
      std::fprintf(stderr,
                   "lazytrain: note: the filesystem of %s does not support O_DIRECT; the NVMe tier "
                   "uses buffered I/O there (correct, but it goes through the page cache)\n",
                   dir.c_str());
    } else {
      fail("cannot reopen the offload file with O_DIRECT: " + errno_text(errno), kFixDir);
    }
  }
}

OffloadFile::~OffloadFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!path_.empty()) ::unlink(path_.c_str());
}

}  // namespace lt
