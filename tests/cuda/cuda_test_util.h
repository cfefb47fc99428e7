// Shared by the CUDA kernel tests: the skip when there is no GPU, seeded inputs, and checks
// against float64 references with bounds from the arithmetic's unit roundoff.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
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

// Rounds v to bf16 values in place and returns their bits: the GPU reads the bits, the
// float64 reference the same values.
inline std::vector<uint16_t> round_to_bf16(std::vector<float>& v) {
  std::vector<uint16_t> bits(v.size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = bf16_to_f32(bf16{bits[i] = f32_to_bf16(v[i]).bits});
  return bits;
}

// An elementwise gate (SwiGLU, GeGLU) run on the GPU: h = forward(g, u), and dg, du from
// backward(dh, g, u).
struct GateOutputs {
  std::vector<float> h, dg, du;
};
template <class Forward, class Backward>
GateOutputs run_gate(Forward forward, Backward backward, const std::vector<float>& g, const std::vector<float>& u,
                     const std::vector<float>& dh) {
  const int64_t n = static_cast<int64_t>(g.size());
  const cuda::DeviceBuffer dg_in = cuda::to_device(g), du_in = cuda::to_device(u), ddh = cuda::to_device(dh);
  const cuda::DeviceBuffer h(n * 4), dg(n * 4), du(n * 4);
  forward(h.as<float>(), dg_in.as<float>(), du_in.as<float>(), n, nullptr);
  backward(dg.as<float>(), du.as<float>(), ddh.as<float>(), dg_in.as<float>(), du_in.as<float>(), n, nullptr);
  return {cuda::to_host<float>(h, n), cuda::to_host<float>(dg, n), cuda::to_host<float>(du, n)};
}

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
