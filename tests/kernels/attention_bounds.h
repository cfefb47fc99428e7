// Causal GQA attention's test inputs and its derived fp32 error bounds (the derivation is
// in the comment above ErrorBounds), shared by tests/kernels/attention_test.cpp and the
// backend-ops cases (tests/exec/backend_ops_mixers_test.cpp).
#pragma once

#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/kernel_test_util.h"

namespace lt::test::attn {

struct Shape {
  int64_t B, S, Hq, Hkv, D;
  int64_t nq() const { return B * S * Hq * D; }
  int64_t nk() const { return B * S * Hkv * D; }
  int64_t nl() const { return B * Hq * S; }
  std::string str() const {
    std::ostringstream s;
    s << "B=" << B << " S=" << S << " Hq=" << Hq << " Hkv=" << Hkv << " D=" << D;
    return s.str();
  }
};

struct Inputs {
  std::vector<float> q, k, v, dout;
};
inline Inputs make_inputs(const Shape& s, uint64_t seed) {
  // |q|, |k| up to 2: scaled scores spread over several units, so the softmax is far from
  // uniform and the online max actually moves between key tiles.
  return {random_floats(static_cast<size_t>(s.nq()), seed, -2.0f, 2.0f),
          random_floats(static_cast<size_t>(s.nk()), seed + 1, -2.0f, 2.0f),
          random_floats(static_cast<size_t>(s.nk()), seed + 2),
          random_floats(static_cast<size_t>(s.nq()), seed + 3)};
}

// Per-element bounds on |fp32 kernel - exact|, from the standard model of rounding:
// a sum of n products in fp32, in any order, with or without FMA, is off by at most
// gamma_n * sum|terms|, gamma_n = n u / (1 - n u), u = 2^-24 (Higham, Accuracy and
// Stability, Thm 3.1). The chain through the kernel:
//   score   s_ij = scale q_i.k_j:       gamma_D * scale * sum_d |q k|, plus the exp2 domain
//           change (times scale*log2 e, minus the running max or lse*log2 e): 4u(|s|+|lse|)
//   exp2    Taylor remainder < 1e-8 (0.17u); Horner's rounding for |f| <= 1/2, with the
//           coefficients rounded to fp32: sum_k |f|^k (|q_k| + |f q_(k+1)|) u / 2^f <= 3u
//           without FMA (2.5u with), q_k the partial sums; the 2^n factor is exact: 4u
//   forward lse = log of a sum of S terms rescaled once per key tile (ntiles): relative
//           error of the sum: its S + ntiles additions and, per tile, the rescale's rounding
//           and its factor's exp2 (4u): gamma_(S + 6 ntiles); plus the terms' exp2 (4u)
//           and the largest score error; log2 and the final scale by ln2 a few u more;
//           o = sum_j p v / l adds gamma_S and the rescales once more: E_i below.
//   backward dp_ij = dO_i.v_j: gamma_D sum|dO v|; delta_i = dO_i.o_i: gamma_D sum|dO o|;
//           dS = p (dp - delta) scale: the error of p times |dp - delta| plus p times the
//           errors of dp and delta; dv, dk sum over n = group*S query rows (gamma_n), dq
//           over S keys (gamma_S).
// Tests allow 2x these first-order bounds for the second-order terms they drop.
struct ErrorBounds {
  std::vector<double> o, lse, dq, dk, dv;
};
// extra_tiles: key tiles the kernel's rows may span beyond ceil(S / 64) (a document packed
// at an offset into a row spans one more).
// doc_start, window: as attention.h; the sums run over the keys each query sees.
inline ErrorBounds error_bounds(const Shape& s, const Inputs& in, const std::vector<double>& o,
                         const std::vector<double>& lse, double scale, double extra_tiles = 0,
                         const int32_t* doc_start = nullptr, int64_t window = 0) {
  const double u = std::ldexp(1.0, -24);
  auto gamma = [&](double n) { return n * u / (1 - n * u); };
  const int64_t G = s.Hq / s.Hkv, D = s.D, S = s.S;
  const double ntiles = double((S + 63) / 64) + extra_tiles;
  ErrorBounds e{std::vector<double>(s.nq()), std::vector<double>(s.nl()),
                std::vector<double>(s.nq()), std::vector<double>(s.nk()),
                std::vector<double>(s.nk())};
  std::vector<double> p(S), ep(S), es(S), ds(S), eds(S);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.Hq; ++h) {
      const int64_t hk = h / G;
      for (int64_t i = 0; i < S; ++i) {
        const int64_t qo = ((b * S + i) * s.Hq + h) * D;
        const double l = lse[(b * s.Hq + h) * S + i];
        double delta = 0, delta_abs = 0;
        for (int64_t d = 0; d < D; ++d) {
          delta += double(in.dout[qo + d]) * o[qo + d];
          delta_abs += std::fabs(double(in.dout[qo + d]) * o[qo + d]);
        }
        double es_max = 0;
        const int64_t j0 = lt::ref::first_key(doc_start, window, b, S, i);
        for (int64_t j = j0; j <= i; ++j) {
          const int64_t ko = ((b * S + j) * s.Hkv + hk) * D;
          double sc = 0, sabs = 0, dp = 0, dpabs = 0;
          for (int64_t d = 0; d < D; ++d) {
            sc += double(in.q[qo + d]) * in.k[ko + d];
            sabs += std::fabs(double(in.q[qo + d]) * in.k[ko + d]);
            dp += double(in.dout[qo + d]) * in.v[ko + d];
            dpabs += std::fabs(double(in.dout[qo + d]) * in.v[ko + d]);
          }
          sc *= scale;
          p[j] = std::exp(sc - l);
          es[j] = gamma(D) * scale * sabs + 4 * u * (std::fabs(sc) + std::fabs(l));
          es_max = std::max(es_max, es[j]);
          ep[j] = p[j] * (es[j] + 4 * u);
          const double g = dp - delta;
          ds[j] = p[j] * g * scale;
          eds[j] = scale * (ep[j] * std::fabs(g) +
                            p[j] * (gamma(D) * (dpabs + delta_abs) + 2 * u * std::fabs(g)));
        }
        const double E = es_max + 2 * gamma(S + 6 * ntiles) + 10 * u;
        e.lse[(b * s.Hq + h) * S + i] = E + u * std::fabs(l);
        for (int64_t j = j0; j <= i; ++j) {
          const int64_t ko = ((b * S + j) * s.Hkv + hk) * D;
          for (int64_t d = 0; d < D; ++d) {
            e.o[qo + d] += p[j] * std::fabs(in.v[ko + d]) * (es[j] + E);
            e.dv[ko + d] += (ep[j] + gamma(G * S) * p[j]) * std::fabs(in.dout[qo + d]);
            e.dk[ko + d] += (eds[j] + gamma(G * S) * std::fabs(ds[j])) * std::fabs(in.q[qo + d]);
            e.dq[qo + d] += (eds[j] + gamma(S) * std::fabs(ds[j])) * std::fabs(in.k[ko + d]);
          }
        }
      }
    }
  return e;
}

}  // namespace lt::test::attn
