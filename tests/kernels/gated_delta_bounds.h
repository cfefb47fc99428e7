// Derived fp32 error bounds for the chunked gated delta rule kernel against the exact
// recurrence (tests/kernels/gated_delta_reference.h), computed in float64 from the exact
// values. u = 2^-24; n is the chunk's length; |.| is entrywise.
//
// Forward (first order in u, componentwise), chunk by chunk from the exact start state S0:
//  - normalized rows qc, kc: each element within eq = (dk/2 + 8) u relative (a dk-term sum
//    of squares, then eps add, sqrt, divide, scale);
//  - G_r: the bound is that of a float cumulative sum, |dG_r| <= (r + 1) u sum_{t<=r} |g_t|;
//    a decay exp(G_r - G_s) is then within dG_r + dG_s + u |G_r - G_s| + 5u relative
//    (exp_approx within 4u, vec_math.h). The kernel sums in double and keeps G as hi + lo
//    floats (its LogDecay), which is far more accurate; the looser bound is kept;
//  - P, KKD (dk-term dots times a decay), the reads y = S0^T kc_r, S0^T qc_r (dk-term
//    sums): the usual (dk + 1) u sum|terms| plus the relative errors of their factors;
//  - Delta, the forward substitution (I + L) Delta = R: the computed one solves
//    (I + L + F) Delta' = R + f with |F| <= (n+2) u |L|, |f| <= (n+2) u |R| (Higham,
//    Accuracy and Stability, Thm 8.5 applied with computed L and R), so
//    |dDelta| <= |T| (|dR| + (n+2) u |R| + (|dL| + (n+2) u |L|) |Delta|), T = (I + L)^-1
//    (computed here explicitly, in double);
//  - o_r = e_r S0^T qc_r + sum_s P[r,s] Delta_s and S1 = E S0 + sum_r w_r kc_r Delta_r^T:
//    the errors of their factors plus (n+2) u times the sum of |terms|.
// Errors carried in from earlier chunks: the exact map from a chunk's start state to
// later states and outputs is S -> A_t ... A_1 S with A = e^g (I - beta k k^T), and
// ||A||_2 <= 1 since g <= 0, 0 <= beta <= 1, |k| <= 1: a start-state error dS0 moves a
// later state by at most ||dS0||_F and an output row o_r by at most |qc_r| ||dS0||_F.
// So the state error eS after each chunk is bounded by eS (before) + ||local dS1||_F,
// and each output element by its local bound + |qc_r| eS. Every element of the final
// state is within eS. The bounds are first order; x2 covers the second-order terms, which
// are below (K u)^2 relative with K u < 1e-3 for the shapes tested.
//
// Backward (normwise, looser): the backward is the transpose of the same chunk algebra
// (T^T solved by back substitution, the same products), with the state's adjoint carried
// back through the transposed, equally contractive maps. Each gradient element is a sum
// over chunks of chunk-local terms, each computed within K_b u (1 + tau) of its terms'
// magnitudes, K_b = dk + dv + 2n + 16 (the longest chain of sums: the dk/dv dots, the
// n-term pair sums and substitution, and the few products around them), tau = the largest
// row sum of |T| (the substitution's amplification). The magnitudes of the terms are
// bounded by the reference gradients' largest magnitudes per tensor plus the same for
// the other gradients they mix with (dg and dbeta cancel in pairs: their terms are of the
// size of |dq| |q| and |dv| |v| elementwise), so the bound per tensor X is
//   2 K_b u (1 + tau) NC (max|X_ref| + M),  M = max|dq_ref| max|q_raw| + max|dk_ref| max|k_raw|
//                                                + max|dv_ref| max|v|,
// NC the number of chunks (each adds its own rounding to the carried adjoint).
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/gated_delta_reference.h"

namespace lt::test::gdn {

struct ForwardBounds {
  Vec out, final_state;
  double tau = 0;  // the largest row sum of |T| over all chunks
};

inline ForwardBounds forward_bounds(const Inputs& in, const GatedDeltaShape& s) {
  constexpr double u = 0x1p-24;
  const int64_t dk = s.k_dim, dv = s.v_dim, grp = s.v_heads / s.k_heads, C = s.chunk;
  Vec out, fin, states;
  naive_forward(out, fin, in, s, &states);
  ForwardBounds fb;
  fb.out.assign(out.size(), 0.0);
  fb.final_state.assign(fin.size(), 0.0);
  const double eq = (dk / 2.0 + 8) * u;
  Vec qc(size_t(C * dk)), kc(size_t(C * dk)), G(static_cast<size_t>(C)), dG(static_cast<size_t>(C)), D(size_t(C * C)),
      P(size_t(C * C)), dP(size_t(C * C)), L(size_t(C * C)), dL(size_t(C * C)), T(size_t(C * C)),
      R(size_t(C * dv)), dR(size_t(C * dv)), Dl(size_t(C * dv)), dDl(size_t(C * dv)),
      tmp(size_t(C * dv)), dS1(size_t(dk * dv));
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.v_heads; ++h) {
      const int64_t hk = h / grp;
      double eS = 0;
      for (int64_t t0 = 0; t0 < s.seq; t0 += C) {
        const int64_t n = std::min(C, s.seq - t0);
        const double* S0 = &states[size_t(((b * s.v_heads + h) * s.seq + t0) * dk * dv)];
        double gsum = 0, acc = 0;
        for (int64_t r = 0; r < n; ++r) {
          l2norm(&qc[size_t(r * dk)], &in.q[size_t(qk_at(s, b, t0 + r, hk))], dk, query_scale(s));
          l2norm(&kc[size_t(r * dk)], &in.k[size_t(qk_at(s, b, t0 + r, hk))], dk, 1.0);
          const double g = in.g[size_t(gate_at(s, b, t0 + r, h))];
          G[size_t(r)] = acc += g;
          gsum += std::fabs(g);
          dG[size_t(r)] = (r + 1) * u * gsum;
        }
        auto beta = [&](int64_t r) { return in.beta[size_t(gate_at(s, b, t0 + r, h))]; };
        auto relD = [&](int64_t r, int64_t t) {
          return dG[size_t(r)] + dG[size_t(t)] + u * std::fabs(G[size_t(r)] - G[size_t(t)]) + 5 * u;
        };
        const double relE_last = dG[size_t(n - 1)] + u * std::fabs(G[size_t(n - 1)]) + 5 * u;
        for (int64_t r = 0; r < n; ++r)
          for (int64_t t = 0; t <= r; ++t) {
            double qk = 0, aqk = 0, kk = 0, akk = 0;
            for (int64_t i = 0; i < dk; ++i) {
              qk += qc[size_t(r * dk + i)] * kc[size_t(t * dk + i)];
              aqk += std::fabs(qc[size_t(r * dk + i)] * kc[size_t(t * dk + i)]);
              kk += kc[size_t(r * dk + i)] * kc[size_t(t * dk + i)];
              akk += std::fabs(kc[size_t(r * dk + i)] * kc[size_t(t * dk + i)]);
            }
            const double d = std::exp(G[size_t(r)] - G[size_t(t)]);
            D[size_t(r * C + t)] = d;
            P[size_t(r * C + t)] = qk * d;
            dP[size_t(r * C + t)] =
                d * aqk * ((dk + 1) * u + 2 * eq) + std::fabs(qk * d) * (relD(r, t) + u);
            L[size_t(r * C + t)] = t < r ? beta(r) * kk * d : 0.0;
            dL[size_t(r * C + t)] =
                t < r ? beta(r) * (d * akk * ((dk + 1) * u + 2 * eq) + std::fabs(kk * d) * (relD(r, t) + 2 * u))
                      : 0.0;
          }
        // T = (I + L)^-1 by substitution on the identity's columns; tau its row sums
        for (int64_t c = 0; c < n; ++c)
          for (int64_t r = 0; r < n; ++r) {
            double x = r == c ? 1.0 : 0.0;
            for (int64_t t = c; t < r; ++t) x -= L[size_t(r * C + t)] * T[size_t(t * C + c)];
            T[size_t(r * C + c)] = r < c ? 0.0 : x;
          }
        for (int64_t r = 0; r < n; ++r) {
          double rs = 0;
          for (int64_t c = 0; c <= r; ++c) rs += std::fabs(T[size_t(r * C + c)]);
          fb.tau = std::max(fb.tau, rs);
        }
        // R and its error
        for (int64_t r = 0; r < n; ++r) {
          const double e = std::exp(G[size_t(r)]);
          const double relE = dG[size_t(r)] + u * std::fabs(G[size_t(r)]) + 5 * u;
          const double* v = &in.v[size_t(v_at(s, b, t0 + r, h))];
          for (int64_t j = 0; j < dv; ++j) {
            double y = 0, ay = 0;
            for (int64_t i = 0; i < dk; ++i) {
              y += S0[i * dv + j] * kc[size_t(r * dk + i)];
              ay += std::fabs(S0[i * dv + j] * kc[size_t(r * dk + i)]);
            }
            const double Rj = beta(r) * (v[j] - e * y);
            R[size_t(r * dv + j)] = Rj;
            dR[size_t(r * dv + j)] = beta(r) * (e * ay * ((dk + 1) * u + eq) + e * std::fabs(y) * (relE + u)) +
                                     2 * u * std::fabs(Rj);
          }
        }
        // Delta = T R and its error bound
        for (int64_t r = 0; r < n; ++r)
          for (int64_t j = 0; j < dv; ++j) {
            double x = 0;
            for (int64_t c = 0; c <= r; ++c) x += T[size_t(r * C + c)] * R[size_t(c * dv + j)];
            Dl[size_t(r * dv + j)] = x;
          }
        for (int64_t r = 0; r < n; ++r)  // tmp = |dR| + (n+2)u|R| + (|dL| + (n+2)u|L|)|Delta|
          for (int64_t j = 0; j < dv; ++j) {
            double x = dR[size_t(r * dv + j)] + (n + 2) * u * std::fabs(R[size_t(r * dv + j)]);
            for (int64_t t = 0; t < r; ++t)
              x += (dL[size_t(r * C + t)] + (n + 2) * u * std::fabs(L[size_t(r * C + t)])) *
                   std::fabs(Dl[size_t(t * dv + j)]);
            tmp[size_t(r * dv + j)] = x;
          }
        for (int64_t r = 0; r < n; ++r)
          for (int64_t j = 0; j < dv; ++j) {
            double x = 0;
            for (int64_t c = 0; c <= r; ++c) x += std::fabs(T[size_t(r * C + c)]) * tmp[size_t(c * dv + j)];
            dDl[size_t(r * dv + j)] = x;
          }
        // outputs
        for (int64_t r = 0; r < n; ++r) {
          const double e = std::exp(G[size_t(r)]);
          const double relE = dG[size_t(r)] + u * std::fabs(G[size_t(r)]) + 5 * u;
          double qn = 0;
          for (int64_t i = 0; i < dk; ++i) qn += qc[size_t(r * dk + i)] * qc[size_t(r * dk + i)];
          qn = std::sqrt(qn);
          double* bo = &fb.out[size_t(v_at(s, b, t0 + r, h))];
          for (int64_t j = 0; j < dv; ++j) {
            double y = 0, ay = 0;
            for (int64_t i = 0; i < dk; ++i) {
              y += S0[i * dv + j] * qc[size_t(r * dk + i)];
              ay += std::fabs(S0[i * dv + j] * qc[size_t(r * dk + i)]);
            }
            double terms = e * std::fabs(y), prop = 0;
            for (int64_t t = 0; t <= r; ++t) {
              terms += std::fabs(P[size_t(r * C + t)] * Dl[size_t(t * dv + j)]);
              prop += dP[size_t(r * C + t)] * std::fabs(Dl[size_t(t * dv + j)]) +
                      std::fabs(P[size_t(r * C + t)]) * dDl[size_t(t * dv + j)];
            }
            const double local = e * (ay * ((dk + 1) * u + eq) + std::fabs(y) * (relE + u)) +
                                 (n + 2) * u * terms + prop;
            bo[j] = 2 * (local + qn * eS) + 1e-300;
          }
        }
        // the state's local error
        double local2 = 0;
        const double E = std::exp(G[size_t(n - 1)]);
        for (int64_t i = 0; i < dk; ++i)
          for (int64_t j = 0; j < dv; ++j) {
            double terms = E * std::fabs(S0[i * dv + j]), err = terms * (relE_last + u);
            for (int64_t r = 0; r < n; ++r) {
              const double w = std::exp(G[size_t(n - 1)] - G[size_t(r)]);
              const double kw = w * std::fabs(kc[size_t(r * dk + i)]);
              terms += kw * std::fabs(Dl[size_t(r * dv + j)]);
              err += kw * (dDl[size_t(r * dv + j)] +
                           std::fabs(Dl[size_t(r * dv + j)]) * (relD(n - 1, r) + eq + u));
            }
            err += (n + 2) * u * terms;
            local2 += err * err;
          }
        eS += std::sqrt(local2);
      }
      for (int64_t i = 0; i < dk * dv; ++i)
        fb.final_state[size_t((b * s.v_heads + h) * dk * dv + i)] = 2 * eS + 1e-300;
    }
  return fb;
}

inline double max_abs(const Vec& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// The normwise backward bound of the header, one value per gradient tensor.
struct BackwardBounds {
  double dq, dk, dv, dg, dbeta, ds0;
};
inline BackwardBounds backward_bounds(const Inputs& in, const Grads& ref, const GatedDeltaShape& s,
                                      double tau) {
  constexpr double u = 0x1p-24;
  const double nc = double(s.n_chunks());
  const double n = double(std::min(s.chunk, s.seq));
  const double kb = 2 * (s.k_dim + s.v_dim + 2 * n + 16) * u * (1 + tau) * nc;
  const double M = max_abs(ref.dq) * max_abs(in.q) + max_abs(ref.dk) * max_abs(in.k) +
                   max_abs(ref.dv) * max_abs(in.v);
  return {kb * (max_abs(ref.dq) + M), kb * (max_abs(ref.dk) + M), kb * (max_abs(ref.dv) + M),
          kb * (max_abs(ref.dg) + M), kb * (max_abs(ref.dbeta) + M), kb * (max_abs(ref.ds0) + M)};
}

}  // namespace lt::test::gdn
