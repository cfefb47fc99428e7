// The Gated DeltaNet kernels against transformers' own Qwen3.5 code, run with autograd in
// float64 (tests/reference/gated_deltanet_ops.py: torch_chunk_gated_delta_rule with the
// in-kernel q/k l2norm, causal_conv1d_fn with SiLU, Qwen3_5RMSNormGated), on the fp32
// inputs written here, at a small layer-shaped case: grouped value heads, dk != dv, a
// sequence not a multiple of the chunk, an initial state and a gradient into the final
// state.
//
// Bounds: the kernels against torch use the same derived fp32 bounds as the float64
// reference tests (gated_delta_bounds.h, conv_norm_reference.h). Torch's float64 result
// is itself within those bounds rescaled to u = 2^-53 (they are first order in u), which
// is added. Our float64 recurrence and torch's float64 chunked form are compared within
// twice that rescaled bound: a check of the reference code itself (layouts, the group
// mapping, the scale, the l2norm eps) against transformers.
// The gated norm's backward bounds in conv_norm_reference.h assume the kernel's rstd on
// both sides; torch uses its own, so the effect of the kernel's rstd error ((D/2 + 4) u
// relative) on dx, dz and dw is added here.
#include <fstream>
#include <sstream>

#include "isa_test_util.h"
#include "kernels/conv_norm_reference.h"
#include "kernels/cpu/causal_conv1d.h"
#include "kernels/cpu/gated_delta_rule.h"
#include "kernels/cpu/gated_rmsnorm.h"
#include "kernels/gated_delta_bounds.h"
#include "kernels/kernel_test_util.h"
#include "test_util.h"

namespace lt {
namespace {

constexpr double kRescale = 0x1p-29;  // 2^-53 / 2^-24

using test::read_raw_f64;
using test::write_raw_f32;

// bound + |want| * rescaled bound: the kernel against torch's float64 (itself within the
// rescaled bound of the exact value).
std::vector<double> with_torch_error(std::vector<double> b) {
  for (double& x : b) x *= 1 + kRescale;
  return b;
}
std::vector<double> filled(size_t n, double v) { return std::vector<double>(n, v); }

TEST(GatedDeltaNet, MatchesTransformers) {
  const GatedDeltaShape s{2, 100, 2, 4, 16, 8, 64};
  const CausalConvShape cs{s.batch, s.seq, 2 * s.k_heads * s.k_dim + s.v_heads * s.v_dim, 4};
  const int64_t T = s.batch * s.seq * s.v_heads, D = s.v_dim;
  const float eps = 1e-6f;
  const size_t nqk = size_t(s.batch * s.seq * s.k_heads * s.k_dim),
               nv = size_t(s.batch * s.seq * s.v_heads * s.v_dim),
               ng = size_t(s.batch * s.seq * s.v_heads), ns = size_t(s.state_floats()),
               nc = size_t(cs.batch * cs.seq * cs.channels), nw = size_t(cs.channels * cs.kernel),
               nn = size_t(T * D);
  const auto q = test::random_floats(nqk, 1), k = test::random_floats(nqk, 2),
             v = test::random_floats(nv, 3), beta = test::random_floats(ng, 4, 0.02f, 0.98f),
             s0 = test::random_floats(ns, 6, -0.5f, 0.5f), dout = test::random_floats(nv, 7),
             dfinal = test::random_floats(ns, 8);
  auto g = test::random_floats(ng, 5, -1.5f, 0.0f);
  const auto cx = test::random_floats(nc, 9, -3, 3), cw = test::random_floats(nw, 10),
             cdy = test::random_floats(nc, 11);
  const auto nx = test::random_floats(nn, 12, -2, 2), nz = test::random_floats(nn, 13, -4, 4),
             ndy = test::random_floats(nn, 14), nwt = test::random_floats(size_t(D), 15, 0.5f, 1.5f);

  test::TempDir dir("gated-deltanet");
  const std::pair<const char*, const std::vector<float>*> files[] = {
      {"q", &q},   {"k", &k},   {"v", &v},     {"dout", &dout}, {"g", &g},   {"beta", &beta},
      {"s0", &s0}, {"dfinal", &dfinal}, {"cx", &cx}, {"cw", &cw}, {"cdy", &cdy},
      {"nx", &nx}, {"nz", &nz}, {"ndy", &ndy}, {"nw", &nwt}};
  for (const auto& [name, data] : files) write_raw_f32(dir.str() + "/" + name + ".bin", *data);
  std::ostringstream args;
  args << dir.str() << " " << s.batch << " " << s.seq << " " << s.k_heads << " " << s.v_heads << " "
       << s.k_dim << " " << s.v_dim << " " << s.chunk << " " << cs.channels << " " << cs.kernel << " "
       << T << " " << D << " " << eps;
  const auto r = test::run_reference_script("gated_deltanet_ops.py", args.str());
  ASSERT_PYTHON_OK(r);
  auto rd = [&](const char* name, size_t n) { return read_raw_f64(dir.str() + "/" + name + ".bin", n); };
  const auto to = rd("o", nv), tfin = rd("fin", ns), tdq = rd("dq", nqk), tdk = rd("dk", nqk),
             tdv = rd("dv", nv), tdg = rd("dg", ng), tdb = rd("dbeta", ng), tds0 = rd("ds0", ns),
             tcy = rd("cy", nc), tcdx = rd("cdx", nc), tcdw = rd("cdw", nw), tny = rd("ny", nn),
             tndx = rd("ndx", nn), tndz = rd("ndz", nn), tndw = rd("ndw", size_t(D));
  for (const auto* t : {&to, &tfin, &tdq, &tdk, &tdv, &tdg, &tdb, &tds0, &tcy, &tcdx, &tcdw, &tny,
                        &tndx, &tndz, &tndw})
    ASSERT_FALSE(t->empty()) << "short output from gated_deltanet_ops.py:\n" << r.output;

  // Our float64 recurrence against transformers' float64 chunked form.
  const test::gdn::Inputs in{test::to_double(q), test::to_double(k), test::to_double(v),
                             test::to_double(g), test::to_double(beta), test::to_double(s0)};
  test::gdn::Vec out, fin;
  test::gdn::naive_forward(out, fin, in, s);
  const auto ref = test::gdn::naive_backward(in, test::to_double(dout), test::to_double(dfinal), s);
  const auto fb = test::gdn::forward_bounds(in, s);
  const auto bb = test::gdn::backward_bounds(in, ref, s, fb.tau);
  auto close64 = [&](const test::gdn::Vec& a, const test::gdn::Vec& b, const std::vector<double>& bound,
                     const char* what) {
    double worst = 0;
    for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]) / (2 * kRescale * bound[i]));
    EXPECT_LE(worst, 1.0) << what << ": float64 recurrence vs transformers' float64, worst ratio " << worst;
  };
  close64(out, to, fb.out, "o");
  close64(fin, tfin, fb.final_state, "final state");
  close64(ref.dq, tdq, filled(nqk, bb.dq), "dq");
  close64(ref.dk, tdk, filled(nqk, bb.dk), "dk");
  close64(ref.dv, tdv, filled(nv, bb.dv), "dv");
  close64(ref.dg, tdg, filled(ng, bb.dg), "dg");
  close64(ref.dbeta, tdb, filled(ng, bb.dbeta), "dbeta");
  close64(ref.ds0, tds0, filled(ns, bb.ds0), "d_initial_state");

  test::for_each_isa([&](Isa) {
    // the gated delta rule
    std::vector<float> o(nv), f(ns), cst(size_t(s.chunk_state_floats())),
        ws(std::max(gated_delta_rule_forward_workspace_floats(s), gated_delta_rule_backward_workspace_floats(s)));
    gated_delta_rule_forward(o.data(), f.data(), cst.data(), q.data(), k.data(), v.data(), g.data(),
                             beta.data(), s0.data(), s, ws.data());
    std::vector<float> dq(nqk), dk(nqk), dv(nv), dg(ng), db(ng), ds0(ns);
    gated_delta_rule_backward(dq.data(), dk.data(), dv.data(), dg.data(), db.data(), ds0.data(),
                              dout.data(), dfinal.data(), q.data(), k.data(), v.data(), g.data(),
                              beta.data(), cst.data(), s, ws.data());
    EXPECT_TRUE(test::within_bound(o, to, with_torch_error(fb.out))) << "o";
    EXPECT_TRUE(test::within_bound(f, tfin, with_torch_error(fb.final_state))) << "final state";
    EXPECT_TRUE(test::within_bound(dq, tdq, with_torch_error(filled(nqk, bb.dq)))) << "dq";
    EXPECT_TRUE(test::within_bound(dk, tdk, with_torch_error(filled(nqk, bb.dk)))) << "dk";
    EXPECT_TRUE(test::within_bound(dv, tdv, with_torch_error(filled(nv, bb.dv)))) << "dv";
    EXPECT_TRUE(test::within_bound(dg, tdg, with_torch_error(filled(ng, bb.dg)))) << "dg";
    EXPECT_TRUE(test::within_bound(db, tdb, with_torch_error(filled(ng, bb.dbeta)))) << "dbeta";
    EXPECT_TRUE(test::within_bound(ds0, tds0, with_torch_error(filled(ns, bb.ds0)))) << "d_initial_state";

    // the conv (dw accumulates: start from zero, as torch's .grad does)
    const auto cref = test::convnorm::conv_reference(test::to_double(cx), test::to_double(cw), test::to_double(cdy),
                                                     std::vector<double>(nw, 0.0), cs.batch, cs.seq, cs.channels,
                                                     cs.kernel);
    std::vector<float> cy(nc), cdx(nc), cdw(nw, 0.0f);
    causal_conv1d_silu_forward(cy.data(), cx.data(), cw.data(), cs);
    causal_conv1d_silu_backward(cdx.data(), cdw.data(), cdy.data(), cx.data(), cw.data(), cs);
    EXPECT_TRUE(test::within_bound(cy, tcy, with_torch_error(cref.by))) << "conv y";
    EXPECT_TRUE(test::within_bound(cdx, tcdx, with_torch_error(cref.bdx))) << "conv dx";
    EXPECT_TRUE(test::within_bound(cdw, tcdw, with_torch_error(cref.bdw))) << "conv dw";

    // the gated norm
    std::vector<float> ny(nn), rstd(static_cast<size_t>(T)), ndx(nn), ndz(nn), ndw(size_t(D), 0.0f),
        nws(gated_rmsnorm_backward_workspace_floats(T, D));
    gated_rmsnorm_forward(ny.data(), rstd.data(), nx.data(), nz.data(), nwt.data(), T, D, eps);
    gated_rmsnorm_backward(ndx.data(), ndz.data(), ndw.data(), ndy.data(), nx.data(), nz.data(), nwt.data(),
                           rstd.data(), T, D, nws.data());
    const auto nref = test::convnorm::norm_reference(test::to_double(nx), test::to_double(nz), test::to_double(nwt),
                                                     test::to_double(ndy), std::vector<double>(size_t(D), 0.0),
                                                     test::to_double(rstd), T, D, double(eps));
    auto bdx = nref.bdx, bdz = nref.bdz, bdw = nref.bdw;
    const double er = (D / 2.0 + 4) * test::convnorm::kU;  // the kernel rstd's relative error
    for (int64_t t = 0; t < T; ++t) {
      const double rs = nref.rstd[size_t(t)];
      double adot = 0;
      for (int64_t d = 0; d < D; ++d) {
        const size_t i = size_t(t * D + d);
        adot += std::fabs(ndy[i] * nwt[size_t(d)] * test::convnorm::silu(nz[i]) * nx[i]);
      }
      for (int64_t d = 0; d < D; ++d) {
        const size_t i = size_t(t * D + d);
        const double dn = ndy[i] * nwt[size_t(d)] * test::convnorm::silu(nz[i]);
        bdx[i] += er * (std::fabs(rs * dn) + 3 * rs * rs * rs * std::fabs(nx[i]) * adot / D);
        bdz[i] += er * std::fabs(nref.dz[i]);
        bdw[size_t(d)] += er * std::fabs(ndy[i] * nx[i] * rs * test::convnorm::silu(nz[i]));
      }
    }
    EXPECT_TRUE(test::within_bound(ny, tny, with_torch_error(nref.by))) << "norm y";
    EXPECT_TRUE(test::within_bound(ndx, tndx, with_torch_error(bdx))) << "norm dx";
    EXPECT_TRUE(test::within_bound(ndz, tndz, with_torch_error(bdz))) << "norm dz";
    EXPECT_TRUE(test::within_bound(ndw, tndw, with_torch_error(bdw))) << "norm dw";
  });
}

}  // namespace
}  // namespace lt
