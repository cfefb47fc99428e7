// SwiGLU: the fast path at every ISA level this machine runs (test::for_each_isa) against
// the double reference, and the reference's backward against finite differences.
//
// Tolerance: exp_approx is within 2 ulp (4u relative), so sigmoid s = 1/(1+e^-g) is within
// ~7u, and h = g*s*u within ~10u of |h|. In dg = dh*u*s*(1 + g(1-s)) the bracket can
// cancel (it crosses 0 near g = -1.28), so its error is absolute: ~8u (1 + |g|);
// hence dg's bound 16u |dh u s| (1 + |g|). The clamp inside exp_approx changes e^-g only for
// |g| > 87, where silu's true value is below 1e-36: an absolute floor of 1e-30 covers it.
// Each bound counts roundings per operation, so FMA contraction (fewer roundings) and any
// vector width keep within it.
#include "kernels/cpu/swiglu.h"

#include "kernels/finite_difference.h"
#include "isa_test_util.h"
#include "kernels/kernel_test_util.h"

namespace lt {
namespace {

using test::kU32;

TEST(SwiGLU, MatchesReference) {
  for (int64_t n : {1, 15, 17, 100003}) {  // the last takes the threaded path
    auto g = test::random_floats(size_t(n), 1, -12, 12);
    auto u = test::random_floats(size_t(n), 2);
    auto dh = test::random_floats(size_t(n), 3);
    if (n > 2) g[1] = -95.0f, g[2] = 95.0f;  // beyond exp_approx's clamp
    auto gd = test::to_double(g), ud = test::to_double(u), dhd = test::to_double(dh);
    const size_t len = static_cast<size_t>(n);
    std::vector<double> hw(len), dgw(len), duw(len);
    ref::swiglu_forward<double>(hw.data(), gd.data(), ud.data(), n);
    ref::swiglu_backward<double>(dgw.data(), duw.data(), dhd.data(), gd.data(), ud.data(), n);
    std::vector<double> bh(len), bdg(len), bdu(len);
    for (size_t i = 0; i < len; ++i) {
      const double s = 1 / (1 + std::exp(-gd[i]));
      bh[i] = 10 * kU32 * std::fabs(hw[i]) + 1e-30;
      bdu[i] = 10 * kU32 * std::fabs(duw[i]) + 1e-30;
      bdg[i] = 16 * kU32 * std::fabs(dhd[i] * ud[i] * s) * (1 + std::fabs(gd[i])) + 1e-30;
    }
    test::for_each_isa([&](Isa) {
      std::vector<float> h(len, NAN), dg(len, NAN), du(len, NAN);
      swiglu_forward(h.data(), g.data(), u.data(), n);
      swiglu_backward(dg.data(), du.data(), dh.data(), g.data(), u.data(), n);
      EXPECT_TRUE(test::within_bound(h, hw, bh)) << "n=" << n;
      EXPECT_TRUE(test::within_bound(du, duw, bdu)) << "n=" << n;
      EXPECT_TRUE(test::within_bound(dg, dgw, bdg)) << "n=" << n;
    });
  }
}

TEST(SwiGLU, ReferenceBackwardMatchesFiniteDifferences) {
  const int64_t n = 23;
  auto x = test::fd::random_vector(size_t(2 * n), 5, -4, 4);  // [g | u]
  auto dy = test::fd::random_vector(size_t(n), 6);
  std::vector<double> dx(size_t(2 * n));
  ref::swiglu_backward<double>(dx.data(), dx.data() + n, dy.data(), x.data(), x.data() + n, n);
  auto f = [n](const std::vector<double>& in, std::vector<double>& y) {
    ref::swiglu_forward<double>(y.data(), in.data(), in.data() + n, n);
  };
  auto r = test::fd::check_gradient(f, x, dy, dx);
  EXPECT_TRUE(r.ok()) << r.str();
}

}  // namespace
}  // namespace lt
