// Helpers for the NVMe store tests: random fill, checksums, and scratch filesystems (tmpfs
// and loop-mounted ext4) for the fault tests. Header-only: the test build globs only
// *_test.cpp. Mounting needs root: the helpers say why they could not, and the tests
// GTEST_SKIP with that reason.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <unistd.h>
#include <vector>

#ifndef FS_IOC_SHUTDOWN
#define FS_IOC_SHUTDOWN _IOR('X', 125, __u32)
#endif

namespace lt::test {

// A filesystem mounted at a fresh directory, unmounted (lazily) by the destructor.
class ScratchMount {
 public:
  // tmpfs of `bytes`. Null, with *why set, when mounting is not permitted.
  static std::unique_ptr<ScratchMount> tmpfs(const std::filesystem::path& at, size_t bytes, std::string* why);
  // ext4 in an image file of `bytes`, loop-mounted (supports O_DIRECT and shutdown).
  static std::unique_ptr<ScratchMount> ext4_loop(const std::filesystem::path& image,
                                                 const std::filesystem::path& at, size_t bytes,
                                                 std::string* why);
  ~ScratchMount();
  const std::filesystem::path& path() const { return path_; }
  // Remount read-only; returns an empty string or why it failed.
  std::string remount_read_only();
  // Shut the filesystem down (FS_IOC_SHUTDOWN, what xfs_io's "shutdown" does: every later
  // I/O fails with EIO, as when a dying drive takes its filesystem down); returns an empty
  // string or why it failed.
  std::string shut_down();

 private:
  explicit ScratchMount(std::filesystem::path p) : path_(std::move(p)) {}
  std::filesystem::path path_;
};

inline void fill_random(void* data, size_t bytes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto* p = static_cast<unsigned char*>(data);
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    const uint64_t v = rng();
    std::memcpy(p + i, &v, 8);
  }
  for (; i < bytes; ++i) p[i] = static_cast<unsigned char>(rng());
}

inline uint64_t checksum(const void* data, size_t bytes) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

inline uint64_t file_checksum(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<char> all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return checksum(all.data(), all.size());
}

inline size_t count_files(const std::filesystem::path& dir) {
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().filename() != "lost+found") ++n;
  return n;
}

inline std::unique_ptr<ScratchMount> ScratchMount::tmpfs(const std::filesystem::path& at, size_t bytes, std::string* why) {
  if (::geteuid() != 0) {
    *why = "mounting a scratch tmpfs needs root";
    return nullptr;
  }
  std::filesystem::create_directories(at);
  const std::string opts = "size=" + std::to_string(bytes);
  if (::mount("tmpfs", at.c_str(), "tmpfs", 0, opts.c_str()) != 0) {
    *why = "mount -t tmpfs failed: " + std::string(std::strerror(errno));
    return nullptr;
  }
  return std::unique_ptr<ScratchMount>(new ScratchMount(at));
}

inline std::unique_ptr<ScratchMount> ScratchMount::ext4_loop(const std::filesystem::path& image,
                                                      const std::filesystem::path& at, size_t bytes,
                                                      std::string* why) {
  if (::geteuid() != 0) {
    *why = "loop-mounting an ext4 image needs root";
    return nullptr;
  }
  std::filesystem::create_directories(at);
  {
    std::ofstream(image).close();
    std::filesystem::resize_file(image, bytes);
  }
  const std::string mkfs = "mkfs.ext4 -q -F '" + image.string() + "' >/dev/null 2>&1";
  if (std::system(mkfs.c_str()) != 0) {
    *why = "mkfs.ext4 is not available or failed";
    return nullptr;
  }
  const std::string mnt = "mount -o loop '" + image.string() + "' '" + at.string() + "' 2>&1";
  if (std::system(mnt.c_str()) != 0) {
    *why = "mount -o loop failed (no loop devices in this container?)";
    return nullptr;
  }
  return std::unique_ptr<ScratchMount>(new ScratchMount(at));
}

inline ScratchMount::~ScratchMount() {
  // Lazy: a shut-down ext4 or a busy tmpfs still goes; the loop device auto-clears.
  ::umount2(path_.c_str(), MNT_DETACH);
}

inline std::string ScratchMount::shut_down() {
  const int dfd = ::open(path_.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd < 0) return "open " + path_.string() + ": " + std::strerror(errno);
  __u32 flags = 2;  // FS_GOING_FLAGS_NOLOGFLUSH
  const int rc = ::ioctl(dfd, FS_IOC_SHUTDOWN, &flags);
  const int err = errno;
  ::close(dfd);
  return rc == 0 ? "" : "FS_IOC_SHUTDOWN not permitted here: " + std::string(std::strerror(err));
}

inline std::string ScratchMount::remount_read_only() {
  if (::mount(nullptr, path_.c_str(), nullptr, MS_REMOUNT | MS_RDONLY, nullptr) != 0)
    return "remount read-only failed: " + std::string(std::strerror(errno));
  return "";
}

}  // namespace lt::test
