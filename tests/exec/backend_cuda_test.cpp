// The cuda backend's memory, streams, copies and events (exec/backend_cuda.h), on the GPU:
// bytes that cross host -> device -> device -> host through the three streams, ordered only
// by the backend's events, come back as they went; the tiers' memory is what it claims;
// the copies' timing adds up. Where the build has no CUDA or the machine no GPU, the cases
// that need one skip saying why; what the user is told then is checked everywhere.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "exec/backend.h"
#include "exec/backend_cuda.h"
#include "exec/backend_rates.h"
#include "memory/buffer_type.h"
#include "test_util.h"
#include "train/train_config.h"

#ifdef LT_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace lt {
namespace {

// What `train --backend cuda` says where it cannot run: the reason (no CUDA in the build,
// no device, or, without LT_CUDA_TRIAL=1, that no step has run on a GPU yet), and what to
// use instead.
TEST(CudaBackend, TrainSaysWhyItCannotRunOnCuda) {
  // Without the switch, whatever the shell exported (the refusal is what is checked).
  struct WithoutTrial {
    std::string was;
    bool set = false;
    WithoutTrial() {
      if (const char* v = std::getenv(kCudaTrialEnv)) was = v, set = true;
      unsetenv(kCudaTrialEnv);
    }
    ~WithoutTrial() {
      if (set) setenv(kCudaTrialEnv, was.c_str(), 1);
    }
  } without_trial;
  const std::string why = cuda_backend_unavailable_reason();
  ASSERT_FALSE(why.empty()) << "no training step has run on a GPU: the cuda backend must not claim to run";
#ifdef LT_HAVE_CUDA
  if (why.find("no CUDA device") == std::string::npos) {  // a GPU is here: the refusal names the switch
    EXPECT_NE(why.find(kCudaTrialEnv), std::string::npos) << why;
  }
#endif
#ifndef LT_HAVE_CUDA
  EXPECT_NE(why.find("built without CUDA"), std::string::npos) << why;
#endif
  const std::string from_make = test::error_of([] { make_backend("cuda"); });
  EXPECT_NE(from_make.find(why), std::string::npos) << from_make;
  EXPECT_NE(from_make.find("use --backend cpu or emu"), std::string::npos) << from_make;
  TrainConfig c;
  c.backend = "cuda";
  const std::string from_config = test::error_of([&] { validate(c); });
  EXPECT_NE(from_config.find(why), std::string::npos) << from_config;
}

#ifdef LT_HAVE_CUDA
#define LT_REQUIRE_GPU()                                                                           \
  do {                                                                                             \
    int n_ = 0;                                                                                    \
    if (cudaGetDeviceCount(&n_) != cudaSuccess || n_ == 0) {                                       \
      (void)cudaGetLastError();                                                                    \
      GTEST_SKIP() << "compiled, not run: " << cuda_backend_unavailable_reason();                  \
    }                                                                                              \
  } while (0)
#else
#define LT_REQUIRE_GPU() GTEST_SKIP() << "not built: " << cuda_backend_unavailable_reason()
#endif

TEST(CudaBackend, TiersAreDeviceAndPinnedMemory) {
  LT_REQUIRE_GPU();
#ifdef LT_HAVE_CUDA
  auto b = make_cuda_backend();
  EXPECT_STREQ(b->name(), "cuda");
  EXPECT_FALSE(b->host_is_compute());
  BufferType& dev = b->compute_memory();
  BufferType& host = b->host_tier_memory();
  EXPECT_FALSE(dev.is_host());
  EXPECT_TRUE(host.is_host());
  Buffer d(dev, 1000), h(host, 5000);
  ASSERT_TRUE(d && h);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(d.data()) % dev.alignment(), 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(h.data()) % 4096, 0u);  // O_DIRECT reads land in it
  cudaPointerAttributes a{};
  ASSERT_EQ(cudaPointerGetAttributes(&a, d.data()), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeDevice);
  ASSERT_EQ(cudaPointerGetAttributes(&a, h.data()), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeHost);  // page-locked, not pageable
  // More device memory than there is: "not there" (null), not an exception.
  size_t free_b = 0, total_b = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_b, &total_b), cudaSuccess);
  EXPECT_EQ(dev.allocate(dev.round_up(total_b * 2)), nullptr);
  EXPECT_STREQ(b->kernels().name, "cuda");  // the CUDA table, not the CPU's default
  EXPECT_NE(b->kernels().matmul, nullptr);   // the table has every entry the dense and hybrid layers call
  // What `profile --backend cuda` writes as the device's memory: the driver's figures.
  const Backend::Capacity cap = b->compute_capacity();
  EXPECT_EQ(cap.total, total_b);
  EXPECT_LE(cap.free, cap.total);
  EXPECT_GT(cap.free, 0u);
#endif
}

// Memory the host tier did not hand out (the parameters, the gradients) is page-locked for
// as long as the pin lives, copies through the backend from and to it arrive whole, and
// pinning a range twice is an error that leaves the first pin as it was.
TEST(CudaBackend, PinsHostMemoryUntilTheHandleGoes) {
  LT_REQUIRE_GPU();
#ifdef LT_HAVE_CUDA
  auto b = make_cuda_backend();
  const size_t bytes = (size_t{8} << 20) + 123;
  std::vector<std::byte> host(bytes), back(bytes);
  for (size_t i = 0; i < bytes; ++i) host[i] = std::byte(static_cast<uint8_t>(i * 37 + 1));
  const auto type = [](const void* p) {
    cudaPointerAttributes a{};
    EXPECT_EQ(cudaPointerGetAttributes(&a, p), cudaSuccess);
    return a.type;
  };
  EXPECT_EQ(type(host.data()), cudaMemoryTypeUnregistered);
  {
    std::unique_ptr<Backend::HostPin> pin = b->pin_host(host.data(), bytes);
    ASSERT_NE(pin, nullptr);
    std::unique_ptr<Backend::HostPin> pin_back = b->pin_host(back.data(), bytes);
    EXPECT_EQ(type(host.data()), cudaMemoryTypeHost);
    EXPECT_EQ(type(host.data() + bytes - 1), cudaMemoryTypeHost);
    EXPECT_NE(test::error_of([&] { b->pin_host(host.data(), bytes); }).find("could not page-lock"),
              std::string::npos);
    EXPECT_EQ(type(host.data()), cudaMemoryTypeHost) << "a failed second pin undid the first";
    Buffer d(b->compute_memory(), bytes);
    ASSERT_TRUE(d);
    b->copy_to_compute(d.data(), host.data(), bytes);
    b->wait(Backend::Stream::D2H, b->record(Backend::Stream::H2D));
    b->copy_to_host(back.data(), d.data(), bytes);
    b->wait_host(b->record(Backend::Stream::D2H));
    EXPECT_EQ(std::memcmp(back.data(), host.data(), bytes), 0);
  }
  EXPECT_EQ(type(host.data()), cudaMemoryTypeUnregistered) << "still page-locked after its pin went";
#endif
}

// The kernels' pool scratch, which a plan counts beside the arena (KernelTable::PoolScratch),
// is what the backend reports they held: a bf16 linear layer rounds its input and weight
// to bf16 in it, and once the call is done and the mark reset nothing is held.
TEST(CudaBackend, KernelScratchPeakIsWhatTheTablesCallsHeld) {
  LT_REQUIRE_GPU();
  auto b = make_cuda_backend();
  const KernelTable& k = b->kernels();
  const int64_t M = 512, K = 1024, N = 768;
  Buffer y(b->compute_memory(), M * N * sizeof(float)), x(b->compute_memory(), M * K * sizeof(float)),
      w(b->compute_memory(), N * K * sizeof(float));
  ASSERT_TRUE(y && x && w);
  b->fill_compute(x.data(), 0, M * K * sizeof(float));
  b->fill_compute(w.data(), 0, N * K * sizeof(float));
  b->wait_host(b->record(Backend::Stream::Compute));
  b->reset_kernel_scratch_peak();
  EXPECT_EQ(b->kernel_scratch_peak(), 0u) << "nothing held before the call";
  k.linear_forward(reinterpret_cast<float*>(y.data()), LinearInput{reinterpret_cast<const float*>(x.data())},
                   reinterpret_cast<const float*>(w.data()), nullptr, nullptr, M, K, N, Precision::BF16);
  b->wait_host(b->record(Backend::Stream::Compute));
  const size_t planned = k.pool_scratch.linear_forward(M, K, N, Precision::BF16, false);
  EXPECT_GE(planned, 2u * static_cast<size_t>(M * K + N * K));
  EXPECT_GE(b->kernel_scratch_peak(), planned);
  // And no more: the plans (and StreamingCuda's peak check) count the bytes the calls ask
  // for; a pool that counts them rounded up would show here first, by name.
  EXPECT_LE(b->kernel_scratch_peak(), planned) << "the pool counts more than the calls asked for";
  std::printf("bf16 linear %lld x %lld -> %lld: pool held %zu bytes at most, the plan counts %zu\n",
              static_cast<long long>(M), static_cast<long long>(K), static_cast<long long>(N),
              b->kernel_scratch_peak(), planned);
  b->reset_kernel_scratch_peak();
  EXPECT_EQ(b->kernel_scratch_peak(), 0u) << "the call's scratch is still held";
}

// host -> (H2D) A -> (compute) B, a fill over part of B -> (D2H) host, each stream waiting
// on the one before through the backend's events only. The buffers are large enough that
// a missing wait would let a stream read bytes not yet written.
TEST(CudaBackend, EventsOrderTheStreams) {
  LT_REQUIRE_GPU();
  auto b = make_cuda_backend();
  for (size_t bytes : {size_t{1}, size_t{4097}, size_t{3} << 20, size_t{256} << 20}) {
    SCOPED_TRACE("bytes " + std::to_string(bytes));
    Buffer src(b->host_tier_memory(), bytes), dst(b->host_tier_memory(), bytes);
    Buffer A(b->compute_memory(), bytes), B(b->compute_memory(), bytes);
    ASSERT_TRUE(src && dst && A && B);
    for (size_t i = 0; i < bytes; ++i) src.data()[i] = std::byte(static_cast<uint8_t>(i * 131 + 7));
    std::memset(dst.data(), 0, bytes);
    const size_t fill_at = bytes / 3, fill_n = bytes / 4;
    const Backend::Event nothing_yet = b->record(Backend::Stream::H2D);
    b->copy_to_compute(A.data(), src.data(), bytes);
    const Backend::Event loaded = b->record(Backend::Stream::H2D);
    EXPECT_GT(loaded.count, nothing_yet.count) << "a copy issued moves the H2D stream's count";
    EXPECT_EQ(b->record(Backend::Stream::H2D).count, loaded.count) << "nothing issued: the same point";
    b->wait(Backend::Stream::Compute, loaded);
    b->copy_within_compute(B.data(), A.data(), bytes);
    b->fill_compute(B.data() + fill_at, 0x5A, fill_n);
    b->wait(Backend::Stream::D2H, b->record(Backend::Stream::Compute));
    b->copy_to_host(dst.data(), B.data(), bytes);
    b->wait_host(b->record(Backend::Stream::D2H));
    size_t wrong = 0;
    for (size_t i = 0; i < bytes; ++i) {
      const uint8_t want = i >= fill_at && i < fill_at + fill_n ? 0x5A : static_cast<uint8_t>(i * 131 + 7);
      wrong += static_cast<uint8_t>(dst.data()[i]) != want;
    }
    EXPECT_EQ(wrong, 0u);
  }
}

// A copy either way starts after the compute work issued before it (backend.h), with no
// event from the caller: what the executor, written against host compute that is done
// when issued, relies on for a gradient slot it drains, an activation it offloads and a
// slot it refills. A fill of 1 GiB (about a millisecond on a GPU) then a copy of its last
// 4 KiB: out, the copy must see the fill; in, the copy's bytes must outlast it.
TEST(CudaBackend, CopiesStartAfterTheComputeIssuedBeforeThem) {
  LT_REQUIRE_GPU();
  auto b = make_cuda_backend();
  const size_t bytes = size_t{1} << 30, tail = 4096;
  Buffer dev(b->compute_memory(), bytes), host(b->host_tier_memory(), tail);
  ASSERT_TRUE(dev && host);
  std::byte* end = dev.data() + bytes - tail;
  const auto wrong_bytes = [&](uint8_t want) {
    size_t wrong = 0;
    for (size_t i = 0; i < tail; ++i) wrong += static_cast<uint8_t>(host.data()[i]) != want;
    return wrong;
  };
  for (int r = 0; r < 8; ++r) {
    SCOPED_TRACE("round " + std::to_string(r));
    const uint8_t filled = static_cast<uint8_t>(0x11 * (r + 1)), copied = static_cast<uint8_t>(0xC3 ^ r);
    b->fill_compute(dev.data(), filled, bytes);
    b->copy_to_host(host.data(), end, tail);
    b->wait_host(b->record(Backend::Stream::D2H));
    EXPECT_EQ(wrong_bytes(filled), 0u) << "a copy out ran before the fill issued before it";
    std::memset(host.data(), copied, tail);
    b->fill_compute(dev.data(), filled, bytes);
    b->copy_to_compute(end, host.data(), tail);
    b->wait(Backend::Stream::D2H, b->record(Backend::Stream::H2D));
    std::memset(host.data(), 0, tail);
    b->copy_to_host(host.data(), end, tail);
    b->wait_host(b->record(Backend::Stream::D2H));
    EXPECT_EQ(wrong_bytes(copied), 0u) << "a copy in ran before the fill issued before it, which overwrote it";
  }
}

// compute_done() returns once the compute stream's work is done (backend.h: the executor
// times its windows by it): a fill of 1 GiB, then compute_done, then a synchronous copy on
// CUDA's default stream, which does not wait for the backend's (non-blocking) streams.
// Between compute_begin and compute_issued it also says how long the kernels ran past
// their issuing (a fill of 1 GiB takes longer than its launch); without them, 0.
TEST(CudaBackend, ComputeDoneWaitsForTheKernels) {
  LT_REQUIRE_GPU();
#ifdef LT_HAVE_CUDA
  auto b = make_cuda_backend();
  const size_t bytes = size_t{1} << 30, tail = 4096;
  Buffer dev(b->compute_memory(), bytes);
  ASSERT_TRUE(dev);
  std::vector<uint8_t> host(tail);
  for (int r = 0; r < 8; ++r) {
    const uint8_t filled = static_cast<uint8_t>(0x21 * (r + 1));
    const bool timed = r % 2 == 0;
    if (timed) b->compute_begin();
    b->fill_compute(dev.data(), filled, bytes);
    if (timed) b->compute_issued(0);
    const double past_issue = b->compute_done();
    ASSERT_EQ(cudaMemcpy(host.data(), dev.data() + bytes - tail, tail, cudaMemcpyDeviceToHost), cudaSuccess);
    size_t wrong = 0;
    for (uint8_t v : host) wrong += v != filled;
    EXPECT_EQ(wrong, 0u) << "round " << r << ": compute_done returned before the fill issued before it";
    if (timed) {
      EXPECT_GT(past_issue, 0.0) << "round " << r << ": a 1 GiB fill ran no longer than its launch";
      EXPECT_LT(past_issue, 1.0) << "round " << r;
      std::printf("round %d: the 1 GiB fill ran %.3f ms past its issuing\n", r, past_issue * 1e3);
    } else {
      EXPECT_EQ(past_issue, 0.0) << "round " << r << ": untimed, compute_done has no kernels' time to give";
    }
  }
#endif
}

// synchronize() waits for both copy streams; the byte counters and the copies' own time
// add up, and the rates they give are a link's, not a timer's mistake. The rates are
// printed: the H2D and D2H figures the planner's profile will measure this way.
TEST(CudaBackend, CopiesAreTimedOnTheirStreams) {
  LT_REQUIRE_GPU();
  auto b = make_cuda_backend();
  const size_t bytes = size_t{512} << 20;
  const int reps = 4;
  Buffer host_a(b->host_tier_memory(), bytes), host_b(b->host_tier_memory(), bytes), dev(b->compute_memory(), bytes);
  ASSERT_TRUE(host_a && host_b && dev);
  std::memset(host_a.data(), 1, bytes);
  const size_t h2d0 = b->h2d_bytes, d2h0 = b->d2h_bytes;
  const Backend::LinkBusy before = b->link_busy();
  for (int r = 0; r < reps; ++r) {
    b->copy_to_compute(dev.data(), host_a.data(), bytes);
    b->wait(Backend::Stream::D2H, b->record(Backend::Stream::H2D));
    b->copy_to_host(host_b.data(), dev.data(), bytes);
    b->wait(Backend::Stream::H2D, b->record(Backend::Stream::D2H));
  }
  b->synchronize();
  EXPECT_EQ(0, std::memcmp(host_a.data(), host_b.data(), bytes));
  EXPECT_EQ(b->h2d_bytes - h2d0, bytes * reps);
  EXPECT_EQ(b->d2h_bytes - d2h0, bytes * reps);
  // The timer collects pairs as they complete: after synchronize() every pair has.
  const Backend::LinkBusy after = b->link_busy();
  const double h2d_s = after.h2d_s - before.h2d_s, d2h_s = after.d2h_s - before.d2h_s;
  ASSERT_GT(h2d_s, 0);
  ASSERT_GT(d2h_s, 0);
  const double h2d_gbps = double(bytes) * reps / h2d_s / 1e9, d2h_gbps = double(bytes) * reps / d2h_s / 1e9;
  std::printf("  pinned copies of %zu MiB: H2D %.1f GB/s, D2H %.1f GB/s (bytes over the copies' own time)\n",
              bytes >> 20, h2d_gbps, d2h_gbps);
  // No host link moves a TB/s; a timer that measured the issue instead of the copy would.
  EXPECT_LT(h2d_gbps, 1000);
  EXPECT_LT(d2h_gbps, 1000);
}

// `profile --backend cuda`'s measurements (exec/backend_rates.h) run on the device: the
// table's matmul in device memory and the pinned copies each way give rates a GPU can
// have (not the microseconds of a call that did nothing, nor a failed one).
TEST(CudaBackend, ProfileRatesRunOnTheDevice) {
  LT_REQUIRE_GPU();
  auto b = make_cuda_backend();
  const double bf16 = measure_backend_gemm(*b, 2048, Precision::BF16, 3);
  const double f32 = measure_backend_gemm(*b, 2048, Precision::F32, 3);
  std::printf("cuda backend: bf16 GEMM 2048^3 %.1f TFLOP/s, fp32 %.1f TFLOP/s\n", bf16 / 1e12, f32 / 1e12);
  EXPECT_GT(bf16, 1e12);  // any GPU with tensor cores; the CPU engine's reach is ~1e11
  EXPECT_LT(bf16, 1e16);  // ten times a B200's dense bf16 peak
  EXPECT_GT(f32, 1e11);
  for (bool to_compute : {true, false}) {
    const double rate = measure_backend_link(*b, to_compute, size_t{64} << 20, 3);
    EXPECT_GT(rate, 1e9) << (to_compute ? "h2d" : "d2h");   // PCIe 3 x4 and up
    EXPECT_LT(rate, 1e12) << (to_compute ? "h2d" : "d2h");  // beyond NVLink-C2C
  }
}

TEST(CudaBackend, ANonexistentDeviceIsAnError) {
  LT_REQUIRE_GPU();
  const std::string e = test::error_of([] { make_cuda_backend(1 << 20); });
  EXPECT_NE(e.find("no CUDA device 1048576"), std::string::npos) << e;
}

}  // namespace
}  // namespace lt
