// Checks of the decoder block's elementwise steps (kernels/cpu/elementwise.h) against
// float64, shared by the CPU test (tests/kernels/elementwise_test.cpp) and the CUDA one
// (tests/cuda/elementwise_cuda_test.cpp): each takes a kernel's fp32 outputs.
//
// The adds and the scale are one rounded operation of two floats, whose exact result
// float64 holds: the kernels must give that result rounded to fp32, bit for bit. Row
// copies and zeroed rows move bits.
//
// The output gate, s = 1 / (1 + exp(-g)) with exp within E ulp (E = 1 for glibc's expf,
// 2 for CUDA's expf): exp's result is within 2 E u relative (an ulp is at most 2 u of its
// value, u = 2^-24), 1 + e and the division add u each, and s = 1 / (1 + e) moves by at
// most e / (1 + e) <= 1 times e's relative error, so s is within es = (2 E + 2) u
// relative (to first order; the products below are kept whole). Then
//   y = x s and dx = dy s: within (1 + es)(1 + u) - 1 relative;
//   dgate = ((dy x) s)(1 - s): 1 - s loses s es absolute to s's error (cancellation as
//   s -> 1) and u relative to its rounding, so it is within r1 = (s es + u (1 - s + s es))
//   / (1 - s) relative, and dgate within (1 + u)^3 (1 + es)(1 + r1) - 1.
// Premise: no product underflows (|g| <= 20 and the other inputs of order 1 keep every
// value normal), so relative bounds hold.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

namespace lt::test::elementwise {

inline constexpr double kUnit = 0x1p-24;

// n seeded floats, uniform in [lo, hi).
inline std::vector<float> uniform_floats(size_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Every |got - want| <= bound, value by value; reports the first few that are not and, when
// done, the largest error as a fraction of its bound.
class BoundCheck {
 public:
  explicit BoundCheck(const char* what) : what_(what) {}
  void operator()(float got, double want, double bound, size_t i) {
    const double err = std::fabs(double(got) - want);
    if (bound > 0) worst_ = std::max(worst_, err / bound);
    if (!(err <= bound) && bad_++ < 5)
      ADD_FAILURE() << what_ << "[" << i << "]: got " << got << ", float64 " << want << ", error " << err
                    << " over the bound " << bound;
  }
  ~BoundCheck() { std::printf("  %s: largest error %.3g of its bound\n", what_, worst_); }

 private:
  const char* what_;
  double worst_ = 0;
  int bad_ = 0;
};

inline uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// got[i] has the bits of want[i] rounded to fp32, for every i.
inline void expect_rounded(const std::vector<float>& got, const std::vector<double>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  size_t differ = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (bits(got[i]) != bits(static_cast<float>(want[i])) && differ++ < 3)
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", the rounded exact value " << want[i];
  EXPECT_EQ(differ, 0u) << what << ": values that are not the exact result rounded";
}

// y = a + b, y = x * s: the exact results (float64 holds them exactly).
inline std::vector<double> exact_sum(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<double> r(a.size());
  for (size_t i = 0; i < a.size(); ++i) r[i] = double(a[i]) + double(b[i]);
  return r;
}
inline std::vector<double> exact_scaled(const std::vector<float>& x, float s) {
  std::vector<double> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = double(x[i]) * double(s);
  return r;
}

// dst as copy_rows(dst.data() + dst_offset, dst_stride, src.data(), src_stride, rows, cols)
// leaves it: the copied columns from src, everything else as dst was.
inline std::vector<float> rows_copied(std::vector<float> dst, int64_t dst_offset, int64_t dst_stride,
                                      const std::vector<float>& src, int64_t src_stride, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) dst[dst_offset + r * dst_stride + j] = src[r * src_stride + j];
  return dst;
}

inline std::vector<float> rows_zeroed(std::vector<float> x, const std::vector<int32_t>& ids, int64_t C, int32_t id) {
  for (size_t t = 0; t < ids.size(); ++t)
    if (ids[t] == id)
      for (int64_t c = 0; c < C; ++c) x[t * C + c] = 0.0f;
  return x;
}

// The same bits everywhere.
inline void expect_bits(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  size_t differ = 0;
  for (size_t i = 0; i < got.size(); ++i) differ += bits(got[i]) != bits(want[i]);
  EXPECT_EQ(differ, 0u) << what << ": " << differ << " of " << got.size() << " values differ";
}

struct GateOutputs {
  std::vector<float> y, dx, dgate;
};

// The output gate's outputs against float64 within the bounds above, exp within exp_ulps.
inline void expect_sigmoid_gate(const GateOutputs& got, const std::vector<float>& x, const std::vector<float>& gate,
                                const std::vector<float>& dy, int exp_ulps) {
  const double u = kUnit, es = (2.0 * exp_ulps + 2) * u;
  BoundCheck c_y("gate y"), c_dx("gate dx"), c_dgate("gate dgate");
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_LE(std::fabs(gate[i]), 20.0f) << "the bounds' premise";
    const double e = std::exp(-double(gate[i])), s = 1 / (1 + e), one_minus_s = e / (1 + e);
    const double r1 = (s * es + u * (one_minus_s + s * es)) / one_minus_s;
    const double y = double(x[i]) * s, dx = double(dy[i]) * s, dgate = double(dy[i]) * x[i] * s * one_minus_s;
    c_y(got.y[i], y, std::fabs(y) * ((1 + es) * (1 + u) - 1), i);
    c_dx(got.dx[i], dx, std::fabs(dx) * ((1 + es) * (1 + u) - 1), i);
    c_dgate(got.dgate[i], dgate, std::fabs(dgate) * (std::pow(1 + u, 3) * (1 + es) * (1 + r1) - 1), i);
  }
}

}  // namespace lt::test::elementwise
