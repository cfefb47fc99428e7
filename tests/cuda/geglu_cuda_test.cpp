// GeGLU on the GPU against float64 (kernels/cpu/geglu.h's ref:: in double) from the same
// fp32 inputs. Bound: y's five roundings move it by gamma(5) of its terms' magnitudes;
// the gate sigmoid(2y) moves by its slope 2 s (1 - s) times that, plus expf's 2 ulp, the
// add and the division relative to s; products then add their roundings. Where the gate
// underflows (x below about -10: sigmoid(2y) = e / (1 + e) with e = expf(2y) subnormal or
// zero), relative bounds do not hold: there each product or quotient that lands below
// FLT_MIN adds up to eta = 2^-150 absolute (gradual underflow; sums of subnormals are
// exact), expf's 2 ulp are 4 eta, so s is within 5 eta, and that moves every later value
// by the magnitudes it is multiplied by.
#include <gtest/gtest.h>

#include <cmath>

#include "cuda_test_util.h"
#include "kernels/cpu/geglu.h"
#include "kernels/cuda/geglu_cuda.h"

namespace lt {
namespace {

using test::gamma;

constexpr double kEta = 0x1p-150;  // half the smallest fp32 subnormal

TEST(CudaKernels, GegluMatchesFloat64) {
  LT_REQUIRE_CUDA_DEVICE();
  const int64_t n = 1 << 20;
  const std::vector<float> g = test::normal_floats(n, 3.0f, 61), u = test::normal_floats(n, 1.0f, 62),
                           dh = test::normal_floats(n, 1.0f, 63);
  const auto [h, dg, du] = test::run_gate(cuda::geglu_forward, cuda::geglu_backward, g, u, dh);
  const std::vector<double> gd = test::widen(g), ud = test::widen(u), dhd = test::widen(dh);
  std::vector<double> h_ref(n), dg_ref(n), du_ref(n), h_b(n), dg_b(n), du_b(n);
  ref::geglu_forward<double>(h_ref.data(), gd.data(), ud.data(), n);
  ref::geglu_backward<double>(dg_ref.data(), du_ref.data(), dhd.data(), gd.data(), ud.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    const double x = gd[i], s = ref::gelu_tanh_gate(x), ax = std::fabs(x);
    const double y_err = gamma(5) * kGeluTanhK * (ax + kGeluTanhA * ax * ax * ax);
    const double s_err = (2 * s * (1 - s) * y_err + gamma(4) * s) * 1.01;  // ds/dy = 2 s (1 - s)
    const double s_under = 5 * kEta;
    // h = (x s) u: s's underflow times |x u|, then each product's own eta.
    h_b[i] = std::fabs(x * ud[i]) * (s_err + s_under) + gamma(2) * std::fabs(h_ref[i]) + (std::fabs(ud[i]) + 1) * kEta;
    du_b[i] = std::fabs(dhd[i] * x) * (s_err + s_under) + gamma(2) * std::fabs(du_ref[i]) + kEta;
    const double dy = kGeluTanhK * (1 + 3 * kGeluTanhA * x * x);
    const double t = s + 2 * x * s * (1 - s) * dy;
    // t = s + 2 x s (1 - s) dy: s's underflow through 1 + 2 |x| dy, and the four products'
    // etas, each times at most the same factor.
    const double t_under = (s_under + 5 * kEta) * (1 + 2 * ax * dy);
    const double t_err = s_err + 2 * ax * dy * (s_err + gamma(6) * s * (1 - s)) + gamma(3) * (s + std::fabs(t - s));
    dg_b[i] = std::fabs(dhd[i] * ud[i]) * (t_err + t_under) + gamma(2) * std::fabs(dg_ref[i]) + kEta;
  }
  test::expect_within(h, h_ref, h_b, "geglu h");
  test::expect_within(du, du_ref, du_b, "geglu du");
  test::expect_within(dg, dg_ref, dg_b, "geglu dg");
}

}  // namespace
}  // namespace lt
