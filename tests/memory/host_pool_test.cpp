// HostPool: 4096 alignment, zeroed contents, accounting and peak, the capacity error, and
// the memory it takes its buffers from (the seam the cuda backend's pinned memory uses).
#include <gtest/gtest.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "core/error.h"
#include "memory/host_pool.h"

namespace lt {
namespace {

TEST(HostPoolTest, BuffersAreAlignedZeroedAndPadded) {
  HostPool pool("host");
  for (size_t bytes : {size_t{1}, size_t{4095}, size_t{4096}, size_t{4097}, size_t{1} << 20, (size_t{3} << 20) + 5}) {
    HostBuffer b = pool.allocate(bytes, "t");
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 4096, 0u) << bytes;
    EXPECT_EQ(b.size(), bytes);
    EXPECT_EQ(b.capacity(), (bytes + 4095) / 4096 * 4096);
    for (size_t i = 0; i < b.capacity(); i += 511) ASSERT_EQ(b.data()[i], std::byte{0});
  }
  EXPECT_FALSE(pool.allocate(0, "empty"));
}

TEST(HostPoolTest, CountsBytesInUseAndPeak) {
  HostPool pool("host");
  {
    HostBuffer a = pool.allocate(5000, "a");  // 8192 held
    HostBuffer b = pool.allocate(4096, "b");
    EXPECT_EQ(pool.bytes_in_use(), 12288u);
    EXPECT_EQ(pool.buffers_in_use(), 2u);
    a.reset();
    EXPECT_EQ(pool.bytes_in_use(), 4096u);
    HostBuffer moved = std::move(b);
    EXPECT_EQ(pool.bytes_in_use(), 4096u);
    HostBuffer c = pool.allocate(100, "c");
    c = std::move(moved);  // c's old buffer goes back
    EXPECT_EQ(pool.bytes_in_use(), 4096u);
  }
  EXPECT_EQ(pool.bytes_in_use(), 0u);
  EXPECT_EQ(pool.buffers_in_use(), 0u);
  EXPECT_EQ(pool.peak_bytes(), 12288u);
}

TEST(HostPoolTest, CapacityShortfallIsAClearError) {
  HostPool pool("host-act", 16384);
  HostBuffer a = pool.allocate(12288, "a.3.cpu");
  try {
    pool.allocate(8192, "a.4.cpu");
    FAIL() << "expected lt::Error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'a.4.cpu'"), std::string::npos) << m;
    EXPECT_NE(m.find("host pool 'host-act'"), std::string::npos) << m;
    EXPECT_NE(m.find("short by 4096 bytes"), std::string::npos) << m;
  }
  EXPECT_EQ(pool.bytes_in_use(), 12288u);  // the failed request left no trace
  HostBuffer b = pool.allocate(4096, "fits");
}

TEST(HostPoolTest, ConcurrentAllocateAndFreeKeepTheBooks) {
  HostPool pool("host");
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&pool] {
      for (int i = 0; i < 200; ++i) HostBuffer b = pool.allocate(4096 * (1 + i % 3), "x");
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(pool.bytes_in_use(), 0u);
  EXPECT_LE(pool.peak_bytes(), 4u * 3 * 4096);
  EXPECT_GE(pool.peak_bytes(), 4096u);
}

// Host memory that records its blocks, as a GPU's pinned memory (cudaHostAlloc) would
// be given to a pool, and can refuse, as a driver that will not pin more.
struct RecordingMemory final : BufferType {
  std::vector<std::pair<void*, size_t>> allocated, deallocated;
  bool refuse = false;
  const char* name() const override { return "recording"; }
  size_t alignment() const override { return 8192; }
  bool is_host() const override { return true; }
  std::byte* allocate(size_t n) override {
    if (refuse) throw Error("cudaHostAlloc refused", "test", "");
    std::byte* p = host_memory().allocate(n);
    allocated.emplace_back(p, n);
    return p;
  }
  void deallocate(std::byte* p, size_t n) noexcept override {
    deallocated.emplace_back(p, n);
    host_memory().deallocate(p, n);
  }
};

TEST(HostPoolTest, TakesEveryBufferFromItsMemoryAndGivesItBack) {
  RecordingMemory memory;
  HostPool pool("pinned", 0, memory);
  void* p;
  {
    HostBuffer b = pool.allocate(10000, "w");
    p = b.data();
    ASSERT_EQ(memory.allocated.size(), 1u);
    EXPECT_EQ(memory.allocated[0], std::make_pair(p, size_t{16384}));  // rounded to the memory's alignment
    EXPECT_TRUE(memory.deallocated.empty());
    EXPECT_EQ(std::count(b.data(), b.data() + b.capacity(), std::byte{0}), 16384);  // zeroed, tail too
  }
  ASSERT_EQ(memory.deallocated.size(), 1u);
  EXPECT_EQ(memory.deallocated[0], std::make_pair(p, size_t{16384}));
  memory.refuse = true;
  EXPECT_THROW(pool.allocate(100, "x"), Error);
  EXPECT_EQ(pool.bytes_in_use(), 0u);
  EXPECT_EQ(pool.buffers_in_use(), 0u);
}

}  // namespace
}  // namespace lt
