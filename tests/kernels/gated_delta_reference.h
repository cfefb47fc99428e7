// Float64 references for the gated delta rule tests, written from the recurrence itself
// (not from the kernel's chunked algebra):
//   naive_forward: token by token, S = e^g S; S += k (beta (v - S^T k))^T; o = S^T q, with
//     q = l2norm(q_raw) / sqrt(dk), k = l2norm(k_raw) (eps 1e-6 inside the square root);
//   naive_backward: hand-written reverse mode of that loop (states recomputed forward).
// Layouts as in kernels/cpu/gated_delta_rule.h.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/gated_delta_rule.h"
#include "kernels/kernel_test_util.h"

namespace lt::test::gdn {

using Vec = std::vector<double>;

struct Inputs {  // double copies of what the kernel gets (same values)
  Vec q, k, v, g, beta, s0;  // s0 empty: zero initial state
};

inline int64_t qk_at(const GatedDeltaShape& s, int64_t b, int64_t t, int64_t hk) {
  return ((b * s.seq + t) * s.k_heads + hk) * s.k_dim;
}
inline int64_t v_at(const GatedDeltaShape& s, int64_t b, int64_t t, int64_t h) {
  return ((b * s.seq + t) * s.v_heads + h) * s.v_dim;
}
inline int64_t gate_at(const GatedDeltaShape& s, int64_t b, int64_t t, int64_t h) {
  return (b * s.seq + t) * s.v_heads + h;
}

// y = c x / sqrt(|x|^2 + 1e-6) (the eps as the kernel stores it: a float).
inline void l2norm(double* y, const double* x, int64_t n, double c) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const double inv = 1 / std::sqrt(ss + double(1e-6f));
  for (int64_t i = 0; i < n; ++i) y[i] = c * x[i] * inv;
}

inline double query_scale(const GatedDeltaShape& s) {
  return double(float(1.0 / std::sqrt(double(s.k_dim))));  // the kernel's float scale
}

// out [B,S,Hv,dv]; final_state [B,Hv,dk,dv]. states (optional) gets, per (b, h, t), the
// state before token t: [B, Hv, S, dk, dv].
inline void naive_forward(Vec& out, Vec& final_state, const Inputs& in, const GatedDeltaShape& s,
                          Vec* states = nullptr) {
  const int64_t dk = s.k_dim, dv = s.v_dim, grp = s.v_heads / s.k_heads;
  out.assign(size_t(s.batch * s.seq * s.v_heads * dv), 0.0);
  final_state.assign(size_t(s.state_floats()), 0.0);
  if (states) states->assign(size_t(s.batch * s.v_heads * s.seq * dk * dv), 0.0);
  Vec S(size_t(dk * dv)), q(static_cast<size_t>(dk)), k(static_cast<size_t>(dk)), kv(static_cast<size_t>(dv));
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.v_heads; ++h) {
      const int64_t hk = h / grp;
      for (int64_t i = 0; i < dk * dv; ++i)
        S[size_t(i)] = in.s0.empty() ? 0.0 : in.s0[size_t((b * s.v_heads + h) * dk * dv + i)];
      for (int64_t t = 0; t < s.seq; ++t) {
        if (states)
          std::copy(S.begin(), S.end(),
                    states->begin() + ((b * s.v_heads + h) * s.seq + t) * dk * dv);
        l2norm(q.data(), &in.q[size_t(qk_at(s, b, t, hk))], dk, query_scale(s));
        l2norm(k.data(), &in.k[size_t(qk_at(s, b, t, hk))], dk, 1.0);
        const double decay = std::exp(in.g[size_t(gate_at(s, b, t, h))]);
        const double beta = in.beta[size_t(gate_at(s, b, t, h))];
        const double* v = &in.v[size_t(v_at(s, b, t, h))];
        for (auto& e : S) e *= decay;
        for (int64_t j = 0; j < dv; ++j) {
          double acc = 0;
          for (int64_t i = 0; i < dk; ++i) acc += S[size_t(i * dv + j)] * k[size_t(i)];
          kv[size_t(j)] = beta * (v[j] - acc);  // delta
        }
        for (int64_t i = 0; i < dk; ++i)
          for (int64_t j = 0; j < dv; ++j) S[size_t(i * dv + j)] += k[size_t(i)] * kv[size_t(j)];
        double* o = &out[size_t(v_at(s, b, t, h))];
        for (int64_t j = 0; j < dv; ++j) {
          double acc = 0;
          for (int64_t i = 0; i < dk; ++i) acc += S[size_t(i * dv + j)] * q[size_t(i)];
          o[j] = acc;
        }
      }
      std::copy(S.begin(), S.end(), final_state.begin() + (b * s.v_heads + h) * dk * dv);
    }
}

struct Grads {
  Vec dq, dk, dv, dg, dbeta, ds0;
};

// Reverse mode of naive_forward for L = sum d_out . out + sum d_final . final_state
// (d_final empty: zero).
inline Grads naive_backward(const Inputs& in, const Vec& d_out, const Vec& d_final,
                            const GatedDeltaShape& s) {
  const int64_t dk = s.k_dim, dv = s.v_dim, grp = s.v_heads / s.k_heads;
  Vec out, fin, states;
  naive_forward(out, fin, in, s, &states);
  Grads gr;
  gr.dq.assign(in.q.size(), 0.0);
  gr.dk.assign(in.k.size(), 0.0);
  gr.dv.assign(in.v.size(), 0.0);
  gr.dg.assign(in.g.size(), 0.0);
  gr.dbeta.assign(in.beta.size(), 0.0);
  gr.ds0.assign(size_t(s.state_floats()), 0.0);
  Vec dS(size_t(dk * dv)), Sd(size_t(dk * dv)), Sn(size_t(dk * dv));
  Vec q(static_cast<size_t>(dk)), k(static_cast<size_t>(dk)), dqn(static_cast<size_t>(dk)), dkn(static_cast<size_t>(dk)), delta(static_cast<size_t>(dv)),
      kvm(static_cast<size_t>(dv)), ddelta(static_cast<size_t>(dv));
  // dx of y = c x / sqrt(|x|^2 + eps), accumulated into dx
  auto l2norm_back = [&](double* dx, const double* x, const double* dy, double c) {
    double ss = 0, xd = 0;
    for (int64_t i = 0; i < dk; ++i) ss += x[i] * x[i], xd += x[i] * dy[i];
    const double inv = 1 / std::sqrt(ss + double(1e-6f));
    for (int64_t i = 0; i < dk; ++i) dx[i] += c * (inv * dy[i] - inv * inv * inv * x[i] * xd);
  };
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.v_heads; ++h) {
      const int64_t hk = h / grp;
      for (int64_t i = 0; i < dk * dv; ++i)
        dS[size_t(i)] = d_final.empty() ? 0.0 : d_final[size_t((b * s.v_heads + h) * dk * dv + i)];
      for (int64_t t = s.seq - 1; t >= 0; --t) {
        const double* S0 = &states[size_t(((b * s.v_heads + h) * s.seq + t) * dk * dv)];
        const double* qr = &in.q[size_t(qk_at(s, b, t, hk))];
        const double* kr = &in.k[size_t(qk_at(s, b, t, hk))];
        l2norm(q.data(), qr, dk, query_scale(s));
        l2norm(k.data(), kr, dk, 1.0);
        const double decay = std::exp(in.g[size_t(gate_at(s, b, t, h))]);
        const double beta = in.beta[size_t(gate_at(s, b, t, h))];
        const double* v = &in.v[size_t(v_at(s, b, t, h))];
        const double* dO = &d_out[size_t(v_at(s, b, t, h))];
        // replay the token: Sd = decay S0, kvm = Sd^T k, delta, Sn = Sd + k delta^T
        for (int64_t i = 0; i < dk * dv; ++i) Sd[size_t(i)] = decay * S0[i];
        for (int64_t j = 0; j < dv; ++j) {
          double acc = 0;
          for (int64_t i = 0; i < dk; ++i) acc += Sd[size_t(i * dv + j)] * k[size_t(i)];
          kvm[size_t(j)] = acc;
          delta[size_t(j)] = beta * (v[j] - acc);
        }
        for (int64_t i = 0; i < dk; ++i)
          for (int64_t j = 0; j < dv; ++j)
            Sn[size_t(i * dv + j)] = Sd[size_t(i * dv + j)] + k[size_t(i)] * delta[size_t(j)];
        // o = Sn^T q
        for (int64_t i = 0; i < dk; ++i) {
          double acc = 0;
          for (int64_t j = 0; j < dv; ++j) {
            acc += Sn[size_t(i * dv + j)] * dO[j];
            dS[size_t(i * dv + j)] += q[size_t(i)] * dO[j];
          }
          dqn[size_t(i)] = acc;
        }
        // Sn = Sd + k delta^T
        for (int64_t i = 0; i < dk; ++i) {
          double acc = 0;
          for (int64_t j = 0; j < dv; ++j) acc += dS[size_t(i * dv + j)] * delta[size_t(j)];
          dkn[size_t(i)] = acc;
        }
        for (int64_t j = 0; j < dv; ++j) {
          double acc = 0;
          for (int64_t i = 0; i < dk; ++i) acc += dS[size_t(i * dv + j)] * k[size_t(i)];
          ddelta[size_t(j)] = acc;
        }
        // delta = beta (v - kvm)
        double db = 0;
        double* dvr = &gr.dv[size_t(v_at(s, b, t, h))];
        for (int64_t j = 0; j < dv; ++j) {
          dvr[j] = beta * ddelta[size_t(j)];
          db += ddelta[size_t(j)] * (v[j] - kvm[size_t(j)]);
        }
        gr.dbeta[size_t(gate_at(s, b, t, h))] = db;
        // kvm = Sd^T k: dSd += k dkvm^T, dk += Sd dkvm, with dkvm = -beta ddelta
        for (int64_t i = 0; i < dk; ++i)
          for (int64_t j = 0; j < dv; ++j) {
            const double dkvm = -beta * ddelta[size_t(j)];
            dS[size_t(i * dv + j)] += k[size_t(i)] * dkvm;
            dkn[size_t(i)] += Sd[size_t(i * dv + j)] * dkvm;
          }
        // Sd = decay S0
        double dg = 0;
        for (int64_t i = 0; i < dk * dv; ++i) {
          dg += dS[size_t(i)] * Sd[size_t(i)];
          dS[size_t(i)] *= decay;
        }
        gr.dg[size_t(gate_at(s, b, t, h))] = dg;
        l2norm_back(&gr.dq[size_t(qk_at(s, b, t, hk))], qr, dqn.data(), query_scale(s));
        l2norm_back(&gr.dk[size_t(qk_at(s, b, t, hk))], kr, dkn.data(), 1.0);
      }
      std::copy(dS.begin(), dS.end(), gr.ds0.begin() + (b * s.v_heads + h) * dk * dv);
    }
  return gr;
}

// fp32 test inputs for the kernel and their double copies for the references.
struct Data {
  std::vector<float> q, k, v, g, beta, s0, dout, dfinal;
};

// Raw q/k in [-1, 1] (the kernel normalizes them), v in [-1, 1], beta in (0, 1) (a
// sigmoid in the model), g <= 0 with a decay rate per head from slow to fast, as
// -exp(A_log) softplus(.) gives.
inline Data make_data(const GatedDeltaShape& s, uint64_t seed, bool with_state, bool with_dfinal) {
  Data d;
  const size_t nqk = size_t(s.batch * s.seq * s.k_heads * s.k_dim),
               nv = size_t(s.batch * s.seq * s.v_heads * s.v_dim),
               ng = size_t(s.batch * s.seq * s.v_heads);
  d.q = test::random_floats(nqk, seed + 1);
  d.k = test::random_floats(nqk, seed + 2);
  d.v = test::random_floats(nv, seed + 3);
  d.beta = test::random_floats(ng, seed + 4, 0.02f, 0.98f);
  d.g = test::random_floats(ng, seed + 5, 0.0f, 1.0f);
  const float rates[] = {0.02f, 0.3f, 2.0f};
  for (size_t i = 0; i < ng; ++i) d.g[i] = -rates[(i % size_t(s.v_heads)) % 3] * d.g[i];
  if (with_state) d.s0 = test::random_floats(size_t(s.state_floats()), seed + 6, -0.5f, 0.5f);
  d.dout = test::random_floats(nv, seed + 7);
  if (with_dfinal) d.dfinal = test::random_floats(size_t(s.state_floats()), seed + 8);
  return d;
}

inline Inputs to_inputs(const Data& d) {
  return {test::to_double(d.q), test::to_double(d.k), test::to_double(d.v),
          test::to_double(d.g), test::to_double(d.beta), test::to_double(d.s0)};
}

}  // namespace lt::test::gdn
