// GeGLU (gelu_pytorch_tanh gate) in float64 with the error bounds the fp32 kernels must
// meet, shared by tests/kernels/geglu_test.cpp and the backend-ops test.
//
// Tolerance, counting roundings per operation (so FMA contraction and any vector width
// stay within it): y = k (g + a g^3) takes 5 roundings of same-sign terms, within 6u of
// |y| (u = 2^-24); s = sigmoid(2y) through exp_approx (2 ulp) is within 7u of s plus the
// propagated error of y, |ds/dy| |dy| = 2 s (1 - s) |y| 6u; so s is within
// s (7u + 12u (1 - s) |y|), and h = g s u within |h| (10u + 12u (1 - s) |y|).
// dg = dh u s (1 + g (1 - s) 2 y'), y' = k (1 + 3a g^2): the bracket can cancel (for
// g < 0), so its error is absolute, bounded by the errors of s and 1 - s times the sum of
// the bracket's magnitudes B = 1 + |g| 2 y', with ~6 more roundings:
// |dh u| s B (16u + 24u (1 - s) |y|). exp_approx clamps its argument beyond 87, which
// changes gelu only where |gelu| < 1e-36: an absolute floor of 1e-30 covers it.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/cpu/geglu.h"
#include "kernels/kernel_test_util.h"

namespace lt::test {

struct GegluExpected {
  std::vector<double> h, dg, du;     // ref::geglu_forward / geglu_backward in double
  std::vector<double> bh, bdg, bdu;  // the bounds above, element by element
};

inline GegluExpected geglu_expected(const std::vector<float>& g, const std::vector<float>& u,
                                    const std::vector<float>& dh) {
  const size_t len = g.size();
  const int64_t n = static_cast<int64_t>(len);
  const auto gd = to_double(g), ud = to_double(u), dhd = to_double(dh);
  GegluExpected e;
  e.h.resize(len), e.dg.resize(len), e.du.resize(len), e.bh.resize(len), e.bdg.resize(len), e.bdu.resize(len);
  ref::geglu_forward<double>(e.h.data(), gd.data(), ud.data(), n);
  ref::geglu_backward<double>(e.dg.data(), e.du.data(), dhd.data(), gd.data(), ud.data(), n);
  for (size_t i = 0; i < len; ++i) {
    const double x = gd[i];
    const double y = kGeluTanhK * (x + kGeluTanhA * x * x * x);
    const double s = 1 / (1 + std::exp(-2 * y));
    const double rel = 10 * kU32 + 12 * kU32 * (1 - s) * std::fabs(y);
    const double B = 1 + std::fabs(x) * 2 * kGeluTanhK * (1 + 3 * kGeluTanhA * x * x);
    e.bh[i] = rel * std::fabs(e.h[i]) + 1e-30;
    e.bdu[i] = rel * std::fabs(e.du[i]) + 1e-30;
    e.bdg[i] = std::fabs(dhd[i] * ud[i]) * s * B * (16 * kU32 + 24 * kU32 * (1 - s) * std::fabs(y)) + 1e-30;
  }
  return e;
}

}  // namespace lt::test
