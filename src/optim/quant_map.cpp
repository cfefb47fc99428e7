#include "optim/quant_map.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <vector>

#include "core/error.h"

namespace lt {

namespace {

// Decade k (k = 0..6) covers [0.1, 1] * 10^(k-6) with `bins(k)` equal-width bins; the map
// holds each bin's centre. Signed: 2^k bins per decade and per sign (127 + 127), plus 0
// and +1. Unsigned: 2^(k+1) bins (254), plus 0 and +1. Built in float64, rounded once.
// #{ j : x > mid[j] }, by a plain scan: the definition the bucket table must reproduce.
int count_below(const QuantMap& m, float x) {
  int c = 0;
  for (int j = 0; j < 255; ++j) c += x > m.mid[j];
  return c;
}

int32_t key_of(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  const int32_t a = static_cast<int32_t>(bits & 0x7fffffffu);
  return (bits >> 31) ? -1 - a : a;
}

float float_of(uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, 4);
  return x;
}

// The bucket table (quant_map.h). For each bucket, the smallest and largest x that land in
// it (the end buckets of a side take everything clamped into them) bound the codes; the
// scan proves the "at most one midpoint per bucket" premise for every bucket, so the table
// is exact by construction, and the tests compare it with the search anyway.
void build_buckets(QuantMap& m, bool is_signed) {
  m.is_signed = is_signed;
  std::fill(std::begin(m.bucket), std::end(m.bucket), 0u);
  for (int side = is_signed ? -1 : 1; side <= 1; side += 2) {
    for (int32_t ia = 0; ia < kBucketsPerSide; ++ia) {
      const bool first = ia == 0, last = ia == kBucketsPerSide - 1;
      const uint32_t a_lo = first ? 0u : uint32_t(kBucketFirst + ia) << kBucketShift;
      const uint32_t a_hi = last ? 0x7f800000u : (uint32_t(kBucketFirst + ia + 1) << kBucketShift) - 1;
      float x_min = side > 0 ? float_of(a_lo) : -float_of(a_hi);
      const float x_max = side > 0 ? float_of(a_hi) : -float_of(a_lo);
      if (!is_signed && first) x_min = -INFINITY;  // every x <= -0 lands in bucket 0 too
      const int c_lo = count_below(m, x_min), c_hi = count_below(m, x_max);
      LT_ASSERT(c_hi - c_lo <= 1, "a quantization bucket holds more than one midpoint");
      uint32_t thr = 0xffff;
      if (c_hi > c_lo) {
        // Clamped buckets hold keys of other buckets too: their low bits mean nothing.
        LT_ASSERT(!first && !last, "a midpoint lies in a clamped quantization bucket");
        thr = static_cast<uint32_t>(key_of(m.mid[c_lo])) & 0xffffu;
      }
      const int32_t index = is_signed ? ((ia ^ (side < 0 ? -1 : 0)) + kBucketsPerSide) : ia;
      m.bucket[index] = thr << 16 | static_cast<uint32_t>(c_lo);
    }
  }
}

// The fast path's tables (quant_map.h). Decade k holds codes [first[k], first[k] + N_k).
void build_fast_path(QuantMap& m, bool is_signed) {
  const int zero_code = is_signed ? 127 : 0;
  float a[8], b[8], bound[8];
  int32_t h[8];
  int code = zero_code + 1;
  for (int k = 0; k < 7; ++k) {
    const int n = is_signed ? (1 << k) : (2 << k);
    const double s = std::pow(10.0, k - 6);
    a[k + 1] = static_cast<float>(n / (0.9 * s));
    b[k + 1] = static_cast<float>(code - 0.1 * n / 0.9);
    h[k + 1] = code + n - 1;
    bound[k + 1] = m.mid[code + n - 1];  // the midpoint to the next decade (or to +1)
    code += n;
  }
  LT_ASSERT(code == 255, "dynamic map decades do not end below +1");
  bound[0] = m.mid[zero_code];
  a[0] = 0.5f / bound[0];
  b[0] = zero_code + 0.5f;
  h[0] = 255;
  for (int k = 1; k < 8; ++k) LT_ASSERT(bound[k - 1] < bound[k], "fast-path segment boundaries are not ascending");
  QuantFastPath& f = m.fast;
  for (int k = 0; k < 16; ++k) {
    f.bound[k] = bound[k % 8];
    f.a[k] = a[k % 8];
    f.b[k] = b[k % 8];
    f.h[k] = h[k % 8];
  }
  // kSegMinA: in segment 0, well inside its line's floor (u <= zero + 0.97), at estimate 0.
  const float amin = float_of(static_cast<uint32_t>(kSegMinABits));
  LT_ASSERT(amin < bound[0] && std::fma(amin, a[0], b[0]) < b[0] + 0.47f &&
                std::fma(static_cast<float>(kSegMinABits), kSegK, kSegC) == 8388608.f,
            "fast-path segment estimate floor is off");
}

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
  for (int i = 0; i < 256; ++i) {
    m.value[i] = static_cast<float>(v[i]);
    uint32_t bits;
    std::memcpy(&bits, &m.value[i], 4);
    for (int b = 0; b < 4; ++b) m.value_byte[b][i] = static_cast<uint8_t>(bits >> (8 * b));
  }
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
  build_buckets(m, is_signed);
  build_fast_path(m, is_signed);
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
