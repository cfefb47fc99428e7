// The tensor-core attention (kernels/cuda/attention_tc_cuda.h), forward and backward, against float64,
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
// The backward is given o and lse from the float64 forward (rounded to fp32), as is the
// reference, and dO rounded like q, k, v:
//  - p = exp(score - lse) moves by the score's error, expf's 2 ulp and the subtraction;
//  - dp = dO . v within gamma(DP + 2) (tensor cores, as the score); delta = sum bf16(dO) o
//    within gamma(D + 6) (a lane's fmas, then 5 shuffle levels);
//  - ds = p (dp - delta) carries those, and dq, dk (times scale) and dv sum ds or p,
//    rounded to bf16 (2^-8), times exact bf16 rows in fp32: gamma of the products summed
//    (64 per key or query tile the sum walks, over the group's heads for dk and dv).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
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

inline std::string case_name(const TcCase& c) {
  char what[96];
  std::snprintf(what, sizeof what, "B%lld S%lld H%lld/%lld D%lld window %lld%s", static_cast<long long>(c.B),
                static_cast<long long>(c.S), static_cast<long long>(c.Hq), static_cast<long long>(c.Hkv),
                static_cast<long long>(c.D), static_cast<long long>(c.window), c.documents ? " documents" : "");
  return what;
}

// Documents of 37, 5 and 55 tokens, restarting every 97: some span tiles, some share one
// (empty without documents).
inline std::vector<int32_t> doc_starts(const TcCase& c) {
  std::vector<int32_t> doc;
  if (c.documents)
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t i = 0; i < c.S; ++i) {
        const int64_t r = i % 97, start = i - r + (r < 37 ? 0 : r < 42 ? 37 : 42);
        doc.push_back(static_cast<int32_t>(start));
      }
  return doc;
}

// The scale every run of a case uses: 1 / sqrt(D).
inline float case_scale(const TcCase& c) { return 1.0f / std::sqrt(static_cast<float>(c.D)); }

// q, k and v of a case, seeded: scores of a few units (the spread the bounds carry), values
// around 1.
struct QkvInputs {
  std::vector<float> q, k, v;
};
inline QkvInputs make_qkv(const TcCase& c, uint64_t seed) {
  return {normal_floats(c.B * c.S * c.Hq * c.D, 1.5f, seed), normal_floats(c.B * c.S * c.Hkv * c.D, 1.5f, seed + 1),
          normal_floats(c.B * c.S * c.Hkv * c.D, 1.0f, seed + 2, 0.25f)};
}

inline int64_t padded_head_dim(int64_t D) { return D <= 64 ? 64 : D <= 128 ? 128 : 256; }

// run(o, lse, q, k, v, doc_start or nullptr, c) fills o and lse (host vectors, sized).
template <class Run>
void check_forward(const TcCase& c, Run run) {
  const int64_t B = c.B, S = c.S, Hq = c.Hq, Hkv = c.Hkv, D = c.D, window = c.window;
  const float scale = case_scale(c);
  const auto [q, k, v] = make_qkv(c, 61);
  const std::vector<int32_t> doc = doc_starts(c);
  const int32_t* dh = c.documents ? doc.data() : nullptr;
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
  const std::string what = case_name(c);
  test::expect_within(o, o_ref, o_b, (what + " o").c_str());
  test::expect_within(lse, lse_ref, lse_b, (what + " lse").c_str());
}

// A backward case's inputs: q, k, v, dO, the documents, and o and lse of the exact forward
// on the bf16-rounded inputs (as fp32: the kernel and the reference both get them).
struct BackwardInputs {
  std::vector<float> q, k, v, dout;
  std::vector<int32_t> doc;
  std::vector<double> qd, kd, vd, dod;  // q, k, v, dO rounded to bf16
  std::vector<float> o, lse;
  const int32_t* doc_start() const { return doc.empty() ? nullptr : doc.data(); }
};
inline BackwardInputs backward_inputs(const TcCase& c) {
  BackwardInputs in;
  QkvInputs qkv = make_qkv(c, 71);
  in.q = std::move(qkv.q), in.k = std::move(qkv.k), in.v = std::move(qkv.v);
  in.dout = test::normal_floats(c.B * c.S * c.Hq * c.D, 1.0f, 74);
  in.doc = doc_starts(c);
  in.qd = rounded_to_bf16(in.q), in.kd = rounded_to_bf16(in.k), in.vd = rounded_to_bf16(in.v);
  in.dod = rounded_to_bf16(in.dout);
  std::vector<double> o64(in.q.size()), lse64(static_cast<size_t>(c.B * c.Hq * c.S));
  ref::attention_forward<double>(o64.data(), lse64.data(), in.qd.data(), in.kd.data(), in.vd.data(), c.B, c.S, c.Hq,
                                 c.Hkv, c.D, static_cast<double>(case_scale(c)), in.doc_start(), c.window);
  in.o.assign(o64.begin(), o64.end());
  in.lse.assign(lse64.begin(), lse64.end());
  return in;
}

// run(dq, dk, dv, dout, q, k, v, o, lse, doc_start or nullptr, c) fills dq, dk, dv (host
// vectors, sized).
template <class Run>
void check_backward(const TcCase& c, Run run) {
  const int64_t B = c.B, S = c.S, Hq = c.Hq, Hkv = c.Hkv, D = c.D, window = c.window;
  const float scale = case_scale(c);
  const BackwardInputs in = backward_inputs(c);
  const std::vector<float>&q = in.q, &k = in.k, &v = in.v, &dout = in.dout, &o = in.o, &lse = in.lse;
  const std::vector<double>&qd = in.qd, &kd = in.kd, &vd = in.vd, &dod = in.dod;
  const int32_t* dh = in.doc_start();
  std::vector<float> dq(q.size()), dk(k.size()), dv(v.size()), dq2(q.size()), dk2(k.size()), dv2(v.size());
  run(dq, dk, dv, dout, q, k, v, o, lse, dh, c);
  run(dq2, dk2, dv2, dout, q, k, v, o, lse, dh, c);
  EXPECT_TRUE(dq2 == dq && dk2 == dk && dv2 == dv) << "two runs differ";

  const std::vector<double> od = widen(o), lsed = widen(lse);
  std::vector<double> dq_ref(q.size()), dk_ref(k.size()), dv_ref(v.size());
  ref::attention_backward<double>(dq_ref.data(), dk_ref.data(), dv_ref.data(), dod.data(), qd.data(), kd.data(),
                                  vd.data(), od.data(), lsed.data(), B, S, Hq, Hkv, D, static_cast<double>(scale), dh,
                                  window);

  const int64_t group = Hq / Hkv;
  const double tiles = static_cast<double>((S + kKeyTile - 1) / kKeyTile);
  const double dot_g = gamma(static_cast<double>(padded_head_dim(D)) + 2, kTruncUnit);
  const double dq_sum_g = gamma(64 * tiles + 2, kTruncUnit), dkv_sum_g = gamma(64 * tiles * group + 2, kTruncUnit);
  std::vector<double> dq_b(q.size()), dk_b(k.size()), dv_b(v.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < S; ++i) {
        const int64_t hk = h / group, qo = ((b * S + i) * Hq + h) * D, j0 = ref::first_key(dh, window, b, S, i);
        double delta = 0, delta_abs = 0;
        for (int64_t d = 0; d < D; ++d)
          delta += dod[qo + d] * od[qo + d], delta_abs += std::fabs(dod[qo + d] * od[qo + d]);
        const double delta_err = gamma(static_cast<double>(D) + 6) * delta_abs;
        const double l = lsed[(b * Hq + h) * S + i];
        for (int64_t j = j0; j <= i; ++j) {
          const int64_t ko = ((b * S + j) * Hkv + hk) * D;
          double sc = 0, sa = 0, dp = 0, dpa = 0;
          for (int64_t d = 0; d < D; ++d) {
            sc += qd[qo + d] * kd[ko + d], sa += std::fabs(qd[qo + d] * kd[ko + d]);
            dp += dod[qo + d] * vd[ko + d], dpa += std::fabs(dod[qo + d] * vd[ko + d]);
          }
          const double x = sc * scale - l, p = std::exp(x);
          const double p_err =
              p * (std::exp(dot_g * sa * scale + 0x1p-24 * (std::fabs(x) + std::fabs(sc * scale))) * (1 + 0x1p-22) - 1);
          const double gap = std::fabs(dp - delta), gap_err = dot_g * dpa + delta_err;
          const double ds = p * (dp - delta);
          const double ds_err = p_err * gap + (p + p_err) * gap_err + gamma(2) * (p + p_err) * (gap + gap_err);
          // The rounded factor's error and size (bf16 of ds or p).
          const double ds_r_err = ds_err + kBf16Unit * (std::fabs(ds) + ds_err), ds_r = std::fabs(ds) + ds_r_err;
          const double p_r_err = p_err + kBf16Unit * (p + p_err), p_r = p + p_r_err;
          for (int64_t d = 0; d < D; ++d) {
            dq_b[qo + d] += scale * (ds_r_err + dq_sum_g * ds_r) * std::fabs(kd[ko + d]);
            dk_b[ko + d] += scale * (ds_r_err + dkv_sum_g * ds_r) * std::fabs(qd[qo + d]);
            dv_b[ko + d] += (p_r_err + dkv_sum_g * p_r) * std::fabs(dod[qo + d]);
          }
        }
      }
  // The final product by scale (dq, dk): one rounding.
  for (size_t i = 0; i < dq_b.size(); ++i) dq_b[i] += 0x1p-24 * std::fabs(dq_ref[i]) * 1.01;
  for (size_t i = 0; i < dk_b.size(); ++i) dk_b[i] += 0x1p-24 * std::fabs(dk_ref[i]) * 1.01;
  const std::string what = "backward " + case_name(c);
  test::expect_within(dq, dq_ref, dq_b, (what + " dq").c_str());
  test::expect_within(dk, dk_ref, dk_b, (what + " dk").c_str());
  test::expect_within(dv, dv_ref, dv_b, (what + " dv").c_str());
}

// The backward in column passes (kernels/cuda/attention_tc_backward.cuh; what a GPU with
// less shared memory a block runs at D above 128) must give the bits of the whole-D kernels:
// run(column_passes, dq, dk, dv, dout, q, k, v, o, lse, doc_start or nullptr, c).
template <class Run>
void check_column_passes_give_the_same_bits(const TcCase& c, Run run) {
  const BackwardInputs in = backward_inputs(c);
  std::vector<float> whole[3], passes[3];
  for (auto* out : {whole, passes})
    for (int i = 0; i < 3; ++i) out[i].resize(i == 0 ? in.q.size() : in.k.size());
  run(false, whole[0], whole[1], whole[2], in.dout, in.q, in.k, in.v, in.o, in.lse, in.doc_start(), c);
  run(true, passes[0], passes[1], passes[2], in.dout, in.q, in.k, in.v, in.o, in.lse, in.doc_start(), c);
  const char* names[3] = {"dq", "dk", "dv"};
  for (int i = 0; i < 3; ++i) {
    size_t differ = 0, nonzero = 0;
    for (size_t j = 0; j < whole[i].size(); ++j) {
      differ += std::memcmp(&whole[i][j], &passes[i][j], sizeof(float)) != 0;
      nonzero += whole[i][j] != 0.f;
    }
    std::printf("  column passes %s %s: %zu of %zu values differ in their bits (%zu nonzero)\n",
                case_name(c).c_str(), names[i], differ, whole[i].size(), nonzero);
    EXPECT_EQ(differ, 0u) << case_name(c) << " " << names[i];
    EXPECT_GT(nonzero, whole[i].size() / 2) << case_name(c) << " " << names[i] << ": the gradients were not written";
  }
}

}  // namespace lt::test
