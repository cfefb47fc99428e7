// The fused head + cross-entropy's test problems and derived fp32 error bounds, shared by
// tests/kernels/cross_entropy_test.cpp and the backend-ops cases
// (tests/exec/backend_ops_mixers_test.cpp).
//
// Error bounds (u = fp32 unit roundoff; "sum of n terms within n u sum|terms|"):
//   logits: E_t = (C + 2) u max_v sum_c |x_tc w_vc| bounds every logit's error in row t.
//   lse: 1-Lipschitz in the logits (max norm), so E_t from them; the sum of V exps (each
//     within 4u, exp_approx's 2 ulp) adds V u relative, the online rescaling 4u per
//     vocabulary chunk, the log and add ~4u:  d_lse <= E_t + (V + 4 n_vc + 8) u.
//   loss_t = lse - logit_target: d <= 2 E_t + (V + 4 n_vc + 8) u + 2u (|lse| + |target|).
//   p_tv = exp(l - lse): relative error rho_t = 2 E_t + (V + 4 n_vc + 16) u; under BF16 the
//     dlogits are rounded to bf16 before the backward matmuls: + u_bf16.
//   dx_tc = gs sum_v g_tv w_vc with |g_tv| <= p_tv + [v = target]:
//     d <= gs (rho_t + (V + n_vc + 2) u) sum_v (p_tv + [v = target]) |w_vc|.
//   dw_vc += gs sum_t g_tv x_tc: d <= gs sum_t (rho_t + (T + 2) u) (p_tv + [..]) |x_tc|
//     + (n_tc + 2) u |dw_old| (dw is rounded once per token chunk, with dw_old inside).
// Under BF16 the reference is given the bf16-rounded x and w, so the same bounds hold.
// The bounds count rounding per operation and hold in any summation order and with FMA
// contraction, so they hold at every ISA level.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "core/dtype.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/kernel_test_util.h"

namespace lt::test::xent {

struct Problem {
  int64_t T, C, V;
  std::vector<float> x, w, dw0;
  std::vector<int32_t> targets;
  float grad_scale = 0;
};

inline Problem make_problem(int64_t T, int64_t C, int64_t V, uint64_t seed, int ignore_every) {
  Problem pr{T, C, V, test::random_floats(static_cast<size_t>(T * C), seed, -2, 2),
             test::random_floats(static_cast<size_t>(V * C), seed + 1),
             test::random_floats(static_cast<size_t>(V * C), seed + 2), {}, 0};
  std::mt19937_64 rng(seed + 3);
  int64_t valid = 0;
  for (int64_t t = 0; t < T; ++t) {
    const bool ignore = ignore_every > 0 && t % ignore_every == 1;
    pr.targets.push_back(ignore ? kIgnoreIndex : int32_t(rng() % uint64_t(V)));
    valid += !ignore;
  }
  pr.grad_scale = valid ? 1.0f / float(valid) : 1.0f;
  return pr;
}

struct Expected {
  double loss = 0, loss_bound = 0;
  std::vector<double> dx, dw, dx_bound, dw_bound;
};

// The exact answer (double reference on the values the fast path multiplies) and the
// bounds above for n_vc vocabulary chunks.
inline Expected expected(const Problem& pr, bool bf, int64_t n_tc, int64_t n_vc) {
  const auto [T, C, V] = std::tuple{pr.T, pr.C, pr.V};
  auto x = test::to_double(bf ? test::round_bf16(pr.x) : pr.x);
  auto w = test::to_double(bf ? test::round_bf16(pr.w) : pr.w);
  Expected e;
  e.dx.resize(static_cast<size_t>(T * C));
  e.dw = test::to_double(pr.dw0);
  e.loss = ref::head_cross_entropy<double>(e.dx.data(), e.dw.data(), x.data(), w.data(),
                                           pr.targets.data(), T, C, V, double(pr.grad_scale));
  e.dx_bound.assign(e.dx.size(), 1e-30);
  e.dw_bound.resize(e.dw.size());
  for (size_t i = 0; i < e.dw.size(); ++i) e.dw_bound[i] = (n_tc + 2) * kU32 * std::fabs(pr.dw0[i]) + 1e-30;
  const double gs = pr.grad_scale;
  std::vector<double> l(static_cast<size_t>(V));
  for (int64_t t = 0; t < T; ++t) {
    const int32_t tg = pr.targets[size_t(t)];
    if (tg == kIgnoreIndex) continue;
    double et = 0, mx = -INFINITY;
    for (int64_t v = 0; v < V; ++v) {
      double s = 0, a = 0;
      for (int64_t c = 0; c < C; ++c) {
        s += x[size_t(t * C + c)] * w[size_t(v * C + c)];
        a += std::fabs(x[size_t(t * C + c)] * w[size_t(v * C + c)]);
      }
      l[size_t(v)] = s;
      et = std::max(et, a);
      mx = std::max(mx, s);
    }
    et *= (C + 2) * kU32;
    double sum = 0;
    for (double li : l) sum += std::exp(li - mx);
    const double lse = mx + std::log(sum);
    e.loss_bound += 2 * et + (V + 4 * n_vc + 8) * kU32 +
                    2 * kU32 * (std::fabs(lse) + std::fabs(l[size_t(tg)]));
    const double rho = 2 * et + (V + 4 * n_vc + 16) * kU32 + (bf ? test::kUBf16 : 0.0);
    for (int64_t v = 0; v < V; ++v) {
      const double g = std::exp(l[size_t(v)] - lse) + (v == tg ? 1.0 : 0.0);
      for (int64_t c = 0; c < C; ++c) {
        e.dx_bound[size_t(t * C + c)] +=
            gs * (rho + (V + n_vc + 2) * kU32) * g * std::fabs(w[size_t(v * C + c)]);
        e.dw_bound[size_t(v * C + c)] +=
            gs * (rho + (T + 2) * kU32) * g * std::fabs(x[size_t(t * C + c)]);
      }
    }
  }
  return e;
}

// The number of token and vocabulary chunks the fast path uses.
inline std::pair<int64_t, int64_t> chunk_counts(const Problem& pr, int64_t bytes, Precision p,
                                         int64_t vocab_chunk = kCrossEntropyVocabChunk) {
  const auto ch = cross_entropy_chunks(pr.T, pr.V, CrossEntropyOptions{bytes, vocab_chunk}, p);
  // Per token: fp32 logits (the whole vocabulary's when kept) and under BF16 one
  // sub-chunk's bf16 gradient.
  const int64_t grad = p == Precision::BF16 ? 2 : 0;
  const int64_t per_token = ch.keep_logits ? 4 * pr.V + grad * ch.vocab_chunk : (4 + grad) * ch.vocab_chunk;
  EXPECT_LE(ch.token_chunk * per_token, bytes);
  return {(pr.T + ch.token_chunk - 1) / ch.token_chunk,
          (pr.V + ch.vocab_chunk - 1) / ch.vocab_chunk};
}

}  // namespace lt::test::xent
