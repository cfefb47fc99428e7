// The warp emulator (tests/kernels/warp_emulator.h): its asynchronous copies land when their
// thread waits for their group and no sooner, so a kernel that reads a staged tile before
// waiting reads stale bytes under the emulator (as it may on a GPU) and fails its checks;
// copies never waited for, and misaligned ones, abort with what went wrong. Its ldmatrix
// gives the mma fragments that the PTX ISA documents.
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

// A 16 x 16 bf16 matrix (element (r, c) holds r * 16 + c, rows 24 elements apart: 48 bytes,
// so every row is 16-byte aligned) read by one warp as four 8 x 8 matrices (lane l gives
// row l % 16 at column 8 (l / 16)), plain and transposed.
void ldmatrix_kernel(uint32_t* plain, uint32_t* transposed) {
  LT_DYNAMIC_SMEM(smem);
  uint16_t* m = reinterpret_cast<uint16_t*>(smem);
  const int lane = static_cast<int>(threadIdx.x);
  for (int i = lane; i < 16 * 24; i += 32) m[i] = static_cast<uint16_t>(i / 24 * 16 + i % 24);
  __syncthreads();
  uint32_t a[4], b[4];
  cuda::ldmatrix_x4(a, m + (lane & 15) * 24 + (lane >> 4) * 8);
  cuda::ldmatrix_x4_trans(b, m + (lane & 15) * 24 + (lane >> 4) * 8);
  for (int r = 0; r < 4; ++r) plain[4 * lane + r] = a[r], transposed[4 * lane + r] = b[r];
}

// Plain: mma.m16n8k16's A fragment (PTX ISA, kernels/cuda/mma_bf16.cuh): lane 4g + t holds
// (g, 2t), (g, 2t + 1) in a[0], row g + 8 in a[1], columns + 8 in a[2] and a[3]. Transposed:
// B fragments of the matrix read as [k][n]: b[0] holds (k = 2t, n = g), (2t + 1, g), b[1]
// k + 8, b[2] n + 8, b[3] both.
TEST(WarpEmulator, LdmatrixGivesTheMmaFragments) {
  std::vector<uint32_t> plain(128), transposed(128);
  emu::launch(1, 1, 1, 32, 16 * 24 * 2, &ldmatrix_kernel, plain.data(), transposed.data());
  const auto pair = [](int r0, int c0, int r1, int c1) {
    return static_cast<uint32_t>(r0 * 16 + c0) | static_cast<uint32_t>(r1 * 16 + c1) << 16;
  };
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int r = 0; r < 4; ++r) {
      const int row = g + 8 * (r & 1), col = 2 * t + 8 * (r >> 1);
      EXPECT_EQ(plain[4 * lane + r], pair(row, col, row, col + 1)) << "lane " << lane << " a[" << r << "]";
      const int k = 2 * t + 8 * (r & 1), n = g + 8 * (r >> 1);
      EXPECT_EQ(transposed[4 * lane + r], pair(k, n, k + 1, n)) << "lane " << lane << " b[" << r << "]";
    }
  }
}

}  // namespace
}  // namespace lt
