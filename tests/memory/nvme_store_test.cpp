// NvmeStore without special privileges, on the build tree's filesystem: round trips of
// many sizes (unaligned tails included), offsets inside slots, concurrent requests, data
// integrity by checksum, preallocation and removal of the file, the space check, and a
// short read when the file is truncated behind the store's back.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <thread>
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

NvmeStoreOptions options_in(const test::TempDir& dir, unsigned qd = 8, size_t chunk = size_t{1} << 20) {
  NvmeStoreOptions o;
  o.dir = dir.path();
  o.queue_depth = qd;
  o.chunk_bytes = chunk;
  return o;
}

// Writes every slot whole from its own buffer, reads each back into a fresh buffer, and
// compares checksums of the logical bytes.
void round_trip_all(NvmeStore& store, HostPool& pool, uint64_t seed) {
  std::vector<HostBuffer> src, dst;
  std::vector<NvmeStore::Ticket> tickets;
  for (size_t s = 0; s < store.slot_count(); ++s) {
    const size_t n = store.slot(s).bytes;
    src.push_back(pool.allocate(n, "src"));
    if (n) fill_random(src.back().data(), n, seed + s);
    tickets.push_back(store.write(s, 0, src.back().data(), n));
  }
  for (auto t : tickets) store.wait(t);
  tickets.clear();
  for (size_t s = 0; s < store.slot_count(); ++s) {
    dst.push_back(pool.allocate(store.slot(s).bytes, "dst"));
    tickets.push_back(store.read(s, 0, dst.back().data(), store.slot(s).bytes));
  }
  store.wait_all();
  for (size_t s = 0; s < store.slot_count(); ++s) {
    const size_t n = store.slot(s).bytes;
    EXPECT_EQ(checksum(dst[s].data(), n), checksum(src[s].data(), n)) << "slot " << store.slot(s).name;
  }
  EXPECT_EQ(store.outstanding(), 0u);
}

std::vector<NvmeSlot> odd_sizes() {
  std::vector<NvmeSlot> slots;
  for (size_t n : {size_t{1}, size_t{511}, size_t{4095}, size_t{4096}, size_t{4097}, (size_t{1} << 20) - 1,
                   size_t{1} << 20, (size_t{1} << 20) + 1, (size_t{7} << 19) + 123, size_t{8} << 20, size_t{0}})
    slots.push_back({std::string("s").append(std::to_string(n)), n});
  return slots;
}

TEST(NvmeStoreTest, RoundTripsManySizesWithDirectIo) {
  test::TempDir dir("nvme");
  HostPool pool("host");
  NvmeStore store(odd_sizes(), options_in(dir));
  EXPECT_TRUE(store.direct_io()) << "the build tree's filesystem should take O_DIRECT";
  round_trip_all(store, pool, 1);
  round_trip_all(store, pool, 2);  // overwrite in place
}

TEST(NvmeStoreTest, RoundTripsWithBufferedIoTinyChunksAndQueueDepthOne) {
  test::TempDir dir("nvme");
  HostPool pool("host");
  NvmeStoreOptions o = options_in(dir, 1, 4096);
  o.direct_io = false;
  NvmeStore store(odd_sizes(), o);
  EXPECT_FALSE(store.direct_io());
  round_trip_all(store, pool, 3);
}

TEST(NvmeStoreTest, PartsOfASlotAtAlignedOffsets) {
  // A boundary's token ranges go to one slot piece by piece; read back out of order.
  test::TempDir dir("nvme");
  HostPool pool("host");
  const size_t total = (size_t{5} << 20) + 3000;
  NvmeStore store({{"a.3.nvme", total}}, options_in(dir, 4, 256 << 10));
  HostBuffer all = pool.allocate(total, "all");
  fill_random(all.data(), total, 9);
  const size_t piece = (size_t{3} << 18);  // 768 KiB, a multiple of 4096
  for (size_t off = 0; off < total; off += piece) store.write(0, off, all.data() + off, std::min(piece, total - off));
  store.wait_all();
  HostBuffer back = pool.allocate(total, "back");
  std::vector<size_t> offs;
  for (size_t off = 0; off < total; off += piece) offs.insert(offs.begin(), off);
  for (size_t off : offs) store.wait(store.read(0, off, back.data() + off, std::min(piece, total - off)));
  EXPECT_EQ(checksum(back.data(), total), checksum(all.data(), total));
}

TEST(NvmeStoreTest, ManyConcurrentRequestsFromTwoThreads) {
  test::TempDir dir("nvme");
  HostPool pool("host");
  std::vector<NvmeSlot> slots;
  for (int i = 0; i < 48; ++i) slots.push_back({"g." + std::to_string(i), size_t{4096} * (1 + (i * 37) % 700) + i});
  NvmeStore store(slots, options_in(dir, 8, 64 << 10));
  std::vector<HostBuffer> src(slots.size()), dst(slots.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    src[i] = pool.allocate(slots[i].bytes, "src");
    dst[i] = pool.allocate(slots[i].bytes, "dst");
    fill_random(src[i].data(), slots[i].bytes, 100 + i);
  }
  // Two producers (like the d2h copy thread and the executor) issue writes at once, and
  // poll rather than block; all requests are outstanding together.
  auto producer = [&](size_t first) {
    std::vector<NvmeStore::Ticket> mine;
    for (size_t i = first; i < slots.size(); i += 2) mine.push_back(store.write(i, 0, src[i].data(), slots[i].bytes));
    while (!mine.empty()) {
      std::erase_if(mine, [&](NvmeStore::Ticket t) { return store.poll(t); });
      std::this_thread::yield();
    }
  };
  std::thread t0(producer, 0), t1(producer, 1);
  t0.join();
  t1.join();
  std::vector<NvmeStore::Ticket> reads;
  for (size_t i = 0; i < slots.size(); ++i) reads.push_back(store.read(i, 0, dst[i].data(), slots[i].bytes));
  EXPECT_GT(store.outstanding(), 1u);
  for (auto t : reads) store.wait(t);
  for (size_t i = 0; i < slots.size(); ++i)
    EXPECT_EQ(checksum(dst[i].data(), slots[i].bytes), checksum(src[i].data(), slots[i].bytes)) << i;
}

TEST(NvmeStoreTest, FileIsPreallocatedUniqueAndRemovedAtDestruction) {
  test::TempDir dir("nvme");
  std::string path1, path2;
  {
    NvmeStore a({{"x", 3 << 20}, {"y", 5}}, options_in(dir));
    NvmeStore b({{"x", 4096}}, options_in(dir));
    path1 = a.file_path();
    path2 = b.file_path();
    EXPECT_NE(path1, path2);
    EXPECT_NE(path1.find("lazytrain-offload-" + std::to_string(getpid()) + "-"), std::string::npos) << path1;
    EXPECT_EQ(a.file_bytes(), (size_t{3} << 20) + 4096);
    struct stat st{};
    ASSERT_EQ(::stat(path1.c_str(), &st), 0);
    EXPECT_EQ(static_cast<size_t>(st.st_size), a.file_bytes());
    EXPECT_GE(static_cast<size_t>(st.st_blocks) * 512, a.file_bytes()) << "not preallocated";
  }
  EXPECT_FALSE(std::filesystem::exists(path1));
  EXPECT_FALSE(std::filesystem::exists(path2));
  EXPECT_EQ(test::count_files(dir.path()), 0u);
}

TEST(NvmeStoreTest, FileIsRemovedWhenAnExceptionUnwinds) {
  test::TempDir dir("nvme");
  HostPool pool("host");
  std::string path;
  try {
    NvmeStore store({{"x", 1 << 20}}, options_in(dir));
    path = store.file_path();
    HostBuffer b = pool.allocate(1 << 20, "b");
    store.write(0, 0, b.data(), 1 << 20);  // left in flight on purpose
    throw std::runtime_error("a later setup step failed");
  } catch (const std::runtime_error&) {
  }
  EXPECT_FALSE(path.empty());
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_EQ(test::count_files(dir.path()), 0u);
}

TEST(NvmeStoreTest, NotEnoughSpaceIsAClearErrorBeforeAnyWrite) {
  test::TempDir dir("nvme");
  try {
    NvmeStore store({{"huge", size_t{1} << 60}}, options_in(dir));  // 1 EiB
    FAIL() << "expected lt::Error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("not enough free space"), std::string::npos) << m;
    EXPECT_NE(m.find("need 1152921504606846976 bytes"), std::string::npos) << m;
    EXPECT_NE(m.find("available"), std::string::npos) << m;
    EXPECT_NE(m.find(dir.str()), std::string::npos) << m;
    EXPECT_NE(m.find("--offload-dir"), std::string::npos) << m;
  }
  EXPECT_EQ(test::count_files(dir.path()), 0u) << "nothing may be created when the space check fails";
}

TEST(NvmeStoreTest, MissingDirectoryIsAClearError) {
  test::TempDir dir("nvme");
  NvmeStoreOptions o = options_in(dir);
  o.dir /= "does-not-exist";
  try {
    NvmeStore store({{"x", 4096}}, o);
    FAIL() << "expected lt::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does-not-exist"), std::string::npos) << e.what();
  }
}

TEST(NvmeStoreTest, TruncatedBehindItsBackGivesShortReadErrorWithFileAndOffset) {
  test::TempDir dir("nvme");
  HostPool pool("host");
  NvmeStore store({{"a", 1 << 20}, {"b", 2 << 20}}, options_in(dir));
  HostBuffer a = pool.allocate(1 << 20, "a"), b = pool.allocate(2 << 20, "b");
  fill_random(a.data(), 1 << 20, 5);
  fill_random(b.data(), 2 << 20, 6);
  store.write(0, 0, a.data(), 1 << 20);
  store.write(1, 0, b.data(), 2 << 20);
  store.wait_all();
  const uint64_t b_sum = checksum(b.data(), 2 << 20);
  // Something else cuts the file in the middle of slot b (which starts at 1 MiB).
  ASSERT_EQ(::truncate(store.file_path().c_str(), (1 << 20) + (1 << 19)), 0);
  HostBuffer back = pool.allocate(2 << 20, "back");
  try {
    store.wait(store.read(1, 0, back.data(), 2 << 20));
    FAIL() << "expected lt::Error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("short NVMe read"), std::string::npos) << m;
    EXPECT_NE(m.find(store.file_path()), std::string::npos) << m;
    // Slot b starts at 1 MiB; its first 1 MiB chunk is cut in half: the lowest failure.
    EXPECT_NE(m.find("524288 of 1048576 bytes"), std::string::npos) << m;
    EXPECT_NE(m.find("at offset 1048576 (slot 'b' + 0)"), std::string::npos) << m;
  }
  // Slot a, before the cut, is intact; the caller's copy of b was never touched.
  HostBuffer a_back = pool.allocate(1 << 20, "a_back");
  store.wait(store.read(0, 0, a_back.data(), 1 << 20));
  EXPECT_EQ(checksum(a_back.data(), 1 << 20), checksum(a.data(), 1 << 20));
  EXPECT_EQ(checksum(b.data(), 2 << 20), b_sum);
}

TEST(NvmeStoreTest, AnErrorNobodyWaitedForIsPrintedNotDropped) {
  test::TempDir dir("nvme");
  HostPool pool("host");
  HostBuffer buf = pool.allocate(1 << 20, "buf");
  testing::internal::CaptureStderr();
  {
    // Queue depth 1: the second request starts only after the first has completed, so
    // once the second is waited for, the first is finished, failed, and never looked at.
    NvmeStore store({{"a", 1 << 20}, {"b", 4096}}, options_in(dir, 1));
    ASSERT_EQ(::truncate(store.file_path().c_str(), 0), 0);
    store.read(0, 0, buf.data(), 1 << 20);
    store.wait(store.write(1, 0, buf.data(), 4096));
    EXPECT_EQ(store.outstanding(), 1u);
  }
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("an I/O error nobody waited for"), std::string::npos) << err;
  EXPECT_NE(err.find("short NVMe read"), std::string::npos) << err;
}

// "fast" (fork at the statement): the store is made inside the statement, so the parent
// has no I/O thread when it forks, and the parent's TempDir removes what the child leaves.
class NvmeStoreDeathTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "fast"); }
};

TEST_F(NvmeStoreDeathTest, MisuseIsAnInvariantFailure) {
  test::TempDir dir("nvme");
  HostPool pool("host");
  HostBuffer b = pool.allocate(1 << 16, "b");
  EXPECT_DEATH(({
                 NvmeStore s({{"a", 1 << 16}}, options_in(dir));
                 s.write(0, 100, b.data(), 4096);
               }),
               "not a multiple of 4096");
  EXPECT_DEATH(({
                 NvmeStore s({{"a", 1 << 16}}, options_in(dir));
                 s.write(0, 0, b.data() + 64, 4096);
               }),
               "not 4096-aligned");
  EXPECT_DEATH(({
                 NvmeStore s({{"a", 1 << 16}}, options_in(dir));
                 s.read(0, 61440, b.data(), 8192);
               }),
               "outside slot 'a'");
}

}  // namespace
}  // namespace lt
