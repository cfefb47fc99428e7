// GeGLU (gelu_pytorch_tanh gate): the fast path at every ISA level this machine runs
// (test::for_each_isa) against the double reference (libm exp), the reference against
// the plain tanh form of transformers' formula where that form does not cancel, and the
// reference's backward against finite differences. The fp32 bounds are derived in
// kernels/geglu_bounds.h.
#include "kernels/cpu/geglu.h"

#include "kernels/finite_difference.h"
#include "isa_test_util.h"
#include "kernels/geglu_bounds.h"
#include "kernels/kernel_test_util.h"

namespace lt {
namespace {

TEST(GeGLU, MatchesReference) {
  for (int64_t n : {1, 15, 17, 100003}) {  // the last takes the threaded path
    auto g = test::random_floats(size_t(n), 11, -12, 12);
    auto u = test::random_floats(size_t(n), 12);
    auto dh = test::random_floats(size_t(n), 13);
    if (n > 4) g[1] = -95.0f, g[2] = 95.0f, g[3] = 0.0f, g[4] = -0.75f;  // clamp, zero, cancellation
    const size_t len = static_cast<size_t>(n);
    const test::GegluExpected e = test::geglu_expected(g, u, dh);
    test::for_each_isa([&](Isa) {
      std::vector<float> h(len, NAN), dg(len, NAN), du(len, NAN);
      geglu_forward(h.data(), g.data(), u.data(), n);
      geglu_backward(dg.data(), du.data(), dh.data(), g.data(), u.data(), n);
      EXPECT_TRUE(test::within_bound(h, e.h, e.bh)) << "n=" << n;
      EXPECT_TRUE(test::within_bound(du, e.du, e.bdu)) << "n=" << n;
      EXPECT_TRUE(test::within_bound(dg, e.dg, e.bdg)) << "n=" << n;
    });
  }
}

// The reference against transformers' own expression 0.5 x (1 + tanh(k (x + a x^3))),
// in double where it does not cancel (x > -3: 1 + tanh(y) > 1e-4), and its derivative.
TEST(GeGLU, ReferenceMatchesTheTanhForm) {
  for (double x = -3; x <= 6; x += 0.125) {
    const double y = kGeluTanhK * (x + kGeluTanhA * x * x * x), t = std::tanh(y);
    const double want = 0.5 * x * (1 + t);
    const double dwant = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * kGeluTanhK * (1 + 3 * kGeluTanhA * x * x);
    const double one = 1;
    double h, dg, du;
    ref::geglu_forward<double>(&h, &x, &one, 1);
    ref::geglu_backward<double>(&dg, &du, &one, &x, &one, 1);
    EXPECT_NEAR(h, want, 1e-12 * (1 + std::fabs(want))) << x;
    EXPECT_NEAR(du, want, 1e-12 * (1 + std::fabs(want))) << x;
    EXPECT_NEAR(dg, dwant, 1e-11 * (1 + std::fabs(dwant))) << x;
  }
}

// Known values of the tanh approximation: gelu(0) = 0, gelu(x) - gelu(-x) = x (tanh is
// odd), and gelu(g) -> g for large g.
TEST(GeGLU, ReferenceIdentities) {
  const std::vector<double> x = {0.0, 0.3, 1.7, 4.0, 30.0};
  std::vector<double> nx(x.size()), ones(x.size(), 1.0), hp(x.size()), hn(x.size());
  for (size_t i = 0; i < x.size(); ++i) nx[i] = -x[i];
  ref::geglu_forward<double>(hp.data(), x.data(), ones.data(), int64_t(x.size()));
  ref::geglu_forward<double>(hn.data(), nx.data(), ones.data(), int64_t(x.size()));
  EXPECT_EQ(hp[0], 0.0);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(hp[i] - hn[i], x[i], 1e-12 * (1 + x[i]));
  EXPECT_NEAR(hp[4], 30.0, 1e-12);
}

TEST(GeGLU, ReferenceBackwardMatchesFiniteDifferences) {
  const int64_t n = 23;
  auto x = test::fd::random_vector(size_t(2 * n), 15, -4, 4);  // [g | u]
  auto dy = test::fd::random_vector(size_t(n), 16);
  std::vector<double> dx(size_t(2 * n));
  ref::geglu_backward<double>(dx.data(), dx.data() + n, dy.data(), x.data(), x.data() + n, n);
  auto f = [n](const std::vector<double>& in, std::vector<double>& y) {
    ref::geglu_forward<double>(y.data(), in.data(), in.data() + n, n);
  };
  auto r = test::fd::check_gradient(f, x, dy, dx);
  EXPECT_TRUE(r.ok()) << r.str();
}

}  // namespace
}  // namespace lt
