// Helpers for the kernel tests: random data, fp32 unit roundoff, an element-wise
// "within this error bound" check, and a scoped thread count.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <vector>

#include <gtest/gtest.h>

#include "core/dtype.h"
#include "core/threads.h"

namespace lt::test {

// Unit roundoff (half an ulp at 1): fl(a op b) = (a op b)(1 + d), |d| <= u.
constexpr double kU32 = 0x1p-24;
constexpr double kUBf16 = 0x1p-8;  // bf16 keeps 8 significant bits

inline std::vector<float> random_floats(size_t n, uint64_t seed, float lo = -1, float hi = 1) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& e : v) e = dist(rng);
  return v;
}

inline std::vector<double> to_double(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// |v[i]| in double: run through a reference, it gives the magnitude an error bound scales.
inline std::vector<double> abs_of(const std::vector<float>& v) {
  std::vector<double> a(v.size());
  for (size_t i = 0; i < v.size(); ++i) a[i] = std::fabs(double(v[i]));
  return a;
}

inline std::vector<float> round_bf16(const std::vector<float>& v) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = bf16_to_f32(f32_to_bf16(v[i]));
  return r;
}

// |got[i] - want[i]| <= bound[i] for all i (NaN fails); reports the worst element.
inline ::testing::AssertionResult within_bound(const std::vector<float>& got,
                                               const std::vector<double>& want,
                                               const std::vector<double>& bound) {
  if (got.size() != want.size() || got.size() != bound.size())
    return ::testing::AssertionFailure() << "size mismatch";
  size_t worst = 0;
  double worst_ratio = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double(got[i]) - want[i]);
    const double ratio = std::isfinite(err) ? err / bound[i] : INFINITY;
    if (!(ratio <= worst_ratio)) {
      worst_ratio = ratio;
      worst = i;
    }
  }
  std::ostringstream s;
  s.precision(10);
  s << "worst at [" << worst << "]: got " << got[worst] << ", want " << want[worst]
    << ", bound " << bound[worst] << " (ratio " << worst_ratio << ")";
  if (worst_ratio <= 1.0) return ::testing::AssertionSuccess() << s.str();
  return ::testing::AssertionFailure() << s.str();
}

// Sets the OpenMP thread count for a scope and restores it after.
class ScopedThreads {
 public:
  explicit ScopedThreads(int n) : old_(num_threads()) { set_num_threads(n); }
  ~ScopedThreads() { set_num_threads(old_); }
  ScopedThreads(const ScopedThreads&) = delete;
  ScopedThreads& operator=(const ScopedThreads&) = delete;

 private:
  int old_;
};

}  // namespace lt::test
