// exec/backend_rates.h: what `profile --backend cuda` measures, checked where the machine
// it plays is known. The emu backend's links last at least bytes / rate per copy, so the
// measured rate can only be at or below the rate set (and far from zero); a backend
// whose matmul takes a known time gives the FLOP count over that time. The rates on a GPU
// are checked in tests/exec/backend_cuda_test.cpp.
#include "exec/backend_rates.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "core/error.h"
#include "table_backend.h"
#include "test_util.h"

namespace lt {
namespace {

TEST(BackendRates, LinksMeasureTheRateTheEmuBackendPlays) {
  const double h2d_gbps = 0.5, d2h_gbps = 0.25;
  auto emu = make_emu(h2d_gbps, d2h_gbps);
  const size_t bytes = size_t{4} << 20;  // 8.4 ms one way, 16.8 ms the other
  const int reps = 3;
  const double h2d = measure_backend_link(*emu, true, bytes, reps);
  const double d2h = measure_backend_link(*emu, false, bytes, reps);
  // One warm-up and `reps` timed copies each way, through the backend's own copies.
  EXPECT_EQ(emu->h2d_bytes, bytes * (reps + 1));
  EXPECT_EQ(emu->d2h_bytes, bytes * (reps + 1));
  EXPECT_LE(h2d, h2d_gbps * 1e9);
  EXPECT_LE(d2h, d2h_gbps * 1e9);
  // Slower only by what a copy costs besides its throttle (a memcpy of 4 MiB, a thread's
  // wake-up): a tenth of the rate would be 75 ms more per copy.
  EXPECT_GT(h2d, 0.1 * h2d_gbps * 1e9);
  EXPECT_GT(d2h, 0.1 * d2h_gbps * 1e9);
}

// A matmul that sleeps a known time and notes what it was asked.
struct SlowMatmul {
  static constexpr auto kSleep = std::chrono::milliseconds(20);
  static inline int calls = 0;
  static inline int64_t m = 0, n = 0, k = 0;
  static inline Precision precision = Precision::F32;
  static void matmul(float* c, const float*, bool, const float*, bool, int64_t M, int64_t N, int64_t K, bool,
                     Precision p) {
    ++calls;
    m = M, n = N, k = K, precision = p;
    c[0] = 1;  // the output is compute-tier memory it may write
    std::this_thread::sleep_for(kSleep);
  }
};

KernelTable slow_matmul_table() {
  KernelTable k = cpu_kernel_table();
  k.matmul = &SlowMatmul::matmul;
  return k;
}

TEST(BackendRates, GemmIsTheFlopsOfTheTablesMatmulOverItsTime) {
  test::TableBackend backend(slow_matmul_table());
  const int64_t n = 64;
  const int reps = 3;
  const double rate = measure_backend_gemm(backend, n, Precision::BF16, reps);
  EXPECT_EQ(SlowMatmul::calls, reps + 1);  // one warm-up
  EXPECT_EQ(SlowMatmul::m, n);
  EXPECT_EQ(SlowMatmul::n, n);
  EXPECT_EQ(SlowMatmul::k, n);
  EXPECT_EQ(SlowMatmul::precision, Precision::BF16);
  const double flops = 2.0 * n * n * n, sleep_s = std::chrono::duration<double>(SlowMatmul::kSleep).count();
  EXPECT_LE(rate, flops / sleep_s);
  EXPECT_GT(rate, flops / (10 * sleep_s));  // 180 ms of overhead per call would be a tenth
}

// The default cap a plan takes of a device (profile --backend cuda, bench gpu): free
// memory less the reserve; none for a tier in host RAM or a device with less free.
TEST(BackendRates, DefaultCapIsTheFreeMemoryLessTheReserve) {
  EXPECT_EQ(default_compute_cap_bytes({}), 0.0);
  EXPECT_EQ(default_compute_cap_bytes({size_t{80} << 30, size_t{10} << 30}),
            static_cast<double>(size_t{10} << 30) - kDeviceReserveBytes);
  EXPECT_EQ(default_compute_cap_bytes({size_t{80} << 30, size_t{1} << 20}), 0.0);
  auto emu = make_emu();
  EXPECT_EQ(default_compute_cap_bytes(emu->compute_capacity()), 0.0);
}

TEST(BackendRates, BadRequestsAreErrors) {
  auto cpu = make_cpu_backend();
  EXPECT_NE(test::error_of([&] { measure_backend_link(*cpu, true, 4096, 0); }).find("reps must be at least 1"),
            std::string::npos);
  test::TableBackend backend(slow_matmul_table());
  EXPECT_NE(test::error_of([&] { measure_backend_gemm(backend, 8, Precision::F32, -2); }).find("reps must be"),
            std::string::npos);
}

}  // namespace
}  // namespace lt
