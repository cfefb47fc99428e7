// A float64 reference of the fused AdamW step (fp32 and block-wise 8-bit), written from the
// algorithm's definition and sharing no code with src/optim: its own dynamic maps (built
// directly from the decade definition), its own nearest-code search (lower_bound on the
// values), plain double arithmetic. Besides the results it returns the magnitudes the
// test tolerances are derived from.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace lt::test {

// Dettmers' dynamic map: for decade k = 0..6 the centres of `bins` equal bins of
// [0.1, 1] * 10^(k-6), bins = 2^k per sign (signed) or 2^(k+1) (unsigned); plus 0 and 1.
inline std::vector<double> reference_dynamic_map(bool is_signed) {
  std::vector<double> v = {0.0, 1.0};
  for (int k = 0; k < 7; ++k) {
    const int bins = is_signed ? 1 << k : 2 << k;
    for (int b = 0; b < bins; ++b) {
      const double centre = std::pow(10.0, k - 6) * (0.1 + 0.9 * (b + 0.5) / bins);
      v.push_back(centre);
      if (is_signed) v.push_back(-centre);
    }
  }
  std::sort(v.begin(), v.end());
  return v;
}

// Index of the value nearest to x (either one on an exact tie).
inline int reference_nearest(const std::vector<double>& map, double x) {
  auto it = std::lower_bound(map.begin(), map.end(), x);
  if (it == map.begin()) return 0;
  if (it == map.end()) return static_cast<int>(map.size()) - 1;
  const int hi = static_cast<int>(it - map.begin());
  return (x - map[hi - 1] <= map[hi] - x) ? hi - 1 : hi;
}

struct RefHyper {
  double beta1, beta2, eps, wd, lr, clip;
  int64_t step;
};

// One element: inputs are what the kernel saw (old m, v already dequantized, in double).
struct RefElement {
  double m, v, p;  // new moments (unquantized) and new parameter
  double s_m;      // |beta1 m_old| + |(1 - beta1) g|: the scale of m's rounding error
  double denom;    // sqrt(v / bc2) + eps
};

inline RefElement reference_element(const RefHyper& h, double p, double g, double m_old, double v_old) {
  const double bc1 = 1 - std::pow(h.beta1, double(h.step)), bc2 = 1 - std::pow(h.beta2, double(h.step));
  g *= h.clip;
  RefElement e;
  e.m = h.beta1 * m_old + (1 - h.beta1) * g;
  e.v = h.beta2 * v_old + (1 - h.beta2) * g * g;
  e.s_m = std::fabs(h.beta1 * m_old) + std::fabs((1 - h.beta1) * g);
  e.denom = std::sqrt(e.v / bc2) + h.eps;
  e.p = p * (1 - h.lr * h.wd) - (h.lr / bc1) * e.m / e.denom;
  return e;
}

// Bound on |kernel p - reference p| for fp32 arithmetic (unit roundoff u = 2^-24):
//   m carries <= 4u s_m (dequantize 2u, fma inputs u each, final rounding u);
//   v carries <= 4u v, so sqrt(v) 2u + u, denom <= 5u after the fma;
//   m / denom then carries <= (6|m| + 4 s_m) u / denom <= 10 u s_m / denom (|m| <= s_m);
//   step_size (u), the product with decay (2u |p|) and the last rounding (u |p_new|) add the rest.
// A factor 2 covers the first-order analysis; 1e-37 covers denormal underflow.
inline double reference_p_tolerance(const RefHyper& h, double p_old, const RefElement& e) {
  const double u = 0x1p-24;
  const double bc1 = 1 - std::pow(h.beta1, double(h.step));
  return 2 * u * (std::fabs(e.p) + 2 * std::fabs(p_old) + 11 * (h.lr / bc1) * e.s_m / e.denom) + 1e-37;
}

}  // namespace lt::test
