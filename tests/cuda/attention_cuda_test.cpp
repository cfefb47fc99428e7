// The GPU's attention against float64 (kernels/cpu/attention.h's ref:: loops run in
// double) on the same fp32 inputs, causal, windowed, and with packed documents, under
// grouped-query heads. The backward is given the GPU forward's o and lse, as the
// reference is, so each side's error is its own arithmetic. Bounds carry that error
// through: a score is a D-long fp32 dot (plus the warp's 5 shuffle levels) within gamma
// of sum |q k|; a probability moves relatively by the score's error plus expf's 2 ulp and,
// in the forward's online softmax, by one rescale (an exp and a product) per key; the
// outputs are sums of those probabilities times exact rows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "cuda_test_util.h"
#include "kernels/cpu/attention.h"
#include "kernels/cuda/attention_cuda.h"

namespace lt {
namespace {

using cuda::DeviceBuffer;
using cuda::to_device;
using cuda::to_host;
using test::gamma;

struct AttnCase {
  int64_t B, S, Hq, Hkv, D;
  int64_t window;
  bool documents;
};

void check_attention(const AttnCase& c) {
  const auto [B, S, Hq, Hkv, D, window, documents] = c;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const std::vector<float> q = test::normal_floats(B * S * Hq * D, 1.0f, 51), k = test::normal_floats(B * S * Hkv * D, 1.0f, 52),
                           v = test::normal_floats(B * S * Hkv * D, 1.0f, 53), dout = test::normal_floats(B * S * Hq * D, 1.0f, 54);
  std::vector<int32_t> doc;
  if (documents)  // each row: documents of lengths 7, 1, 13, ... restarting every 21 tokens
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < S; ++i) {
        const int64_t r = i % 21, start = i - r + (r < 7 ? 0 : r < 8 ? 7 : 8);
        doc.push_back(static_cast<int32_t>(start));
      }
  const int32_t* dh = documents ? doc.data() : nullptr;
  DeviceBuffer dq_in = to_device(q), dk_in = to_device(k), dv_in = to_device(v), ddo = to_device(dout);
  DeviceBuffer ddoc = documents ? to_device(doc) : DeviceBuffer();
  DeviceBuffer d_o(q.size() * 4), d_lse(B * Hq * S * 4), d_dq(q.size() * 4), d_dk(k.size() * 4), d_dv(v.size() * 4);
  const int32_t* dd = documents ? ddoc.as<int32_t>() : nullptr;
  cuda::attention_forward(d_o.as<float>(), d_lse.as<float>(), dq_in.as<float>(), dk_in.as<float>(), dv_in.as<float>(), B,
                          S, Hq, Hkv, D, scale, dd, window);
  cuda::attention_backward(d_dq.as<float>(), d_dk.as<float>(), d_dv.as<float>(), ddo.as<float>(), dq_in.as<float>(),
                           dk_in.as<float>(), dv_in.as<float>(), d_o.as<float>(), d_lse.as<float>(), B, S, Hq, Hkv, D,
                           scale, dd, window);
  const std::vector<float> o = to_host<float>(d_o, q.size()), lse = to_host<float>(d_lse, B * Hq * S),
                           dq = to_host<float>(d_dq, q.size()), dk = to_host<float>(d_dk, k.size()),
                           dv = to_host<float>(d_dv, v.size());

  const std::vector<double> qd = test::widen(q), kd = test::widen(k), vd = test::widen(v), dod = test::widen(dout),
                            od = test::widen(o), lsed = test::widen(lse);
  std::vector<double> o_ref(q.size()), lse_ref(lse.size()), dq_ref(q.size()), dk_ref(k.size()), dv_ref(v.size());
  ref::attention_forward<double>(o_ref.data(), lse_ref.data(), qd.data(), kd.data(), vd.data(), B, S, Hq, Hkv, D, scale,
                                 dh, window);
  ref::attention_backward<double>(dq_ref.data(), dk_ref.data(), dv_ref.data(), dod.data(), qd.data(), kd.data(),
                                  vd.data(), od.data(), lsed.data(), B, S, Hq, Hkv, D, scale, dh, window);

  // Bounds, in double, following the same loops.
  const double dot_g = gamma(static_cast<double>(D) + 5 + 2);  // the dot, the shuffles, the scale
  std::vector<double> o_b(q.size(), 0.0), lse_b(lse.size()), dq_b(q.size(), 0.0), dk_b(k.size(), 0.0),
      dv_b(v.size(), 0.0);
  const int64_t group = Hq / Hkv;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < S; ++i) {
        const int64_t hk = h / group, qo = ((b * S + i) * Hq + h) * D, j0 = ref::first_key(dh, window, b, S, i);
        const double n = static_cast<double>(i - j0 + 1), l = lse_ref[(b * Hq + h) * S + i];
        double score_err = 0;
        for (int64_t j = j0; j <= i; ++j) {
          const int64_t ko = ((b * S + j) * Hkv + hk) * D;
          double sa = 0;
          for (int64_t d = 0; d < D; ++d) sa += std::fabs(qd[qo + d] * kd[ko + d]);
          score_err = std::max(score_err, dot_g * sa * scale);
        }
        const double soft = 2 * score_err + gamma(4 * n + 6);  // online softmax, then / sum
        lse_b[(b * Hq + h) * S + i] = score_err + gamma(4 * n + 4) + gamma(2) * std::fabs(l);
        double delta = 0, delta_abs = 0;
        for (int64_t d = 0; d < D; ++d) delta += dod[qo + d] * od[qo + d], delta_abs += std::fabs(dod[qo + d] * od[qo + d]);
        const double lg = lsed[(b * Hq + h) * S + i];
        for (int64_t j = j0; j <= i; ++j) {
          const int64_t ko = ((b * S + j) * Hkv + hk) * D;
          double s = 0, sa = 0, dp = 0, dpa = 0;
          for (int64_t d = 0; d < D; ++d) {
            s += qd[qo + d] * kd[ko + d], sa += std::fabs(qd[qo + d] * kd[ko + d]);
            dp += dod[qo + d] * vd[ko + d], dpa += std::fabs(dod[qo + d] * vd[ko + d]);
          }
          const double p_exact = std::exp(s * scale - l), p = std::exp(s * scale - lg);
          for (int64_t d = 0; d < D; ++d) o_b[qo + d] += soft * p_exact * std::fabs(vd[ko + d]) * 1.01;
          // Backward: p from the saved lse (score error, expf, the subtraction), dp and the
          // delta as dots, their difference and two products.
          const double p_err = p * (dot_g * sa * scale + gamma(3)) * 1.01;
          const double ds = p * (dp - delta);
          const double ds_err = p_err * std::fabs(dp - delta) + p * dot_g * (dpa + delta_abs) + gamma(3) * std::fabs(ds);
          for (int64_t d = 0; d < D; ++d) {
            dq_b[qo + d] += scale * (ds_err * std::fabs(kd[ko + d]) + gamma(n + 2) * std::fabs(ds * kd[ko + d]));
            dk_b[ko + d] += scale * (ds_err * std::fabs(qd[qo + d]) + gamma(static_cast<double>(S * group) + 2) *
                                                                            std::fabs(ds * qd[qo + d]));
            dv_b[ko + d] += p_err * std::fabs(dod[qo + d]) + gamma(static_cast<double>(S * group) + 1) * p * std::fabs(dod[qo + d]);
          }
        }
      }
  char what[96];
  std::snprintf(what, sizeof what, "B%lld S%lld H%lld/%lld D%lld window %lld%s", static_cast<long long>(B),
                static_cast<long long>(S), static_cast<long long>(Hq), static_cast<long long>(Hkv),
                static_cast<long long>(D), static_cast<long long>(window), documents ? " documents" : "");
  auto named = [&](const char* out) { return std::string(what) + " " + out; };
  test::expect_within(o, o_ref, o_b, named("o").c_str());
  test::expect_within(lse, lse_ref, lse_b, named("lse").c_str());
  test::expect_within(dq, dq_ref, dq_b, named("dq").c_str());
  test::expect_within(dk, dk_ref, dk_b, named("dk").c_str());
  test::expect_within(dv, dv_ref, dv_b, named("dv").c_str());
}

TEST(CudaKernels, AttentionMatchesFloat64) {
  LT_REQUIRE_CUDA_DEVICE();
  check_attention({2, 67, 4, 2, 64, 0, false});    // causal, GQA 2
  check_attention({1, 90, 6, 2, 128, 17, false});  // sliding window, GQA 3
  check_attention({2, 63, 4, 4, 80, 0, true});     // packed documents, D not a multiple of 32
  check_attention({1, 50, 8, 1, 256, 9, true});    // both, MQA, the largest head dim
}

}  // namespace
}  // namespace lt
