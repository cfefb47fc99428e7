// The tensor-core attention's forward (kernels/cuda/attention_tc_cuda.h) against float64,
// shared by its GPU test (tests/cuda/attention_tc_cuda_test.cpp) and its run on the CPU
// under the warp emulator (tests/kernels/attention_tc_emulated_test.cpp). The kernel
// reads fp32 q, k, v and rounds them to bf16 itself; the reference (kernels/cpu/
// attention.h's ref:: loops in double) gets the same values rounded here, so the bounds
// carry only the kernel's arithmetic after that rounding:
//  - a score is a bf16 x bf16 dot over the padded head dim, exact products summed in
//    fp32 by the tensor cores (rounding mode unspecified: counted at 2^-23, as if it
//    truncated), then scaled: delta_j within gamma(DP + 2) of scale * sum |q k|;
//  - each weight exp(score - max) moves relatively by the score errors (2 delta, the max
//    cancels only approximately), by expf's 2 ulp and a rounding for itself and for each
//    online rescale (one per key tile), and by the subtractions' roundings, which move
//    the exponent by 2^-24 of the scores' spread;
//  - the output's numerator takes the weights rounded to bf16 (2^-8) and sums them times
//    exact bf16 rows in fp32 (gamma of the keys plus a rescale per tile); the denominator
//    sums the unrounded fp32 weights per thread, then over the 4 threads of a row.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "kernels/cpu/attention.h"

namespace lt::test {

constexpr double kTruncUnit = 0x1p-23;  // an fp32 operation that may truncate
constexpr double kBf16Unit = 0x1p-8;    // bf16 round to nearest: 8 significant bits
constexpr int64_t kKeyTile = 64;        // the kernel's key tile (attention_tc_cuda.cu)

struct TcCase {
  int64_t B, S, Hq, Hkv, D;
  int64_t window;
  bool documents;
};

inline std::vector<double> rounded_to_bf16(std::vector<float> v) {
  test::round_to_bf16(v);
  return test::widen(v);
}

inline int64_t padded_head_dim(int64_t D) { return D <= 64 ? 64 : D <= 128 ? 128 : 256; }

// run(o, lse, q, k, v, doc_start or nullptr, c) fills o and lse (host vectors, sized).
template <class Run>
void check_forward(const TcCase& c, Run run) {
  const int64_t B = c.B, S = c.S, Hq = c.Hq, Hkv = c.Hkv, D = c.D, window = c.window;
  const bool documents = c.documents;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  // Scores of a few units (the spread the bounds carry), values around 1.
  const std::vector<float> q = test::normal_floats(B * S * Hq * D, 1.5f, 61), k = test::normal_floats(B * S * Hkv * D, 1.5f, 62),
                           v = test::normal_floats(B * S * Hkv * D, 1.0f, 63, 0.25f);
  std::vector<int32_t> doc;
  if (documents)  // documents of 37, 5 and 55 tokens, restarting every 97: some span tiles, some share one
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < S; ++i) {
        const int64_t r = i % 97, start = i - r + (r < 37 ? 0 : r < 42 ? 37 : 42);
        doc.push_back(static_cast<int32_t>(start));
      }
  const int32_t* dh = documents ? doc.data() : nullptr;
  std::vector<float> o(q.size()), lse(static_cast<size_t>(B * Hq * S)), o2(o.size()), lse2(lse.size());
  run(o, lse, q, k, v, dh, c);
  run(o2, lse2, q, k, v, dh, c);
  EXPECT_TRUE(o2 == o && lse2 == lse) << "two runs differ";

  const std::vector<double> qd = rounded_to_bf16(q), kd = rounded_to_bf16(k), vd = rounded_to_bf16(v);
  std::vector<double> o_ref(q.size()), lse_ref(lse.size());
  ref::attention_forward<double>(o_ref.data(), lse_ref.data(), qd.data(), kd.data(), vd.data(), B, S, Hq, Hkv, D,
                                 static_cast<double>(scale), dh, window);

  const double tiles = static_cast<double>((S + kKeyTile - 1) / kKeyTile);
  const double dot_g = gamma(static_cast<double>(padded_head_dim(D)) + 2, kTruncUnit);
  std::vector<double> o_b(q.size()), lse_b(lse.size());
  const int64_t group = Hq / Hkv;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < S; ++i) {
        const int64_t hk = h / group, qo = ((b * S + i) * Hq + h) * D, j0 = ref::first_key(dh, window, b, S, i);
        const double n = static_cast<double>(i - j0 + 1);
        std::vector<double> s(static_cast<size_t>(i - j0 + 1));
        double delta = 0;
        for (int64_t j = j0; j <= i; ++j) {
          const int64_t ko = ((b * S + j) * Hkv + hk) * D;
          double dot = 0, dot_abs = 0;
          for (int64_t d = 0; d < D; ++d) dot += qd[qo + d] * kd[ko + d], dot_abs += std::fabs(qd[qo + d] * kd[ko + d]);
          s[j - j0] = dot * scale;
          delta = std::max(delta, dot_g * dot_abs * scale);
        }
        const double mx = *std::max_element(s.begin(), s.end()), spread = mx - *std::min_element(s.begin(), s.end());
        // One weight's relative error (see the top), then the numerator's and denominator's.
        const double eta = std::exp(2 * delta + 0x1p-24 * 2 * (spread + 2 * delta)) *
                               std::pow(1 + 0x1p-22, tiles + 1) * std::pow(1 + 0x1p-24, tiles) - 1;
        const double num = (1 + eta) * (1 + kBf16Unit) * (1 + gamma(n + 16 * tiles + 2, kTruncUnit)) - 1;
        const double den = (1 + eta) * (1 + gamma(17 * tiles + 2)) - 1;
        double wsum = 0;
        for (double sj : s) wsum += std::exp(sj - mx);
        for (int64_t d = 0; d < D; ++d) {
          double a = 0;  // sum p_j |v_jd|
          for (int64_t j = j0; j <= i; ++j)
            a += std::exp(s[j - j0] - mx) / wsum * std::fabs(vd[((b * S + j) * Hkv + hk) * D + d]);
          const double od = std::fabs(o_ref[qo + d]);
          o_b[qo + d] = (num * a + den * od) / (1 - den) + gamma(2) * (od + a);
        }
        const double l = lse_ref[(b * Hq + h) * S + i];
        lse_b[(b * Hq + h) * S + i] = delta - std::log1p(-den) + 0x1p-22 * (std::fabs(l - mx) + 1) +
                                      0x1p-23 * std::fabs(l);
      }
  char what[96];
  std::snprintf(what, sizeof what, "B%lld S%lld H%lld/%lld D%lld window %lld%s", static_cast<long long>(B),
                static_cast<long long>(S), static_cast<long long>(Hq), static_cast<long long>(Hkv),
                static_cast<long long>(D), static_cast<long long>(window), documents ? " documents" : "");
  test::expect_within(o, o_ref, o_b, (std::string(what) + " o").c_str());
  test::expect_within(lse, lse_ref, lse_b, (std::string(what) + " lse").c_str());
}

}  // namespace lt::test
