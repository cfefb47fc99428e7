// HostPool: 4096 alignment, zeroed contents, accounting and peak, the capacity error, and
// the pinning hook's calls (the seam the cuda backend will use).
#include <gtest/gtest.h>

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

struct RecordingPinner : HostPinner {
  std::vector<std::pair<void*, size_t>> pinned, unpinned;
  bool refuse = false;
  void pin(void* p, size_t n) override {
    if (refuse) throw Error("cudaHostRegister refused", "test", "");
    pinned.emplace_back(p, n);
  }
  void unpin(void* p, size_t n) noexcept override { unpinned.emplace_back(p, n); }
};

TEST(HostPoolTest, PinnerSeesEveryBufferOnceEachWay) {
  RecordingPinner pinner;
  HostPool pool("pinned", 0, &pinner);
  void* p;
  {
    HostBuffer b = pool.allocate(10000, "w");
    p = b.data();
    ASSERT_EQ(pinner.pinned.size(), 1u);
    EXPECT_EQ(pinner.pinned[0], std::make_pair(p, size_t{12288}));
    EXPECT_TRUE(pinner.unpinned.empty());
  }
  ASSERT_EQ(pinner.unpinned.size(), 1u);
  EXPECT_EQ(pinner.unpinned[0], std::make_pair(p, size_t{12288}));
  pinner.refuse = true;
  EXPECT_THROW(pool.allocate(100, "x"), Error);
  EXPECT_EQ(pool.bytes_in_use(), 0u);
}

}  // namespace
}  // namespace lt
