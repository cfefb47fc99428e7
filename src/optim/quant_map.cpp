#include "optim/quant_map.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"

namespace lt {

namespace {

// Decade k (k = 0..6) covers [0.1, 1] * 10^(k-6) with `bins(k)` equal-width bins; the map
// holds each bin's centre. Signed: 2^k bins per decade and per sign (127 + 127), plus 0
// and +1. Unsigned: 2^(k+1) bins (254), plus 0 and +1. Built in float64, rounded once.
QuantMap build_map(bool is_signed) {
  std::vector<double> v;
  for (int k = 0; k < 7; ++k) {
    const int bins = is_signed ? (1 << k) : (2 << k);
    const double scale = std::pow(10.0, k - 6);
    for (int b = 0; b < bins; ++b) {
      const double lo = 0.1 + 0.9 * b / bins, hi = 0.1 + 0.9 * (b + 1) / bins;
      const double centre = scale * 0.5 * (lo + hi);
      v.push_back(centre);
      if (is_signed) v.push_back(-centre);
    }
  }
  v.push_back(0.0);
  v.push_back(1.0);
  LT_ASSERT(v.size() == 256, "dynamic map must have 256 entries");
  std::sort(v.begin(), v.end());

  QuantMap m{};
  for (int i = 0; i < 256; ++i) m.value[i] = static_cast<float>(v[i]);
  for (int i = 0; i < 255; ++i) {
    // The exact midpoint (the sum of two floats and the halving are exact in float64),
    // rounded down to fp32: for any fp32 x, x > mid[i] exactly when x lies above the true
    // midpoint, so the search finds the truly nearest value (ties go to the lower one).
    const double exact = 0.5 * (double(m.value[i]) + double(m.value[i + 1]));
    float mid = static_cast<float>(exact);
    if (double(mid) > exact) mid = std::nextafter(mid, -INFINITY);
    m.mid[i] = mid;
    LT_ASSERT(m.value[i] < m.mid[i] && m.mid[i] < m.value[i + 1], "map values too close");
  }
  m.mid[255] = std::numeric_limits<float>::infinity();
  // Node t at depth d (t in [2^d, 2^(d+1))) splits a range of 2s codes, s = 128 >> d; its
  // midpoint is the one just below the upper half of that range.
  m.tree[0] = 0.f;  // unused
  for (int d = 0; d < 8; ++d) {
    const int s = 128 >> d;
    for (int t = 1 << d; t < (2 << d); ++t) m.tree[t] = m.mid[(t - (1 << d)) * 2 * s + s - 1];
  }
  return m;
}

}  // namespace

const QuantMap& signed_dynamic_map() {
  static const QuantMap map = build_map(true);
  return map;
}

const QuantMap& unsigned_dynamic_map() {
  static const QuantMap map = build_map(false);
  return map;
}

}  // namespace lt
