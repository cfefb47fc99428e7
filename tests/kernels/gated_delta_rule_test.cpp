// The chunked gated delta rule kernel (kernels/cpu/gated_delta_rule.h) at every ISA level
// this machine runs, against the float64 token-by-token recurrence and its reverse mode
// (tests/kernels/gated_delta_reference.h), within the derived fp32 bounds of
// tests/kernels/gated_delta_bounds.h; the reference's own gradients and the kernel's
// against float64 finite differences; bitwise invariance over thread counts; bad shapes.
#include "kernels/cpu/gated_delta_rule.h"

#include <cstring>
#include <string>

#include "isa_test_util.h"
#include "kernels/finite_difference.h"
#include "kernels/gated_delta_bounds.h"
#include "kernels/kernel_test_util.h"
#include "test_util.h"

namespace lt {
namespace {

using test::gdn::Data;
using test::gdn::make_data;
using test::gdn::to_inputs;
using test::gdn::Vec;

struct KernelOut {
  std::vector<float> out, final_state, chunk_states;
};
KernelOut run_forward(const Data& d, const GatedDeltaShape& s) {
  KernelOut r;
  r.out.assign(size_t(s.batch * s.seq * s.v_heads * s.v_dim), NAN);
  r.final_state.assign(size_t(s.state_floats()), NAN);
  r.chunk_states.assign(size_t(s.chunk_state_floats()), NAN);
  std::vector<float> ws(gated_delta_rule_forward_workspace_floats(s), NAN);
  gated_delta_rule_forward(r.out.data(), r.final_state.data(), r.chunk_states.data(), d.q.data(),
                           d.k.data(), d.v.data(), d.g.data(), d.beta.data(),
                           d.s0.empty() ? nullptr : d.s0.data(), s, ws.data());
  return r;
}

struct KernelGrads {
  std::vector<float> dq, dk, dv, dg, dbeta, ds0;
};
KernelGrads run_backward(const Data& d, const KernelOut& f, const GatedDeltaShape& s) {
  KernelGrads g;
  g.dq.assign(d.q.size(), NAN);
  g.dk.assign(d.k.size(), NAN);
  g.dv.assign(d.v.size(), NAN);
  g.dg.assign(d.g.size(), NAN);
  g.dbeta.assign(d.beta.size(), NAN);
  g.ds0.assign(size_t(s.state_floats()), NAN);
  std::vector<float> ws(gated_delta_rule_backward_workspace_floats(s), NAN);
  gated_delta_rule_backward(g.dq.data(), g.dk.data(), g.dv.data(), g.dg.data(), g.dbeta.data(),
                            g.ds0.data(), d.dout.data(), d.dfinal.empty() ? nullptr : d.dfinal.data(),
                            d.q.data(), d.k.data(), d.v.data(), d.g.data(), d.beta.data(),
                            f.chunk_states.data(), s, ws.data());
  return g;
}

std::string name(const GatedDeltaShape& s) {
  return "B=" + std::to_string(s.batch) + " S=" + std::to_string(s.seq) + " Hk=" +
         std::to_string(s.k_heads) + " Hv=" + std::to_string(s.v_heads) + " dk=" +
         std::to_string(s.k_dim) + " dv=" + std::to_string(s.v_dim) + " chunk=" +
         std::to_string(s.chunk);
}

Vec filled(size_t n, double b) { return Vec(n, b); }

// {B, S, Hk, Hv, dk, dv, chunk}: seq not a multiple of the chunk, seq < chunk, one head,
// dk != dv, grouped value heads, several chunks, the recurrent limit (chunk 1).
const GatedDeltaShape kShapes[] = {
    {1, 100, 1, 1, 16, 16, 64},  {2, 40, 2, 4, 16, 24, 64}, {1, 130, 2, 2, 32, 16, 16},
    {1, 64, 1, 2, 8, 8, 64},     {1, 70, 1, 3, 24, 8, 32},  {1, 9, 1, 1, 4, 4, 1},
};

TEST(GatedDeltaRule, ForwardMatchesRecurrence) {
  for (const auto& s : kShapes)
    for (bool with_state : {false, true}) {
      const Data d = make_data(s, uint64_t(s.seq * 7 + s.k_dim), with_state, false);
      const auto in = to_inputs(d);
      Vec out, fin;
      test::gdn::naive_forward(out, fin, in, s);
      const auto fb = test::gdn::forward_bounds(in, s);
      test::for_each_isa([&](Isa) {
        const KernelOut k = run_forward(d, s);
        EXPECT_TRUE(test::within_bound(k.out, out, fb.out)) << name(s) << " state=" << with_state;
        EXPECT_TRUE(test::within_bound(k.final_state, fin, fb.final_state))
            << name(s) << " state=" << with_state;
        // chunk 0's saved state is the initial one, exactly
        for (int64_t b = 0; b < s.batch; ++b)
          for (int64_t h = 0; h < s.v_heads; ++h)
            for (int64_t i = 0; i < s.k_dim * s.v_dim; ++i) {
              const float want = with_state ? d.s0[size_t((b * s.v_heads + h) * s.k_dim * s.v_dim + i)] : 0.0f;
              ASSERT_EQ(want, k.chunk_states[size_t(((b * s.v_heads + h) * s.n_chunks()) * s.k_dim * s.v_dim + i)]);
            }
      });
    }
}

// Ten chunks from a non-zero state: the error carried from chunk to chunk stays within
// the bound (its growth is linear in the chunk count, not exponential).
TEST(GatedDeltaRule, LongSequenceStaysNearRecurrence) {
  const GatedDeltaShape s{1, 600, 1, 2, 32, 32, 64};
  const Data d = make_data(s, 99, true, false);
  const auto in = to_inputs(d);
  Vec out, fin;
  test::gdn::naive_forward(out, fin, in, s);
  const auto fb = test::gdn::forward_bounds(in, s);
  const KernelOut k = run_forward(d, s);
  EXPECT_TRUE(test::within_bound(k.out, out, fb.out)) << name(s);
  EXPECT_TRUE(test::within_bound(k.final_state, fin, fb.final_state)) << name(s);
}

void expect_grads(const KernelGrads& k, const test::gdn::Grads& ref,
                  const test::gdn::BackwardBounds& bb, const std::string& what) {
  EXPECT_TRUE(test::within_bound(k.dq, ref.dq, filled(ref.dq.size(), bb.dq))) << "dq " << what;
  EXPECT_TRUE(test::within_bound(k.dk, ref.dk, filled(ref.dk.size(), bb.dk))) << "dk " << what;
  EXPECT_TRUE(test::within_bound(k.dv, ref.dv, filled(ref.dv.size(), bb.dv))) << "dv " << what;
  EXPECT_TRUE(test::within_bound(k.dg, ref.dg, filled(ref.dg.size(), bb.dg))) << "dg " << what;
  EXPECT_TRUE(test::within_bound(k.dbeta, ref.dbeta, filled(ref.dbeta.size(), bb.dbeta)))
      << "dbeta " << what;
  EXPECT_TRUE(test::within_bound(k.ds0, ref.ds0, filled(ref.ds0.size(), bb.ds0)))
      << "d_initial_state " << what;
}

TEST(GatedDeltaRule, BackwardMatchesReverseMode) {
  for (const auto& s : kShapes)
    for (int variant = 0; variant < 2; ++variant) {  // 1: initial state and d_final_state
      const Data d = make_data(s, uint64_t(s.seq * 3 + s.v_dim), variant == 1, variant == 1);
      const auto in = to_inputs(d);
      const auto ref = test::gdn::naive_backward(in, test::to_double(d.dout), test::to_double(d.dfinal), s);
      const auto fb = test::gdn::forward_bounds(in, s);
      const auto bb = test::gdn::backward_bounds(in, ref, s, fb.tau);
      test::for_each_isa([&](Isa) {
        const KernelOut f = run_forward(d, s);
        expect_grads(run_backward(d, f, s), ref, bb, name(s) + " variant " + std::to_string(variant));
      });
    }
}

// All inputs in one vector for the finite-difference harness: q, k, v, g, beta, s0.
struct Packed {
  GatedDeltaShape s;
  size_t nqk, nv, ng, ns;
  test::gdn::Inputs unpack(const std::vector<double>& x) const {
    test::gdn::Inputs in;
    auto take = [&](size_t at, size_t n) { return Vec(x.begin() + long(at), x.begin() + long(at + n)); };
    in.q = take(0, nqk);
    in.k = take(nqk, nqk);
    in.v = take(2 * nqk, nv);
    in.g = take(2 * nqk + nv, ng);
    in.beta = take(2 * nqk + nv + ng, ng);
    in.s0 = take(2 * nqk + nv + 2 * ng, ns);
    return in;
  }
};

TEST(GatedDeltaRule, GradientsMatchFiniteDifferences) {
  // two chunks (the second partial), grouped heads, dk != dv, initial state
  const GatedDeltaShape s{1, 7, 1, 2, 3, 2, 4};
  const Data d = make_data(s, 5, true, true);
  const auto in = to_inputs(d);
  const Packed pk{s, d.q.size(), d.v.size(), d.g.size(), d.s0.size()};
  std::vector<double> x;
  for (const Vec* p : {&in.q, &in.k, &in.v, &in.g, &in.beta, &in.s0}) x.insert(x.end(), p->begin(), p->end());
  // outputs: out then final state; the cotangent: d_out then d_final
  std::vector<double> dy = test::to_double(d.dout);
  for (float f : d.dfinal) dy.push_back(f);
  auto f = [&](const std::vector<double>& xs, std::vector<double>& y) {
    Vec out, fin;
    test::gdn::naive_forward(out, fin, pk.unpack(xs), s);
    std::copy(out.begin(), out.end(), y.begin());
    std::copy(fin.begin(), fin.end(), y.begin() + long(out.size()));
  };
  auto pack = [](const std::vector<const Vec*>& parts) {
    std::vector<double> v;
    for (const Vec* p : parts) v.insert(v.end(), p->begin(), p->end());
    return v;
  };
  // the float64 reverse mode: no allowance beyond the harness's own
  const auto ref = test::gdn::naive_backward(in, test::to_double(d.dout), test::to_double(d.dfinal), s);
  const auto r1 = test::fd::check_gradient(f, x, dy, pack({&ref.dq, &ref.dk, &ref.dv, &ref.dg, &ref.dbeta, &ref.ds0}));
  EXPECT_TRUE(r1.ok()) << "float64 reverse mode: " << r1.str();
  // the fp32 kernel, with its derived backward bound as the allowance
  const auto fb = test::gdn::forward_bounds(in, s);
  const auto bb = test::gdn::backward_bounds(in, ref, s, fb.tau);
  const double allowance = std::max({bb.dq, bb.dk, bb.dv, bb.dg, bb.dbeta, bb.ds0});
  test::for_each_isa([&](Isa) {
    const KernelGrads k = run_backward(d, run_forward(d, s), s);
    std::vector<double> ka;
    for (const auto* p : {&k.dq, &k.dk, &k.dv, &k.dg, &k.dbeta, &k.ds0}) ka.insert(ka.end(), p->begin(), p->end());
    test::fd::Options opt;
    opt.analytic_abs_err = allowance;
    const auto r2 = test::fd::check_gradient(f, x, dy, ka, opt);
    EXPECT_TRUE(r2.ok()) << "fp32 kernel: " << r2.str();
  });
}

TEST(GatedDeltaRule, BitwiseIdenticalAcrossThreadCounts) {
  const GatedDeltaShape s{2, 150, 2, 4, 16, 16, 64};
  const Data d = make_data(s, 17, true, true);
  test::for_each_isa([&](Isa) {
    KernelOut f1, f2;
    KernelGrads g1, g2;
    {
      test::ScopedThreads t(1);
      f1 = run_forward(d, s);
      g1 = run_backward(d, f1, s);
    }
    {
      test::ScopedThreads t(3);
      f2 = run_forward(d, s);
      g2 = run_backward(d, f2, s);
    }
    auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
      return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
    };
    EXPECT_TRUE(same(f1.out, f2.out));
    EXPECT_TRUE(same(f1.final_state, f2.final_state));
    EXPECT_TRUE(same(g1.dq, g2.dq) && same(g1.dk, g2.dk) && same(g1.dv, g2.dv));
    EXPECT_TRUE(same(g1.dg, g2.dg) && same(g1.dbeta, g2.dbeta) && same(g1.ds0, g2.ds0));
  });
}

TEST(GatedDeltaRule, BadShapesAreErrors) {
  GatedDeltaShape s{1, 8, 2, 3, 4, 4, 64};
  EXPECT_NE(test::error_of([&] { gated_delta_rule_forward_workspace_floats(s); }).find("not a multiple"),
            std::string::npos);
  s = {1, 0, 1, 1, 4, 4, 64};
  EXPECT_NE(test::error_of([&] { gated_delta_rule_forward_workspace_floats(s); }).find("seq is 0"),
            std::string::npos);
  s = {1, 8, 1, 1, 4, 4, 0};
  EXPECT_NE(test::error_of([&] { gated_delta_rule_backward_workspace_floats(s); }).find("chunk is 0"),
            std::string::npos);
  s = {1, 8, 1, 1, 4, 4, 4};
  std::vector<float> buf(4096, 0.0f);
  const std::string e = test::error_of([&] {
    gated_delta_rule_backward(buf.data(), buf.data(), buf.data(), buf.data(), buf.data(), nullptr,
                              buf.data(), nullptr, buf.data(), buf.data(), buf.data(), buf.data(),
                              buf.data(), nullptr, s, buf.data());
  });
  EXPECT_NE(e.find("chunk_states"), std::string::npos) << e;
}

}  // namespace
}  // namespace lt
