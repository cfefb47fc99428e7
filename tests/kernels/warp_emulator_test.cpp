// The warp emulator's asynchronous copies (tests/kernels/warp_emulator.h): a copy lands when
// its thread waits for its group and no sooner, so a kernel that reads a staged tile before
// waiting reads stale bytes under the emulator (as it may on a GPU) and fails its checks;
// copies never waited for, and misaligned ones, abort with what went wrong.
#include "kernels/warp_emulator.h"  // first: it stands in for CUDA

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace lt {
namespace {

constexpr int kThreads = 64;

struct alignas(16) Words {
  uint32_t w[8];
};

// Each thread copies two 16-byte pieces of src into shared memory as two groups, and
// records its first word of each before and between its waits.
void two_groups_kernel(const Words* src, uint32_t* seen) {
  LT_DYNAMIC_SMEM(smem);
  const int t = static_cast<int>(threadIdx.x);
  uint32_t* first = reinterpret_cast<uint32_t*>(smem) + 8 * t;
  uint32_t* second = first + 4;
  first[0] = second[0] = 0;
  cp_async_16(first, src[t].w);
  cp_async_commit();
  cp_async_16(second, src[t].w + 4);
  cp_async_commit();
  seen[4 * t + 0] = first[0];
  cp_async_wait<1>();  // the older group has landed, the newer may still be in flight
  seen[4 * t + 1] = first[0];
  seen[4 * t + 2] = second[0];
  cp_async_wait<0>();
  seen[4 * t + 3] = second[0];
}

TEST(WarpEmulator, AsynchronousCopiesLandWhenTheirGroupIsWaitedFor) {
  std::vector<Words> src(kThreads);
  for (int t = 0; t < kThreads; ++t)
    for (int i = 0; i < 8; ++i) src[t].w[i] = static_cast<uint32_t>(1000 * t + i + 1);
  std::vector<uint32_t> seen(4 * kThreads, 12345u);
  emu::launch(1, 1, 1, kThreads, 32 * kThreads, &two_groups_kernel, static_cast<const Words*>(src.data()),
              seen.data());
  for (int t = 0; t < kThreads; ++t) {
    SCOPED_TRACE("thread " + std::to_string(t));
    EXPECT_EQ(seen[4 * t + 0], 0u) << "a copy landed before its group was waited for";
    EXPECT_EQ(seen[4 * t + 1], src[t].w[0]) << "wait<1> left the older group in flight";
    EXPECT_EQ(seen[4 * t + 2], 0u) << "wait<1> landed the newest group too";
    EXPECT_EQ(seen[4 * t + 3], src[t].w[4]) << "wait<0> left a group in flight";
  }
}

void forgets_to_wait_kernel(const Words* src) {
  LT_DYNAMIC_SMEM(smem);
  cp_async_16(smem + 16 * threadIdx.x, src[threadIdx.x].w);
  cp_async_commit();
}

void misaligned_kernel(const Words* src) {
  LT_DYNAMIC_SMEM(smem);
  cp_async_16(smem + 16 * threadIdx.x + 8, src[threadIdx.x].w);
  cp_async_wait<0>();
}

TEST(WarpEmulatorDeathTest, CopiesNeverWaitedForAndMisalignedOnesAbort) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::vector<Words> src(32);
  const Words* p = src.data();
  EXPECT_DEATH(emu::launch(1, 1, 1, 32, 16 * 33, &forgets_to_wait_kernel, p),
               "finished with asynchronous copies it never waited for");
  EXPECT_DEATH(emu::launch(1, 1, 1, 32, 16 * 33, &misaligned_kernel, p),
               "destination of a 16-byte cp.async .* is not 16-byte aligned");
}

}  // namespace
}  // namespace lt
