// Shared by the CUDA kernel tests: the skip when there is no GPU, seeded inputs, and checks
// against float64 references with bounds from the arithmetic's unit roundoff.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cuda/device_memory.h"

// Skips the test, printing why, on a machine without a CUDA device.
#define LT_REQUIRE_CUDA_DEVICE()                                                                \
  do {                                                                                          \
    if (::lt::cuda::device_count() == 0)                                                        \
      GTEST_SKIP() << "compiled, not run: " << ::lt::cuda::device_description();                \
  } while (0)

namespace lt::test {

inline constexpr double kF32Unit = 0x1p-24;  // unit roundoff of fp32 (round to nearest)
inline constexpr double kF64Unit = 0x1p-53;

// gamma_n of Higham: the relative bound of n rounded operations in a chain, n u / (1 - n u).
inline double gamma(double n, double u = kF32Unit) { return n * u / (1.0 - n * u); }

inline std::vector<float> normal_floats(size_t n, float stddev, uint64_t seed, float mean = 0.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(mean, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

inline std::vector<double> widen(const std::vector<float>& v) { return {v.begin(), v.end()}; }

inline uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Every |got[i] - want[i]| <= bound[i]; reports the first few that are not, with the bound.
inline void expect_within(const std::vector<float>& got, const std::vector<double>& want,
                          const std::vector<double>& bound, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  ASSERT_EQ(got.size(), bound.size());
  int reported = 0;
  double worst = 0;  // largest error as a fraction of its bound
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (bound[i] > 0) worst = std::max(worst, err / bound[i]);
    if (!(err <= bound[i]) && reported++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", float64 " << want[i] << ", error " << err
                    << " over the bound " << bound[i];
  }
  std::printf("  %s: largest error %.3g of its bound over %zu values\n", what, worst, got.size());
}

}  // namespace lt::test
