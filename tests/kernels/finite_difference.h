// Float64 finite-difference gradient check, shared by the kernel tests.
//
// API (namespace lt::test::fd):
//
//   using Fn = std::function<void(const std::vector<double>& x, std::vector<double>& y)>;
//     f: R^n -> R^m, evaluated in double. Several inputs (x and w, say) go into one
//     vector x that f unpacks; y is pre-sized to m by the harness.
//
//   Report check_gradient(const Fn& f, std::vector<double> x, const std::vector<double>& dy,
//                         const std::vector<double>& dx_analytic, const Options& opt = {});
//     The scalar loss is L(x) = sum_j dy[j] * f(x)[j] (dy: a random cotangent, m values).
//     dx_analytic (n values) is the op's backward applied to dy, i.e. dL/dx. Every
//     coordinate (or opt.max_coords of them, evenly spread) is compared against a central
//     difference. Report::ok() says whether all were within tolerance; Report::str() says
//     where the worst one was.
//
//   std::vector<double> random_vector(size_t n, uint64_t seed, double lo = -1, double hi = 1);
//
// Typical use:
//   auto r = fd::check_gradient(f, x, dy, dx);
//   EXPECT_TRUE(r.ok()) << r.str();
//
// Step and tolerance (why these numbers): for a central difference
//   D(h) = (L(x + h e_i) - L(x - h e_i)) / 2h
// the error is a truncation part h^2/6 |L'''| plus a rounding part ~ eps |L| / h. Their
// sum is smallest at h ~ cbrt(eps) * scale, so h_i = cbrt(eps) * max(1, |x_i|).
// The tolerance is the sum of the two parts, each estimated rather than guessed:
//   rounding:   eps * mag * n_acc / h_i, where mag = sum_j |dy_j f_j(x)| bounds the terms
//               of L and n_acc = m + 16 is a worst-case accumulation length (the sum over
//               the m outputs plus the op's own internal sums);
//   truncation: |D(h) - D(2h)| / 3 (Richardson: D(h) = g + c h^2 + ..., so that
//               difference is 3 c h^2, three times the truncation error of D(h));
// times opt.safety (8) for the constants the bounds leave out, plus opt.analytic_abs_err
// for a dx_analytic computed in a lower precision. A wrong gradient is off by O(|g|),
// many orders of magnitude above this tolerance (~1e-9 relative for O(1) data).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace lt::test::fd {

using Fn = std::function<void(const std::vector<double>& x, std::vector<double>& y)>;

struct Options {
  double safety = 8;              // multiplies the estimated error bound
  double analytic_abs_err = 0;    // extra absolute allowance for dx_analytic's own error
  int64_t max_coords = 4096;      // check at most this many coordinates (evenly spread)
  size_t m = 0;                   // output size; 0 = dy.size()
};

struct Report {
  int64_t checked = 0;
  int64_t worst_index = -1;
  double worst_ratio = 0;  // max over coordinates of |analytic - numeric| / tolerance
  double analytic = 0, numeric = 0, tolerance = 0;  // at the worst index
  bool ok() const { return checked > 0 && worst_ratio <= 1.0; }
  std::string str() const {
    std::ostringstream s;
    s.precision(12);
    s << "finite-difference check of " << checked << " coordinates: worst at x[" << worst_index
      << "]: analytic " << analytic << ", numeric " << numeric << ", |diff| "
      << std::fabs(analytic - numeric) << " vs tolerance " << tolerance << " (ratio "
      << worst_ratio << ")";
    return s.str();
  }
};

inline std::vector<double> random_vector(size_t n, uint64_t seed, double lo = -1, double hi = 1) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (auto& e : v) e = dist(rng);
  return v;
}

inline Report check_gradient(const Fn& f, std::vector<double> x, const std::vector<double>& dy,
                             const std::vector<double>& dx_analytic, const Options& opt = {}) {
  constexpr double kEps = std::numeric_limits<double>::epsilon();
  const size_t n = x.size();
  const size_t m = opt.m ? opt.m : dy.size();
  Report rep;
  if (dx_analytic.size() != n || dy.size() != m || n == 0) {
    rep.worst_ratio = INFINITY;  // a size mismatch is a failed check, never a pass
    return rep;
  }
  std::vector<double> y(m);
  auto loss = [&](double* mag) {
    std::fill(y.begin(), y.end(), 0.0);
    f(x, y);
    double l = 0, a = 0;
    for (size_t j = 0; j < m; ++j) {
      l += dy[j] * y[j];
      a += std::fabs(dy[j] * y[j]);
    }
    if (mag) *mag = a;
    return l;
  };
  double mag0 = 0;
  loss(&mag0);
  const double n_acc = double(m) + 16;

  const int64_t count = std::min<int64_t>(int64_t(n), std::max<int64_t>(1, opt.max_coords));
  for (int64_t c = 0; c < count; ++c) {
    const size_t i = count == int64_t(n) ? size_t(c) : size_t(double(c) * double(n) / double(count));
    const double x0 = x[i];
    const double h = std::cbrt(kEps) * std::max(1.0, std::fabs(x0));
    auto diff = [&](double step, double* mag) {
      double m1 = 0, m2 = 0;
      x[i] = x0 + step;
      const double lp = loss(&m1);
      x[i] = x0 - step;
      const double lm = loss(&m2);
      x[i] = x0;
      *mag = std::max(*mag, std::max(m1, m2));
      return (lp - lm) / (2 * step);
    };
    double mag = mag0;
    const double d1 = diff(h, &mag);
    const double d2 = diff(2 * h, &mag);
    const double rounding = kEps * mag * n_acc / h;
    const double truncation = std::fabs(d1 - d2) / 3;
    const double tol = opt.safety * (rounding + truncation) + opt.analytic_abs_err +
                       std::numeric_limits<double>::min();
    const double err = std::fabs(dx_analytic[i] - d1);
    const double ratio = std::isfinite(err) ? err / tol : INFINITY;
    ++rep.checked;
    if (ratio > rep.worst_ratio || rep.worst_index < 0) {
      rep.worst_ratio = ratio;
      rep.worst_index = int64_t(i);
      rep.analytic = dx_analytic[i];
      rep.numeric = d1;
      rep.tolerance = tol;
    }
  }
  return rep;
}

}  // namespace lt::test::fd
