// The ranks' device collectives (dist/device_collectives.h, NCCL opened at run time): where
// they cannot run (no CUDA in the build, no GPU, no NCCL library) making one says what is
// missing; on a GPU, a world of one process runs every collective as the identity, on
// device memory and a stream, and names the library's version, and the sums beside a
// stream keep the order of the streams around them. More than one rank needs a
// GPU each (NCCL refuses two ranks on one device); no machine this project is lent has two.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "dist/device_collectives.h"
#include "test_util.h"

#ifdef LT_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace lt {
namespace {

TEST(DeviceCollectives, WithoutAGpuOrNcclSaysWhatIsMissing) {
  const std::string why = DeviceCollectives::unavailable_reason();
  if (why.empty()) GTEST_SKIP() << "a GPU and NCCL are here: the collectives can be made";
  Communicator world;
  const std::string e = test::error_of([&] { DeviceCollectives dc(world, 0); });
  EXPECT_NE(e.find(why), std::string::npos) << e;
  EXPECT_NE(e.find("device collectives (NCCL)"), std::string::npos) << e;
}

TEST(DeviceCollectives, AWorldOfOneRunsEachCollectiveAsTheIdentity) {
  if (const std::string why = DeviceCollectives::unavailable_reason(); !why.empty())
    GTEST_SKIP() << "compiled, not run: " << why;
#ifdef LT_HAVE_CUDA
  Communicator world;
  ASSERT_EQ(world.size(), 1) << "run it as one process";
  DeviceCollectives dc(world, 0);
  EXPECT_EQ(dc.size(), 1);
  EXPECT_NE(dc.describe().find("NCCL 2."), std::string::npos) << dc.describe();
  const int64_t n = 1 << 20;
  std::vector<float> host(n), back(n);
  for (int64_t i = 0; i < n; ++i) host[i] = 0.001f * static_cast<float>(i % 1000) - 0.5f;
  float *a = nullptr, *b = nullptr;
  ASSERT_EQ(cudaMalloc(&a, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&b, n * sizeof(float)), cudaSuccess);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  const auto expect_host_in = [&](const float* device, const char* what) {
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess) << what;
    ASSERT_EQ(cudaMemcpy(back.data(), device, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess) << what;
    EXPECT_EQ(back, host) << what;
  };
  ASSERT_EQ(cudaMemcpy(a, host.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  dc.sum(a, n, s);
  expect_host_in(a, "sum");
  dc.broadcast(0, a, n, s);
  expect_host_in(a, "broadcast");
  dc.reduce_scatter_sum(a, b, n, s);
  expect_host_in(b, "reduce-scatter");
  ASSERT_EQ(cudaMemsetAsync(a, 0, n * sizeof(float), s), cudaSuccess);
  dc.all_gather(b, a, n, s);
  expect_host_in(a, "all-gather");
  cudaStreamDestroy(s);
  cudaFree(a);
  cudaFree(b);
#endif
}

// The trainer's sums beside the compute stream (sum_beside, order_after): each sum starts
// after what the "compute" stream had issued (here a copy of the values into the slot
// behind a zero fill), and a copy out on the "drain" stream ordered after it reads the
// values, not the zeros; three slots, ordered after out of order, their tickets distinct,
// one of them summed to one rank (a sharded optimizer's owner) instead of to all.
// With one rank a sum is the identity, so what this can show is the order of the streams.
TEST(DeviceCollectives, ASumBesideTheComputeStreamStartsAfterItsWorkAndOrdersTheDrainAfterIt) {
  if (const std::string why = DeviceCollectives::unavailable_reason(); !why.empty())
    GTEST_SKIP() << "compiled, not run: " << why;
#ifdef LT_HAVE_CUDA
  Communicator world;
  ASSERT_EQ(world.size(), 1) << "run it as one process";
  DeviceCollectives dc(world, 0);
  constexpr int kSlots = 3;
  const int64_t n = 1 << 22;  // 16 MiB a slot: copies long enough to race, were they unordered
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  float *values = nullptr, *back = nullptr;
  ASSERT_EQ(cudaMallocHost(&values, bytes * kSlots), cudaSuccess);
  ASSERT_EQ(cudaMallocHost(&back, bytes * kSlots), cudaSuccess);
  for (int64_t i = 0; i < n * kSlots; ++i) values[i] = 1.0f + 0.001f * static_cast<float>(i % 997);
  float* slots = nullptr;
  ASSERT_EQ(cudaMalloc(&slots, bytes * kSlots), cudaSuccess);
  cudaStream_t compute = nullptr, drain = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&drain, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaMemset(slots, 0, bytes * kSlots), cudaSuccess);
  int64_t tickets[kSlots];
  for (int k = 0; k < kSlots; ++k) {
    float* slot = slots + k * n;
    ASSERT_EQ(cudaMemsetAsync(slot, 0, bytes, compute), cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(slot, values + k * n, bytes, cudaMemcpyHostToDevice, compute), cudaSuccess);
    tickets[k] = dc.sum_beside(slot, n, compute, k == 1 ? 0 : -1);  // slot 1's to rank 0 alone
  }
  EXPECT_NE(tickets[0], tickets[1]);
  EXPECT_NE(tickets[1], tickets[2]);
  for (int k : {2, 0, 1}) {
    dc.order_after(tickets[k], drain);
    ASSERT_EQ(cudaMemcpyAsync(back + k * n, slots + k * n, bytes, cudaMemcpyDeviceToHost, drain), cudaSuccess);
  }
  ASSERT_EQ(cudaStreamSynchronize(drain), cudaSuccess);
  EXPECT_EQ(std::memcmp(back, values, bytes * kSlots), 0) << "a drain read its slot before the slot's sum";
  const std::string e = test::error_of([&] { dc.order_after(tickets[0], drain); });
  EXPECT_NE(e.find("no sum with ticket"), std::string::npos) << e;
  ASSERT_EQ(cudaStreamSynchronize(compute), cudaSuccess);
  cudaStreamDestroy(compute);
  cudaStreamDestroy(drain);
  cudaFree(slots);
  cudaFreeHost(values);
  cudaFreeHost(back);
#endif
}

}  // namespace
}  // namespace lt
