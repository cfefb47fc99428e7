// Checks of the Gated DeltaNet's gates (kernels/cpu/delta_rule_gates.h) against float64
// (ref:: in double, torch's softplus threshold included), shared by the CPU test
// (tests/kernels/delta_rule_gates_test.cpp) and the CUDA one. u = 2^-24; exp within E ulp
// and log1p within L ulp (an ulp is at most 2 u of its value); first-order terms with the
// products of factors kept whole.
//  - beta = 1 / (1 + exp(-b)): within (2E + 2) u relative (tests/kernels/elementwise_checks.h).
//  - x = a + dt_bias rounds by u |x|, which moves softplus by sigmoid(x) u |x| (its slope)
//    and softplus' = sigmoid by sigmoid (1 - sigmoid) u |x|. Below the threshold
//    softplus = log1p(exp(x)) is within (2E + 2L) u relative (log1p passes exp's relative
//    error on scaled by y / ((1 + y) log1p(y)) <= 1); its derivative sigmoid within
//    (2E + 2) u. Where x and the rounded sum lie on two sides of the threshold 20, the two
//    definitions differ by log1p(exp(-x)) <= exp(-19) relative for x > 19 (added there).
//  - decay = -exp(A_log) * softplus: exp's 2E u and the product's u on top.
//  - db = dbeta (beta (1 - beta)): three roundings. da = (dg * -exp(A_log)) * softplus':
//    exp's 2E u, two products, and softplus' own error.
//  - The per-head sums, in float64 in any order: (T - 1) 2^-53 times the sum of their
//    terms' magnitudes (twice: the reference sums in float64 too), plus each term's own
//    error (da's), then u of the sum for its rounding to fp32 and u of the result for the
//    += into the gradient.
// Premise: inputs of order 1 to 30, so no value is subnormal.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/delta_rule_gates.h"
#include "kernels/elementwise_checks.h"
#include "kernels/kernel_table.h"

namespace lt::test::delta_gates {

using elementwise::BoundCheck;
using elementwise::kUnit;

struct Inputs {
  int64_t T, H;
  std::vector<float> b, a, A_log, dt_bias, dbeta, dg, d_dt_bias0, d_A_log0;
};

// Seeded inputs: b in [-8, 8], a in [-10, 30] (so a + dt_bias passes softplus' threshold
// for some tokens), A_log in [-1, 2.5], the rest in [-1, 1].
inline Inputs make_inputs(int64_t T, int64_t H) {
  uint64_t seed = 20261206;
  auto uniform = [&](int64_t n, float lo, float hi) { return elementwise::uniform_floats(n, seed++, lo, hi); };
  const int64_t n = T * H;
  Inputs in;
  in.T = T;
  in.H = H;
  in.b = uniform(n, -8, 8);
  in.a = uniform(n, -10, 30);
  in.A_log = uniform(H, -1, 2.5f);
  in.dt_bias = uniform(H, -1, 1);
  in.dbeta = uniform(n, -1, 1);
  in.dg = uniform(n, -1, 1);
  in.d_dt_bias0 = uniform(H, -1, 1);
  in.d_A_log0 = uniform(H, -1, 1);
  return in;
}

struct Outputs {
  std::vector<float> beta, decay, db, da, d_dt_bias, d_A_log;
};

// Forward then backward through a kernel table on host memory (the cpu table, or a
// backend's), in place over b, a and dbeta as the mixer's calls are.
inline Outputs run_on_host(const KernelTable& k, const Inputs& in) {
  Outputs o{in.b, in.a, in.dbeta, in.a, in.d_dt_bias0, in.d_A_log0};
  k.delta_rule_gates_forward(o.beta.data(), o.decay.data(), o.beta.data(), o.decay.data(), in.A_log.data(),
                             in.dt_bias.data(), in.T, in.H);
  k.delta_rule_gates_backward(o.db.data(), o.da.data(), o.d_dt_bias.data(), o.d_A_log.data(), o.db.data(),
                              in.dg.data(), o.da.data(), o.beta.data(), o.decay.data(), in.A_log.data(),
                              in.dt_bias.data(), in.T, in.H);
  return o;
}

inline void expect_gates(const Outputs& got, const Inputs& in, int exp_ulps, int log1p_ulps) {
  const double u = kUnit, E = exp_ulps, L = log1p_ulps, tail = std::exp(-19.0);
  const int64_t T = in.T, H = in.H, n = T * H;
  // The reference in double, from the same fp32 inputs; its forward gives the backward's
  // beta and decay inputs the kernel got (the kernel's own, as the mixer passes them).
  std::vector<double> beta(n), decay(n), db(n), da(n), ddt(H), dA(H), sum_abs_da(H, 0), sum_err_da(H, 0),
      sum_abs_dA(H, 0);
  auto wide = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };
  const std::vector<double> b = wide(in.b), a = wide(in.a), A_log = wide(in.A_log), dt = wide(in.dt_bias),
                            dbeta = wide(in.dbeta), dg = wide(in.dg), kb = wide(got.beta), kd = wide(got.decay);
  ref::delta_rule_gates_forward<double>(beta.data(), decay.data(), b.data(), a.data(), A_log.data(), dt.data(), T, H);
  for (int64_t j = 0; j < H; ++j) ddt[j] = in.d_dt_bias0[j], dA[j] = in.d_A_log0[j];
  ref::delta_rule_gates_backward<double>(db.data(), da.data(), ddt.data(), dA.data(), dbeta.data(), dg.data(),
                                         a.data(), kb.data(), kd.data(), A_log.data(), dt.data(), T, H);
  BoundCheck c_beta("beta"), c_decay("decay"), c_db("db"), c_da("da"), c_ddt("d_dt_bias"), c_dA("d_A_log");
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < H; ++j) {
      const int64_t i = t * H + j;
      const double x = a[i] + dt[j], ax = std::fabs(x), sig = 1 / (1 + std::exp(-x));
      const double near = ax > 19 ? tail : 0;  // the threshold's two sides
      c_beta(got.beta[i], beta[i], std::fabs(beta[i]) * (2 * E + 2) * u, i);
      const double sp = ref::softplus<double>(x), ea = std::exp(A_log[j]);
      const double sp_err = (x > 20 ? 0 : (2 * E + 2 * L) * u * sp) + sig * u * ax + near * sp;
      c_decay(got.decay[i], decay[i], ea * ((1 + 2 * E * u) * (1 + u) * (sp + sp_err) - sp), i);
      c_db(got.db[i], db[i], std::fabs(db[i]) * (std::pow(1 + u, 3) - 1), i);
      const double sg_rel = (x > 20 ? 0 : (2 * E + 2) * u) + (1 - sig) * u * ax + near;
      const double da_bound = std::fabs(da[i]) * ((1 + 2 * E * u) * std::pow(1 + u, 2) * (1 + sg_rel) - 1);
      c_da(got.da[i], da[i], da_bound, i);
      sum_abs_da[j] += std::fabs(da[i]);
      sum_err_da[j] += da_bound;
      sum_abs_dA[j] += std::fabs(dg[i] * kd[i]);
    }
  const double sum_u = 2 * (T - 1) * 0x1p-53;  // the kernel's summation and the reference's
  for (int64_t j = 0; j < H; ++j) {
    const double s_da = ddt[j] - in.d_dt_bias0[j], s_dA = dA[j] - in.d_A_log0[j];
    c_ddt(got.d_dt_bias[j], ddt[j], sum_err_da[j] + sum_u * sum_abs_da[j] + u * std::fabs(s_da) + u * std::fabs(ddt[j]),
          j);
    c_dA(got.d_A_log[j], dA[j], sum_u * sum_abs_dA[j] + u * std::fabs(s_dA) + u * std::fabs(dA[j]), j);
  }
}

}  // namespace lt::test::delta_gates
