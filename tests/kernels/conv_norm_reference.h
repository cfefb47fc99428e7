// Float64 references and derived fp32 bounds for the Gated DeltaNet's causal conv1d + SiLU
// (kernels/cpu/causal_conv1d.h) and gated RMSNorm (kernels/cpu/gated_rmsnorm.h), written
// from their definitions. u = 2^-24. The kernels' SiLU/sigmoid use exp_approx (within 4u,
// kernels/cpu/vec_math.h): sigma = 1/(1 + e^-a) is then within 6u relative, silu within 7u.
//
// conv: a = sum_j w x (K terms): |da| <= (K+1) u sum|w x|; y = silu(a):
//   |dy| <= |silu'(a)| |da| + 8u |y|.
// conv backward (pre-activation recomputed): gd = dy silu'(a), silu'(a) = s (1 + a (1 - s)),
//   with |silu''| <= 1/2 and s within 6u, (1 - s) within 6u absolute:
//   |d gd| <= |dy| (|da| / 2 + 6u s (1 + |a|) + 3u (1 + |a (1 - s)|) + 3u |silu'(a)|);
//   dx = sum over <= K taps of w gd: (K+1) u sum|w gd| + sum|w| |d gd|;
//   dw += sum over B*S tokens of gd x: (B S + 2) u (sum|gd x| + |dw_old|) + sum|x| |d gd|.
// norm (as kernels/cpu/rmsnorm.h derives, plus the gate): rstd within (D/2 + 4) u relative;
//   y = w x r silu(z): (D/2 + 14) u |y|.
// norm backward, given the kernel's own rstd on both sides (only its sums and the gate
//   count): dn = dy w silu(z) within 10u relative; dx = r dn - r^3 x dot / D, dot a D-term
//   sum: (D + 14) u (|r dn| + r^3 |x| sum|dn x| / D); dz = dy w n silu'(z): the silu'
//   error above (with |da| = 0) times |dy w n|, plus 4u |dz|; dw += sum over T tokens of
//   dy n silu(z): (T + 12) u (sum|dy n silu(z)| + |dw_old|).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/causal_conv1d.h"
#include "kernels/kernel_test_util.h"

namespace lt::test::convnorm {

using Vec = std::vector<double>;
constexpr double kU = 0x1p-24;

inline double sigmoid(double a) { return 1 / (1 + std::exp(-a)); }
inline double silu(double a) { return a * sigmoid(a); }
inline double silu_grad(double a) {
  const double s = sigmoid(a);
  return s * (1 + a * (1 - s));
}
// The error bound of the kernel's silu'(a) at an exactly known a.
inline double silu_grad_err(double a) {
  const double s = sigmoid(a);
  return 6 * kU * s * (1 + std::fabs(a)) + 3 * kU * (1 + std::fabs(a * (1 - s))) +
         3 * kU * std::fabs(silu_grad(a));
}

struct Conv {
  Vec y, dx, dw, by, bdx, bdw;  // results and bounds
};

// x, dy [B,S,C]; w [C,K]; dw_old [C,K] (the kernel accumulates into it).
inline Conv conv_reference(const Vec& x, const Vec& w, const Vec& dy, const Vec& dw_old, int64_t B,
                           int64_t S, int64_t C, int64_t K) {
  Conv r;
  r.y.assign(x.size(), 0.0);
  r.by.assign(x.size(), 0.0);
  r.dx.assign(x.size(), 0.0);
  r.bdx.assign(x.size(), 0.0);
  r.dw = dw_old;
  r.bdw.assign(dw_old.size(), 0.0);
  Vec gd(x.size()), egd(x.size()), dw_abs(dw_old.size(), 0.0), dw_prop(dw_old.size(), 0.0);
  auto X = [&](int64_t b, int64_t t, int64_t c) { return t < 0 ? 0.0 : x[size_t((b * S + t) * C + c)]; };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < S; ++t)
      for (int64_t c = 0; c < C; ++c) {
        double a = 0, aa = 0;
        for (int64_t j = 0; j < K; ++j) {
          a += w[size_t(c * K + j)] * X(b, t - (K - 1) + j, c);
          aa += std::fabs(w[size_t(c * K + j)] * X(b, t - (K - 1) + j, c));
        }
        const size_t i = size_t((b * S + t) * C + c);
        const double da = (K + 1) * kU * aa;
        r.y[i] = silu(a);
        r.by[i] = std::fabs(silu_grad(a)) * da + 8 * kU * std::fabs(r.y[i]) + 1e-300;
        gd[i] = dy[i] * silu_grad(a);
        egd[i] = std::fabs(dy[i]) * (da / 2 + silu_grad_err(a));
      }
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < S; ++t)
      for (int64_t c = 0; c < C; ++c) {
        const size_t i = size_t((b * S + t) * C + c);
        for (int64_t j = 0; j < K; ++j) {
          const int64_t src = t - (K - 1) + j;
          if (src < 0) continue;
          const size_t si = size_t((b * S + src) * C + c), wi = size_t(c * K + j);
          r.dx[si] += w[wi] * gd[i];
          r.bdx[si] += (K + 1) * kU * std::fabs(w[wi] * gd[i]) + std::fabs(w[wi]) * egd[i];
          r.dw[wi] += gd[i] * x[si];
          dw_abs[wi] += std::fabs(gd[i] * x[si]);
          dw_prop[wi] += std::fabs(x[si]) * egd[i];
        }
      }
  for (auto& e : r.bdx) e += 1e-300;
  for (size_t wi = 0; wi < r.dw.size(); ++wi)
    r.bdw[wi] = (B * S + 2) * kU * (dw_abs[wi] + std::fabs(dw_old[wi])) + dw_prop[wi] + 1e-300;
  return r;
}

struct Norm {
  Vec y, rstd, dx, dz, dw, by, brstd, bdx, bdz, bdw;
};

// x, z, dy [T,D]; w, dw_old [D]. rstd_used: the rstd the backward is given (the kernel's).
inline Norm norm_reference(const Vec& x, const Vec& z, const Vec& w, const Vec& dy, const Vec& dw_old,
                           const Vec& rstd_used, int64_t T, int64_t D, double eps) {
  Norm r;
  r.y.assign(x.size(), 0.0);
  r.by = r.dx = r.bdx = r.dz = r.bdz = r.y;
  r.rstd.assign(size_t(T), 0.0);
  r.brstd = r.rstd;
  r.dw = dw_old;
  Vec dw_abs(size_t(D), 0.0);
  for (int64_t t = 0; t < T; ++t) {
    double ss = 0;
    for (int64_t d = 0; d < D; ++d) ss += x[size_t(t * D + d)] * x[size_t(t * D + d)];
    const double rs = 1 / std::sqrt(ss / D + eps);
    r.rstd[size_t(t)] = rs;
    r.brstd[size_t(t)] = (D / 2.0 + 4) * kU * rs;
    const double ru = rstd_used[size_t(t)];
    double dot = 0, adot = 0;
    for (int64_t d = 0; d < D; ++d) {
      const size_t i = size_t(t * D + d);
      r.y[i] = w[size_t(d)] * x[i] * rs * silu(z[i]);
      r.by[i] = (D / 2.0 + 14) * kU * std::fabs(r.y[i]) + 1e-300;
      const double dn = dy[i] * w[size_t(d)] * silu(z[i]);
      dot += dn * x[i];
      adot += std::fabs(dn * x[i]);
      const double n = x[i] * ru;
      r.dz[i] = dy[i] * w[size_t(d)] * n * silu_grad(z[i]);
      r.bdz[i] = std::fabs(dy[i] * w[size_t(d)] * n) * silu_grad_err(z[i]) + 4 * kU * std::fabs(r.dz[i]) + 1e-300;
      r.dw[size_t(d)] += dy[i] * n * silu(z[i]);
      dw_abs[size_t(d)] += std::fabs(dy[i] * n * silu(z[i]));
    }
    for (int64_t d = 0; d < D; ++d) {
      const size_t i = size_t(t * D + d);
      const double dn = dy[i] * w[size_t(d)] * silu(z[i]);
      r.dx[i] = ru * dn - ru * ru * ru * x[i] * dot / D;
      r.bdx[i] = (D + 14) * kU * (std::fabs(ru * dn) + ru * ru * ru * std::fabs(x[i]) * adot / D) + 1e-300;
    }
  }
  r.bdw.assign(size_t(D), 0.0);
  for (int64_t d = 0; d < D; ++d)
    r.bdw[size_t(d)] = (T + 12) * kU * (dw_abs[size_t(d)] + std::fabs(dw_old[size_t(d)])) + 1e-300;
  return r;
}

// Random inputs for the conv: x [B,S,C] in [-3, 3] (past SiLU's bend), w, dy and the
// accumulated-into dw_old [C,K] in [-1, 1].
struct ConvData {
  std::vector<float> x, w, dy, dw0;
};
inline ConvData conv_data(const CausalConvShape& s, uint64_t seed) {
  const size_t n = size_t(s.batch * s.seq * s.channels), nw = size_t(s.channels * s.kernel);
  return {test::random_floats(n, seed, -3, 3), test::random_floats(nw, seed + 1),
          test::random_floats(n, seed + 2), test::random_floats(nw, seed + 3)};
}

// Random inputs for the norm: x [T,D] in [-2, 2], the gate z in [-4, 4], w [D] in
// [0.5, 1.5], dy in [-1, 1], the accumulated-into dw_old [D] in [-1, 1].
struct NormData {
  std::vector<float> x, z, w, dy, dw0;
};
inline NormData norm_data(int64_t T, int64_t D, uint64_t seed) {
  const size_t n = size_t(T * D);
  return {test::random_floats(n, seed, -2, 2), test::random_floats(n, seed + 1, -4, 4),
          test::random_floats(size_t(D), seed + 2, 0.5f, 1.5f), test::random_floats(n, seed + 3),
          test::random_floats(size_t(D), seed + 4)};
}

}  // namespace lt::test::convnorm
