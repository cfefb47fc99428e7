// Every backend's kernel table (exec/backend.h: Backend::kernels()) against float64
// references, for the op families tests/exec/backend_ops_test.cpp leaves out: attention,
// the head's cross-entropy (whole and streamed), gated RMSNorm, the causal conv1d with
// SiLU, the gated delta rule and GeGLU; forward and backward, each on one small shape.
// The bounds are the ones the kernel tests derive from fp32's unit roundoff and the
// magnitude of the terms, taken from the shared headers they live in (each case names
// its source); none is tuned here. Outputs a backward overwrites start as NaN (or 1e30),
// gradients it accumulates into (+=) start from random values, so a backend that
// overwrites where it should add, or leaves an element unwritten, fails.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/dtype.h"
#include "exec/backend.h"
#include "kernels/attention_bounds.h"
#include "kernels/conv_norm_reference.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cross_entropy_bounds.h"
#include "kernels/delta_rule_gates_checks.h"
#include "kernels/gated_delta_bounds.h"
#include "kernels/geglu_bounds.h"
#include "kernels/kernel_test_util.h"

namespace lt {
namespace {

using test::kU32;

class BackendOpsMixers : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { backend_ = make_backend(GetParam()); }
  const KernelTable& k() const { return backend_->kernels(); }
  std::unique_ptr<Backend> backend_;
};

// The attention bounds are first order; tests/kernels/attention_test.cpp allows twice them
// for the second-order terms they drop, plus a floor under underflow.
std::vector<double> twice(std::vector<double> b) {
  for (double& e : b) e = 2 * e + 1e-30;
  return b;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Grouped-query attention (Hq 4 over Hkv 2), two rows of packed documents, without and
// with a sliding window. Bounds: tests/kernels/attention_bounds.h (error_bounds), over
// the keys each query sees, with one key tile more for a document or window edge inside
// a tile, as attention_test.cpp's check_window derives them.
TEST_P(BackendOpsMixers, AttentionGroupedQueryWithDocumentsAndWindow) {
  const test::attn::Shape s{2, 13, 4, 2, 16};
  // Row 0: documents of 5 and 8 tokens; row 1: of 1, 7 and 5.
  const std::vector<std::vector<int64_t>> lengths = {{5, 8}, {1, 7, 5}};
  std::vector<int32_t> ds;
  for (const auto& row : lengths) {
    int64_t start = 0;
    for (int64_t len : row) {
      for (int64_t i = 0; i < len; ++i) ds.push_back(int32_t(start));
      start += len;
    }
  }
  ASSERT_EQ(ds.size(), static_cast<size_t>(s.B * s.S));
  ASSERT_TRUE(valid_doc_starts(ds.data(), s.B, s.S));
  for (int64_t window : {int64_t{0}, int64_t{4}}) {
    SCOPED_TRACE("window " + std::to_string(window));
    const test::attn::Inputs in = test::attn::make_inputs(s, uint64_t(50 + window));
    const float scale = 0.8f / std::sqrt(float(s.D));
    const auto q = test::to_double(in.q), kk = test::to_double(in.k), v = test::to_double(in.v);
    const auto dout = test::to_double(in.dout);
    std::vector<double> ro(static_cast<size_t>(s.nq())), rl(static_cast<size_t>(s.nl()));
    ref::attention_forward<double>(ro.data(), rl.data(), q.data(), kk.data(), v.data(), s.B, s.S, s.Hq, s.Hkv, s.D,
                                   scale, ds.data(), window);
    const test::attn::ErrorBounds ef = test::attn::error_bounds(s, in, ro, rl, scale, 1, ds.data(), window);
    std::vector<float> o(ro.size(), NAN), lse(rl.size(), NAN);  // NaN: every element must be written
    k().attention_forward(o.data(), lse.data(), in.q.data(), in.k.data(), in.v.data(), s.B, s.S, s.Hq, s.Hkv, s.D,
                          scale, ds.data(), window, Precision::F32);
    EXPECT_TRUE(test::within_bound(o, ro, twice(ef.o))) << "o";
    EXPECT_TRUE(test::within_bound(lse, rl, twice(ef.lse))) << "lse";

    // Backward from the forward's fp32 o and lse, the same values on both sides; dq, dk,
    // dv overwrite.
    const std::vector<float> of(ro.begin(), ro.end()), lf(rl.begin(), rl.end());
    const auto od = test::to_double(of), ld = test::to_double(lf);
    std::vector<double> rdq(q.size()), rdk(kk.size()), rdv(v.size());
    ref::attention_backward<double>(rdq.data(), rdk.data(), rdv.data(), dout.data(), q.data(), kk.data(), v.data(),
                                    od.data(), ld.data(), s.B, s.S, s.Hq, s.Hkv, s.D, scale, ds.data(), window);
    const test::attn::ErrorBounds eb = test::attn::error_bounds(s, in, od, ld, scale, 1, ds.data(), window);
    std::vector<float> dq(q.size(), NAN), dk(kk.size(), NAN), dv(v.size(), NAN);
    k().attention_backward(dq.data(), dk.data(), dv.data(), in.dout.data(), in.q.data(), in.k.data(), in.v.data(),
                           of.data(), lf.data(), s.B, s.S, s.Hq, s.Hkv, s.D, scale, ds.data(), window, Precision::F32);
    EXPECT_TRUE(test::within_bound(dq, rdq, twice(eb.dq))) << "dq";
    EXPECT_TRUE(test::within_bound(dk, rdk, twice(eb.dk))) << "dk";
    EXPECT_TRUE(test::within_bound(dv, rdv, twice(eb.dv))) << "dv";

    // The cpu and emu tables compute attention in fp32 under bf16 too, bit for bit
    // (kernel_table.h); the CUDA table's bf16 kernels are tested in tests/cuda/.
    {
      std::vector<float> o16(o.size(), NAN), lse16(lse.size(), NAN), dq16(dq.size(), NAN), dk16(dk.size(), NAN),
          dv16(dv.size(), NAN);
      k().attention_forward(o16.data(), lse16.data(), in.q.data(), in.k.data(), in.v.data(), s.B, s.S, s.Hq, s.Hkv,
                            s.D, scale, ds.data(), window, Precision::BF16);
      k().attention_backward(dq16.data(), dk16.data(), dv16.data(), in.dout.data(), in.q.data(), in.k.data(),
                             in.v.data(), of.data(), lf.data(), s.B, s.S, s.Hq, s.Hkv, s.D, scale, ds.data(), window,
                             Precision::BF16);
      EXPECT_TRUE(same_bits(o16, o) && same_bits(lse16, lse) && same_bits(dq16, dq) && same_bits(dk16, dk) &&
                  same_bits(dv16, dv))
          << "bf16 attention differs from fp32 on " << GetParam();
    }
  }
}

struct HeadResult {
  double loss = 0;
  std::vector<float> dx, dw;
};

// The kernels' workspace, exactly as many bytes as the table asks for (a multiple of 64,
// so that the sanitizers see a write past it), filled with NaN's bits: nothing may be read
// before it is written.
struct Workspace {
  explicit Workspace(size_t bytes) : p(static_cast<std::byte*>(std::aligned_alloc(64, std::max<size_t>(bytes, 64)))) {
    EXPECT_EQ(bytes % 64, 0u);
    std::memset(p.get(), 0xff, std::max<size_t>(bytes, 64));
  }
  struct Free {
    void operator()(std::byte* b) const { std::free(b); }
  };
  std::unique_ptr<std::byte, Free> p;
};

// The whole call: dx overwrites (it starts at 1e30), dw accumulates into pr.dw0.
HeadResult head_whole(const KernelTable& k, const test::xent::Problem& pr, const CrossEntropyOptions& opt) {
  HeadResult r;
  r.dx.assign(static_cast<size_t>(pr.T * pr.C), 1e30f);
  r.dw = pr.dw0;
  Workspace ws(k.head_cross_entropy_workspace_bytes(pr.T, pr.C, pr.V, Precision::F32, false, opt));
  r.loss = k.head_cross_entropy(r.dx.data(), r.dw.data(), pr.x.data(), pr.w.data(), nullptr, pr.targets.data(),
                                pr.T, pr.C, pr.V, pr.grad_scale, Precision::F32, opt, ws.p.get());
  return r;
}

// The streamed form over row chunks of `rows`: forward() over every chunk, loss(), then
// backward() over every chunk, each chunk's gradient rows in a buffer of their own (as
// the executor's slots), starting from pr.dw0's rows.
HeadResult head_streamed(const KernelTable& k, const test::xent::Problem& pr, const CrossEntropyOptions& opt,
                         int64_t rows) {
  HeadResult r;
  Workspace ws(k.head_cross_entropy_workspace_bytes(pr.T, pr.C, pr.V, Precision::F32, true, opt));
  auto ce = k.head_cross_entropy_stream(pr.x.data(), pr.targets.data(), pr.T, pr.C, pr.V, pr.grad_scale,
                                        Precision::F32, opt, ws.p.get());
  for (int64_t v0 = 0; v0 < pr.V; v0 += rows)
    ce->forward(pr.w.data() + v0 * pr.C, nullptr, v0, std::min(rows, pr.V - v0));
  r.loss = ce->loss();
  r.dx.assign(static_cast<size_t>(pr.T * pr.C), 1e30f);
  r.dw = pr.dw0;
  for (int64_t v0 = 0; v0 < pr.V; v0 += rows) {
    const int64_t nv = std::min(rows, pr.V - v0);
    std::vector<float> chunk(r.dw.begin() + v0 * pr.C, r.dw.begin() + (v0 + nv) * pr.C);
    ce->backward(r.dx.data(), chunk.data(), pr.w.data() + v0 * pr.C, nullptr, v0, nv);
    std::copy(chunk.begin(), chunk.end(), r.dw.begin() + v0 * pr.C);
  }
  return r;
}

// The head's cross-entropy, fp32, with ignored targets: the whole call against
// ref::head_cross_entropy<double> within the bounds tests/kernels/cross_entropy_bounds.h
// derives (test::xent::expected, for the chunk counts the call uses), and the streamed
// form over row chunks that are multiples of the sub-chunk, bitwise the whole call
// (kernels/head_cross_entropy_stream.h). Two problems:
//  - a small vocabulary split by CrossEntropyOptions{.vocab_chunk = 16} into 7 sub-chunks,
//    passed to the whole call and the stream alike; the stream's chunks are multiples of
//    that sub-chunk. (The table's head_cross_entropy_vocab_chunk takes no options: it
//    gives the sub-chunk under the default options, which is V here.)
//  - a vocabulary of two default sub-chunks and a ragged third under the default
//    options, streamed in multiples of head_cross_entropy_vocab_chunk(T, V, p), as the
//    streaming executor streams the head.
TEST_P(BackendOpsMixers, HeadCrossEntropyWholeAndStreamed) {
  struct Case {
    test::xent::Problem pr;
    CrossEntropyOptions opt;
  };
  const Case cases[] = {
      {test::xent::make_problem(37, 24, 101, 61, 5), CrossEntropyOptions{.vocab_chunk = 16}},
      {test::xent::make_problem(6, 8, 2 * kCrossEntropyVocabChunk + 37, 62, 3), CrossEntropyOptions{}},
  };
  for (const Case& c : cases) {
    const test::xent::Problem& pr = c.pr;
    SCOPED_TRACE("T=" + std::to_string(pr.T) + " V=" + std::to_string(pr.V));
    const auto [n_tc, n_vc] = test::xent::chunk_counts(pr, c.opt.max_logit_bytes, Precision::F32, c.opt.vocab_chunk);
    ASSERT_GE(n_vc, 3) << "the case should split the vocabulary";
    const test::xent::Expected e = test::xent::expected(pr, false, n_tc, n_vc);
    const HeadResult whole = head_whole(k(), pr, c.opt);
    EXPECT_NEAR(whole.loss, e.loss, e.loss_bound);
    EXPECT_TRUE(test::within_bound(whole.dx, e.dx, e.dx_bound)) << "dx";
    EXPECT_TRUE(test::within_bound(whole.dw, e.dw, e.dw_bound)) << "dw";

    // The sub-chunk the stream's row chunks must be multiples of: the table's entry under
    // the default options; under others the stream's own (StreamedHeadCrossEntropy::
    // vocab_chunk(), which is cross_entropy_chunks' under the same options).
    const int64_t sub = c.opt.vocab_chunk == kCrossEntropyVocabChunk
                            ? k().head_cross_entropy_vocab_chunk(pr.T, pr.V, Precision::F32)
                            : cross_entropy_chunks(pr.T, pr.V, c.opt, Precision::F32).vocab_chunk;
    ASSERT_LT(sub, pr.V);
    for (int64_t rows : {sub, 2 * sub}) {
      SCOPED_TRACE("row chunks of " + std::to_string(rows));
      const HeadResult streamed = head_streamed(k(), pr, c.opt, rows);
      EXPECT_EQ(std::memcmp(&streamed.loss, &whole.loss, sizeof(double)), 0) << streamed.loss << " vs " << whole.loss;
      EXPECT_TRUE(same_bits(streamed.dx, whole.dx)) << "dx";
      EXPECT_TRUE(same_bits(streamed.dw, whole.dw)) << "dw";
    }
  }
}

// Gated RMSNorm over T 300 (two of the kernel's dw token chunks), D 32. Bounds:
// tests/kernels/conv_norm_reference.h (norm_reference), the backward given the kernel's own
// rstd on both sides. dx, dz overwrite; dw accumulates.
TEST_P(BackendOpsMixers, GatedRmsNorm) {
  const int64_t T = 300, D = 32;
  const float eps = 1e-6f;
  const test::convnorm::NormData d = test::convnorm::norm_data(T, D, 71);
  std::vector<float> y(d.x.size(), NAN), rstd(static_cast<size_t>(T), NAN), dx(d.x.size(), NAN),
      dz(d.x.size(), NAN), dw = d.dw0, ws(k().gated_rmsnorm_backward_workspace_floats(T, D), NAN);
  k().gated_rmsnorm_forward(y.data(), rstd.data(), d.x.data(), d.z.data(), d.w.data(), T, D, eps);
  k().gated_rmsnorm_backward(dx.data(), dz.data(), dw.data(), d.dy.data(), d.x.data(), d.z.data(), d.w.data(),
                             rstd.data(), T, D, ws.data());
  const auto ref = test::convnorm::norm_reference(test::to_double(d.x), test::to_double(d.z), test::to_double(d.w),
                                                  test::to_double(d.dy), test::to_double(d.dw0),
                                                  test::to_double(rstd), T, D, double(eps));
  EXPECT_TRUE(test::within_bound(y, ref.y, ref.by)) << "y";
  EXPECT_TRUE(test::within_bound(rstd, ref.rstd, ref.brstd)) << "rstd";
  EXPECT_TRUE(test::within_bound(dx, ref.dx, ref.bdx)) << "dx";
  EXPECT_TRUE(test::within_bound(dz, ref.dz, ref.bdz)) << "dz";
  EXPECT_TRUE(test::within_bound(dw, ref.dw, ref.bdw)) << "dw";
}

// The causal depthwise conv1d + SiLU, kernel 4, B 2. Bounds: tests/kernels/
// conv_norm_reference.h (conv_reference). dx overwrites; dw accumulates.
TEST_P(BackendOpsMixers, CausalConv1dSilu) {
  const CausalConvShape s{2, 19, 40, 4};
  const test::convnorm::ConvData d = test::convnorm::conv_data(s, 72);
  std::vector<float> y(d.x.size(), NAN), dx(d.x.size(), NAN), dw = d.dw0;
  k().causal_conv1d_silu_forward(y.data(), d.x.data(), d.w.data(), s);
  k().causal_conv1d_silu_backward(dx.data(), dw.data(), d.dy.data(), d.x.data(), d.w.data(), s);
  const auto ref = test::convnorm::conv_reference(test::to_double(d.x), test::to_double(d.w), test::to_double(d.dy),
                                                  test::to_double(d.dw0), s.batch, s.seq, s.channels, s.kernel);
  EXPECT_TRUE(test::within_bound(y, ref.y, ref.by)) << "y";
  EXPECT_TRUE(test::within_bound(dx, ref.dx, ref.bdx)) << "dx";
  EXPECT_TRUE(test::within_bound(dw, ref.dw, ref.bdw)) << "dw";
}

// The chunked gated delta rule: grouped value heads (Hv 4 over Hk 2), dk != dv, three
// chunks of 16 (the last partial), an initial state and a final-state gradient. Against
// the token-by-token recurrence and its reverse mode (tests/kernels/
// gated_delta_reference.h) within tests/kernels/gated_delta_bounds.h's bounds
// (elementwise forward, normwise per tensor backward), as gated_delta_rule_test.cpp uses
// them. Every gradient overwrites.
TEST_P(BackendOpsMixers, GatedDeltaRule) {
  const GatedDeltaShape s{2, 40, 2, 4, 16, 24, 16};
  const test::gdn::Data d = test::gdn::make_data(s, 73, true, true);
  std::vector<float> out(d.v.size(), NAN), fin(static_cast<size_t>(s.state_floats()), NAN),
      states(static_cast<size_t>(s.chunk_state_floats()), NAN),
      fws(k().gated_delta_rule_forward_workspace_floats(s), NAN);
  k().gated_delta_rule_forward(out.data(), fin.data(), states.data(), d.q.data(), d.k.data(), d.v.data(), d.g.data(),
                               d.beta.data(), d.s0.data(), s, fws.data());
  const test::gdn::Inputs in = test::gdn::to_inputs(d);
  test::gdn::Vec rout, rfin;
  test::gdn::naive_forward(rout, rfin, in, s);
  const test::gdn::ForwardBounds fb = test::gdn::forward_bounds(in, s);
  EXPECT_TRUE(test::within_bound(out, rout, fb.out)) << "out";
  EXPECT_TRUE(test::within_bound(fin, rfin, fb.final_state)) << "final_state";

  std::vector<float> dq(d.q.size(), NAN), dk(d.k.size(), NAN), dv(d.v.size(), NAN), dg(d.g.size(), NAN),
      dbeta(d.beta.size(), NAN), ds0(d.s0.size(), NAN), bws(k().gated_delta_rule_backward_workspace_floats(s), NAN);
  k().gated_delta_rule_backward(dq.data(), dk.data(), dv.data(), dg.data(), dbeta.data(), ds0.data(), d.dout.data(),
                                d.dfinal.data(), d.q.data(), d.k.data(), d.v.data(), d.g.data(), d.beta.data(),
                                states.data(), s, bws.data());
  const test::gdn::Grads ref = test::gdn::naive_backward(in, test::to_double(d.dout), test::to_double(d.dfinal), s);
  const test::gdn::BackwardBounds bb = test::gdn::backward_bounds(in, ref, s, fb.tau);
  auto all = [](const std::vector<float>& got, double b) { return std::vector<double>(got.size(), b); };
  EXPECT_TRUE(test::within_bound(dq, ref.dq, all(dq, bb.dq))) << "dq";
  EXPECT_TRUE(test::within_bound(dk, ref.dk, all(dk, bb.dk))) << "dk";
  EXPECT_TRUE(test::within_bound(dv, ref.dv, all(dv, bb.dv))) << "dv";
  EXPECT_TRUE(test::within_bound(dg, ref.dg, all(dg, bb.dg))) << "dg";
  EXPECT_TRUE(test::within_bound(dbeta, ref.dbeta, all(dbeta, bb.dbeta))) << "dbeta";
  EXPECT_TRUE(test::within_bound(ds0, ref.ds0, all(ds0, bb.ds0))) << "d_initial_state";
}

// GeGLU (gelu_pytorch_tanh gate) with gates past exp's clamp, at zero and where the
// backward's bracket cancels. Bounds: tests/kernels/geglu_bounds.h. dg, du overwrite.
TEST_P(BackendOpsMixers, GeGlu) {
  const int64_t n = 1000;
  const size_t len = static_cast<size_t>(n);
  auto g = test::random_floats(len, 74, -12, 12), u = test::random_floats(len, 75), dh = test::random_floats(len, 76);
  g[1] = -95.0f, g[2] = 95.0f, g[3] = 0.0f, g[4] = -0.75f;
  std::vector<float> h(len, NAN), dg(len, NAN), du(len, NAN);
  k().geglu_forward(h.data(), g.data(), u.data(), n);
  k().geglu_backward(dg.data(), du.data(), dh.data(), g.data(), u.data(), n);
  const test::GegluExpected e = test::geglu_expected(g, u, dh);
  EXPECT_TRUE(test::within_bound(h, e.h, e.bh)) << "h";
  EXPECT_TRUE(test::within_bound(dg, e.dg, e.bdg)) << "dg";
  EXPECT_TRUE(test::within_bound(du, e.du, e.bdu)) << "du";
}

// The Gated DeltaNet's gates (tests/kernels/delta_rule_gates_checks.h derives the bounds).
TEST_P(BackendOpsMixers, DeltaRuleGates) {
  const test::delta_gates::Inputs in = test::delta_gates::make_inputs(200, 4);
  test::delta_gates::expect_gates(test::delta_gates::run_on_host(k(), in), in, /*exp_ulps=*/1, /*log1p_ulps=*/1);
}

INSTANTIATE_TEST_SUITE_P(EveryBackend, BackendOpsMixers, ::testing::Values("cpu", "emu"),
                         [](const ::testing::TestParamInfo<const char*>& info) { return std::string(info.param); });

}  // namespace
}  // namespace lt
