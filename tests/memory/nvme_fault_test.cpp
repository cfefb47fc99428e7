// Section 7 of issue 4, the NVMe tier's faults, on real scratch filesystems:
//  (a) an offload directory on a full filesystem (tmpfs of 1 MiB);
//  (b) an offload directory on a read-only filesystem (tmpfs remounted read-only);
//  (c) an I/O error in the middle of a step: a real kernel EIO, from an ext4 image that is
//      shut down (FS_IOC_SHUTDOWN, what xfs_io's "shutdown" does) under a live store.
// Each must give a clear lt::Error and lose nothing already saved: files that were in the
// directory stay intact, and a failed write leaves its source buffer as it was.
// Mounting needs root; without it these tests GTEST_SKIP with the reason.
#include <gtest/gtest.h>

#include <fcntl.h>

#include <cstdio>
#include <fstream>
#include <unistd.h>

#include "core/error.h"
#include "memory/host_pool.h"
#include "memory/nvme_store.h"
#include "memory/nvme_test_util.h"
#include "test_util.h"


namespace lt {
namespace {

using test::checksum;
using test::fill_random;

// A file standing for what a run saved before the fault (a checkpoint, a log).
uint64_t save_file(const std::filesystem::path& path, size_t bytes, uint64_t seed) {
  std::vector<char> data(bytes);
  fill_random(data.data(), bytes, seed);
  std::ofstream(path, std::ios::binary).write(data.data(), static_cast<std::streamsize>(bytes));
  return checksum(data.data(), bytes);
}

TEST(NvmeFaultTest, FullFilesystemIsAClearErrorBeforeAnything) {
  test::TempDir scratch("nvme-full");
  std::string why;
  auto mnt = test::ScratchMount::tmpfs(scratch.path() / "mnt", 1 << 20, &why);
  if (!mnt) GTEST_SKIP() << why;
  const auto saved = mnt->path() / "saved.bin";
  const uint64_t saved_sum = save_file(saved, 300 << 10, 1);

  NvmeStoreOptions o;
  o.dir = mnt->path();
  const std::string m = test::error_of([&] { NvmeStore store({{"a.5.nvme", 4 << 20}}, o); });
  EXPECT_NE(m.find("not enough free space"), std::string::npos) << m;
  EXPECT_NE(m.find("need 4194304 bytes"), std::string::npos) << m;
  EXPECT_NE(m.find("available"), std::string::npos) << m;
  EXPECT_NE(m.find(mnt->path().string()), std::string::npos) << m;
  EXPECT_NE(m.find("--offload-dir"), std::string::npos) << m;
  // Nothing created, nothing lost.
  EXPECT_EQ(test::count_files(mnt->path()), 1u);
  EXPECT_EQ(test::file_checksum(saved), saved_sum);
}

TEST(NvmeFaultTest, PreallocatedStoreKeepsWorkingWhenTheFilesystemFillsUp) {
  // The reason for fallocate: once the store exists, others filling the disk cannot make
  // a write in the middle of a step fail with ENOSPC.
  test::TempDir scratch("nvme-fill");
  std::string why;
  auto mnt = test::ScratchMount::tmpfs(scratch.path() / "mnt", 2 << 20, &why);
  if (!mnt) GTEST_SKIP() << why;
  NvmeStoreOptions o;
  o.dir = mnt->path();
  NvmeStore store({{"a", 1 << 20}}, o);
  {  // fill the rest of the filesystem
    std::ofstream hog(mnt->path() / "hog.bin", std::ios::binary);
    std::vector<char> block(64 << 10, 'x');
    for (int i = 0; i < 64 && hog.write(block.data(), block.size()); ++i) {
    }
  }
  HostPool pool("host");
  HostBuffer src = pool.allocate(1 << 20, "src"), dst = pool.allocate(1 << 20, "dst");
  fill_random(src.data(), 1 << 20, 2);
  store.wait(store.write(0, 0, src.data(), 1 << 20));
  store.wait(store.read(0, 0, dst.data(), 1 << 20));
  EXPECT_EQ(checksum(dst.data(), 1 << 20), checksum(src.data(), 1 << 20));
}

// tmpfs, the usual "fast scratch" a user points --offload-dir at: before Linux 6.6 it takes
// no O_DIRECT (open fails with EINVAL), later kernels take it. The store must follow the
// file system: O_DIRECT where it works, else one note on stderr and buffered I/O (the
// documented fallback, issue 14 part 4), and the same bytes back either way. Which branch
// ran is printed; the buffered path's data is also checked on any kernel by
// NvmeStoreTest.RoundTripsWithBufferedIoTinyChunksAndQueueDepthOne.
TEST(NvmeFaultTest, OffloadDirOnTmpfsUsesODirectOnlyWhereItWorks) {
  test::TempDir scratch("nvme-tmpfs");
  std::string why;
  auto mnt = test::ScratchMount::tmpfs(scratch.path() / "mnt", 4 << 20, &why);
  if (!mnt) GTEST_SKIP() << why;
  const std::string probe = (mnt->path() / "probe").string();
  ::close(::open(probe.c_str(), O_CREAT | O_WRONLY, 0600));
  const int pfd = ::open(probe.c_str(), O_RDWR | O_DIRECT);
  const bool fs_takes_direct = pfd >= 0;
  if (pfd >= 0) ::close(pfd);
  std::filesystem::remove(probe);
  std::printf("tmpfs on this kernel %s O_DIRECT\n", fs_takes_direct ? "takes" : "refuses");
  NvmeStoreOptions o;
  o.dir = mnt->path();
  ASSERT_TRUE(o.direct_io) << "O_DIRECT is what the store asks for by default";
  testing::internal::CaptureStderr();
  NvmeStore store({{"a", (1 << 20) + 4096}}, o);
  const std::string note = testing::internal::GetCapturedStderr();
  EXPECT_EQ(store.direct_io(), fs_takes_direct);
  if (!fs_takes_direct) {
    EXPECT_NE(note.find("does not support O_DIRECT"), std::string::npos) << note;
    EXPECT_NE(note.find(mnt->path().string()), std::string::npos) << note;
  } else {
    EXPECT_EQ(note, "");
  }
  HostPool pool("host");
  const size_t n = (1 << 20) + 4096;
  HostBuffer src = pool.allocate(n, "src"), dst = pool.allocate(n, "dst");
  fill_random(src.data(), n, 7);
  store.wait(store.write(0, 0, src.data(), n));
  store.wait(store.read(0, 0, dst.data(), n));
  EXPECT_EQ(checksum(dst.data(), n), checksum(src.data(), n));
}

TEST(NvmeFaultTest, ReadOnlyFilesystemIsAClearError) {
  test::TempDir scratch("nvme-ro");
  std::string why;
  auto mnt = test::ScratchMount::tmpfs(scratch.path() / "mnt", 4 << 20, &why);
  if (!mnt) GTEST_SKIP() << why;
  const auto saved = mnt->path() / "saved.bin";
  const uint64_t saved_sum = save_file(saved, 100 << 10, 3);
  const std::string ro = mnt->remount_read_only();
  if (!ro.empty()) GTEST_SKIP() << ro;

  NvmeStoreOptions o;
  o.dir = mnt->path();
  const std::string m = test::error_of([&] { NvmeStore store({{"a", 1 << 20}}, o); });
  EXPECT_NE(m.find("read-only filesystem"), std::string::npos) << m;
  EXPECT_NE(m.find(mnt->path().string()), std::string::npos) << m;
  EXPECT_NE(m.find("remount it read-write"), std::string::npos) << m;
  EXPECT_EQ(test::count_files(mnt->path()), 1u);
  EXPECT_EQ(test::file_checksum(saved), saved_sum);
}

TEST(NvmeFaultTest, IoErrorInTheMiddleOfAStepIsSurfacedAndLosesNothing) {
  test::TempDir scratch("nvme-eio");
  std::string why;
  auto mnt = test::ScratchMount::ext4_loop(scratch.path() / "disk.img", scratch.path() / "mnt", 32 << 20, &why);
  if (!mnt) GTEST_SKIP() << why;
  // What the run saved so far lives elsewhere (the checkpoint directory, another disk).
  const auto checkpoint = scratch.path() / "checkpoint.bin";
  const uint64_t checkpoint_sum = save_file(checkpoint, 256 << 10, 4);

  HostPool pool("host");
  NvmeStoreOptions o;
  o.dir = mnt->path();
  NvmeStore store({{"a.1.nvme", 2 << 20}, {"a.2.nvme", (3 << 20) + 100}, {"a.3.nvme", 1 << 20}}, o);
  ASSERT_TRUE(store.direct_io());
  HostBuffer a1 = pool.allocate(2 << 20, "a1"), a2 = pool.allocate((3 << 20) + 100, "a2");
  fill_random(a1.data(), a1.size(), 5);
  fill_random(a2.data(), a2.size(), 6);
  const uint64_t a2_sum = checksum(a2.data(), a2.size());
  // Forward went fine up to here.
  store.wait(store.write(0, 0, a1.data(), a1.size()));

  // The disk dies (as a failing NVMe drive takes its filesystem down).
  if (const std::string why_not = mnt->shut_down(); !why_not.empty()) GTEST_SKIP() << why_not;

  // The next offload fails with the kernel's EIO, naming the file and offset.
  std::string m = test::error_of([&] { store.wait(store.write(1, 0, a2.data(), a2.size())); });
  EXPECT_NE(m.find("NVMe write of"), std::string::npos) << m;
  EXPECT_NE(m.find("Input/output error (errno 5)"), std::string::npos) << m;
  EXPECT_NE(m.find(store.file_path()), std::string::npos) << m;
  EXPECT_NE(m.find("at offset 2097152 (slot 'a.2.nvme' + 0)"), std::string::npos) << m;
  EXPECT_NE(m.find("the data is still in memory"), std::string::npos) << m;
  // Reloading what was written before fails the same way in backward.
  HostBuffer back = pool.allocate(2 << 20, "back");
  m = test::error_of([&] { store.wait(store.read(0, 0, back.data(), back.size())); });
  EXPECT_NE(m.find("NVMe read of"), std::string::npos) << m;
  EXPECT_NE(m.find("Input/output error"), std::string::npos) << m;
  // Several requests in flight at once all fail; wait_all reports the first, none hang.
  for (int i = 0; i < 4; ++i) store.write(2, 0, a1.data(), 1 << 20);
  m = test::error_of([&] { store.wait_all(); });
  EXPECT_NE(m.find("Input/output error"), std::string::npos) << m;
  EXPECT_EQ(store.outstanding(), 0u);

  // Nothing lost: the source of the failed write is untouched, the checkpoint is intact.
  EXPECT_EQ(checksum(a2.data(), a2.size()), a2_sum);
  EXPECT_EQ(test::file_checksum(checkpoint), checkpoint_sum);
}

}  // namespace
}  // namespace lt
