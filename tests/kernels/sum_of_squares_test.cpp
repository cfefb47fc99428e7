// Sum of squares in float64 (kernels/cpu/sum_of_squares.h), at every ISA level this machine
// runs: against a long double reference, and bitwise identical for 1, 2 and 3 threads.
//
// Tolerance: every term x^2 is exact in float64 and >= 0, so however the n terms are
// grouped the float64 sum is within (n - 1) u64 sum x^2 of the exact sum (u64 = 2^-53);
// the bound uses (n + 2) u64 for the reference's own rounding (long double, 2^-64 per add:
// under n 2^-64 relative, far inside). FMA contraction cannot change a term, so the bound
// holds at every level.
#include "kernels/cpu/sum_of_squares.h"

#include <cstring>

#include "isa_test_util.h"
#include "kernels/kernel_test_util.h"

namespace lt {
namespace {

constexpr double kU64 = 0x1p-53;

long double exact_sum_of_squares(const std::vector<float>& x) {
  long double s = 0;
  for (float v : x) s += static_cast<long double>(v) * v;
  return s;
}

TEST(SumOfSquares, MatchesReference) {
  // Around the lane count (16) and the chunk (2^16), and several threaded chunks.
  const int64_t sizes[] = {0, 1, 15, 16, 17, 1000, kSumOfSquaresChunk, kSumOfSquaresChunk + 1,
                           5 * kSumOfSquaresChunk + 123};
  test::for_each_isa([&](Isa) {
    for (int64_t n : sizes) {
      // Magnitudes over many decades, so that an order-dependent error would be large.
      auto x = test::random_floats(size_t(n), uint64_t(n) + 1, -1, 1);
      for (size_t i = 0; i < x.size(); i += 7) x[i] *= 1e4f;
      for (size_t i = 3; i < x.size(); i += 11) x[i] *= 1e-6f;
      const long double want = exact_sum_of_squares(x);
      const double got = sum_of_squares_f64(x.data(), n);
      EXPECT_NEAR(got, double(want), (double(n) + 2) * kU64 * double(want)) << "n=" << n;
    }
  });
}

TEST(SumOfSquares, ExactOnRepresentableSums) {
  // Small integers: every partial sum is an integer below 2^53, so any order is exact.
  std::vector<float> x(100003);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i % 201) - 100);
  double want = 0;
  for (float v : x) want += double(v) * v;
  test::for_each_isa(
      [&](Isa) { EXPECT_EQ(sum_of_squares_f64(x.data(), int64_t(x.size())), want); });
}

TEST(SumOfSquares, BitwiseIdenticalForAnyThreadCount) {
  const int64_t n = 7 * kSumOfSquaresChunk + 999;  // several chunks and a ragged last one
  auto x = test::random_floats(size_t(n), 5, -3, 3);
  test::for_each_isa([&](Isa) {
    double first = 0;
    for (int threads : {1, 2, 3}) {
      test::ScopedThreads scope(threads);
      const double s = sum_of_squares_f64(x.data(), n);
      if (threads == 1)
        first = s;
      else
        EXPECT_EQ(0, std::memcmp(&first, &s, sizeof s)) << threads << " threads";
    }
  });
}

}  // namespace
}  // namespace lt
