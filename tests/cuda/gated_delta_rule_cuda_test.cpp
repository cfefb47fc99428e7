// The gated delta rule on the GPU against the float64 recurrence (token by token) and its
// hand-written reverse mode (tests/kernels/gated_delta_reference.h), within the bounds
// derived for the chunked algorithm in fp32 (tests/kernels/gated_delta_bounds.h): the GPU
// kernels run the same chunk algebra as the CPU kernel, each sum a chain no longer than
// the bounds assume (the l2 norms' sums are shorter: 32 lanes, then 5 shuffle levels; the
// backward's dk*dv-term state dot is 256 threads' chains, then 8 levels).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "cuda_test_util.h"
#include "kernels/cuda/gated_delta_rule_cuda.h"
#include "kernels/gated_delta_bounds.h"
#include "kernels/gated_delta_reference.h"

namespace lt {
namespace {

using cuda::DeviceBuffer;
using cuda::to_device;
using cuda::to_host;
using test::gdn::Data;
using test::gdn::Vec;

std::string name(const GatedDeltaShape& s) {
  return "B=" + std::to_string(s.batch) + " S=" + std::to_string(s.seq) + " Hk=" + std::to_string(s.k_heads) +
         " Hv=" + std::to_string(s.v_heads) + " dk=" + std::to_string(s.k_dim) + " dv=" + std::to_string(s.v_dim) +
         " chunk=" + std::to_string(s.chunk);
}

void check_forward(const GatedDeltaShape& s, uint64_t seed, bool with_state) {
  const Data d = test::gdn::make_data(s, seed, with_state, false);
  const auto in = test::gdn::to_inputs(d);
  Vec out_ref, fin_ref;
  test::gdn::naive_forward(out_ref, fin_ref, in, s);
  const auto fb = test::gdn::forward_bounds(in, s);

  DeviceBuffer q = to_device(d.q), k = to_device(d.k), v = to_device(d.v), g = to_device(d.g), beta = to_device(d.beta);
  DeviceBuffer s0 = with_state ? to_device(d.s0) : DeviceBuffer();
  const int64_t n_out = s.batch * s.seq * s.v_heads * s.v_dim;
  DeviceBuffer out(n_out * 4), fin(s.state_floats() * 4), chunks(s.chunk_state_floats() * 4),
      ws(cuda::gated_delta_rule_forward_workspace_bytes(s));
  cuda::gated_delta_rule_forward(out.as<float>(), fin.as<float>(), chunks.as<float>(), q.as<float>(), k.as<float>(),
                                 v.as<float>(), g.as<float>(), beta.as<float>(),
                                 with_state ? s0.as<float>() : nullptr, s, ws.data());
  const std::vector<float> o = to_host<float>(out, n_out), f = to_host<float>(fin, s.state_floats()),
                           cs = to_host<float>(chunks, s.chunk_state_floats());
  const std::string what = name(s) + " state=" + std::to_string(with_state);
  test::expect_within(o, out_ref, fb.out, ("out " + what).c_str());
  test::expect_within(f, fin_ref, fb.final_state, ("final state " + what).c_str());
  // Chunk 0's saved state is the initial one, exactly.
  const int64_t dkdv = s.k_dim * s.v_dim;
  for (int64_t bh = 0; bh < s.batch * s.v_heads; ++bh)
    for (int64_t i = 0; i < dkdv; ++i) {
      const float want = with_state ? d.s0[size_t(bh * dkdv + i)] : 0.0f;
      ASSERT_EQ(want, cs[size_t(bh * s.n_chunks() * dkdv + i)]) << name(s);
    }
  // The last chunk's saved state is the final state of the sequence cut before that chunk
  // (with batch 1 the cut sequence is a prefix of each input): the same chunks run before
  // it, so the same bits.
  if (s.batch == 1 && s.n_chunks() > 1) {
    GatedDeltaShape cut = s;
    cut.seq = (s.n_chunks() - 1) * s.chunk;
    DeviceBuffer cut_fin(cut.state_floats() * 4), cut_out(cut.seq * s.v_heads * s.v_dim * 4),
        cut_ws(cuda::gated_delta_rule_forward_workspace_bytes(cut));
    cuda::gated_delta_rule_forward(cut_out.as<float>(), cut_fin.as<float>(), nullptr, q.as<float>(), k.as<float>(),
                                   v.as<float>(), g.as<float>(), beta.as<float>(),
                                   with_state ? s0.as<float>() : nullptr, cut, cut_ws.data());
    const std::vector<float> want = to_host<float>(cut_fin, cut.state_floats());
    for (int64_t h = 0; h < s.v_heads; ++h)
      for (int64_t i = 0; i < dkdv; ++i)
        ASSERT_EQ(test::bits_of(want[size_t(h * dkdv + i)]),
                  test::bits_of(cs[size_t((h * s.n_chunks() + s.n_chunks() - 1) * dkdv + i)]))
            << name(s) << " head " << h << " element " << i;
  }
}

// {B, S, Hk, Hv, dk, dv, chunk}: those of the CPU kernel's test (seq not a multiple of the
// chunk, seq < chunk, dk != dv, grouped value heads, several chunks, chunk 1), and the
// released models' head dims (128) with four value heads per key head.
const GatedDeltaShape kShapes[] = {
    {1, 100, 1, 1, 16, 16, 64}, {2, 40, 2, 4, 16, 24, 64}, {1, 130, 2, 2, 32, 16, 16}, {1, 64, 1, 2, 8, 8, 64},
    {1, 70, 1, 3, 24, 8, 32},   {1, 9, 1, 1, 4, 4, 1},     {1, 150, 1, 4, 128, 128, 64},
};

TEST(CudaKernels, GatedDeltaRuleForwardMatchesRecurrence) {
  LT_REQUIRE_CUDA_DEVICE();
  for (const auto& s : kShapes)
    for (bool with_state : {false, true}) check_forward(s, uint64_t(s.seq * 7 + s.k_dim), with_state);
}

struct Grads {
  std::vector<float> dq, dk, dv, dg, dbeta, ds0;
};

Grads run_backward(const Data& d, const GatedDeltaShape& s) {
  DeviceBuffer q = to_device(d.q), k = to_device(d.k), v = to_device(d.v), g = to_device(d.g), beta = to_device(d.beta);
  DeviceBuffer s0 = d.s0.empty() ? DeviceBuffer() : to_device(d.s0);
  DeviceBuffer dout = to_device(d.dout), dfin = d.dfinal.empty() ? DeviceBuffer() : to_device(d.dfinal);
  DeviceBuffer out(d.dout.size() * 4), chunks(s.chunk_state_floats() * 4),
      fws(cuda::gated_delta_rule_forward_workspace_bytes(s)), bws(cuda::gated_delta_rule_backward_workspace_bytes(s));
  cuda::gated_delta_rule_forward(out.as<float>(), nullptr, chunks.as<float>(), q.as<float>(), k.as<float>(),
                                 v.as<float>(), g.as<float>(), beta.as<float>(),
                                 d.s0.empty() ? nullptr : s0.as<float>(), s, fws.data());
  DeviceBuffer dq(d.q.size() * 4), dk(d.k.size() * 4), dv(d.v.size() * 4), dg(d.g.size() * 4),
      dbeta(d.beta.size() * 4), ds0(s.state_floats() * 4);
  cuda::gated_delta_rule_backward(dq.as<float>(), dk.as<float>(), dv.as<float>(), dg.as<float>(), dbeta.as<float>(),
                                  ds0.as<float>(), dout.as<float>(), d.dfinal.empty() ? nullptr : dfin.as<float>(),
                                  q.as<float>(), k.as<float>(), v.as<float>(), g.as<float>(), beta.as<float>(),
                                  chunks.as<float>(), s, bws.data());
  return {to_host<float>(dq, d.q.size()),       to_host<float>(dk, d.k.size()),
          to_host<float>(dv, d.v.size()),       to_host<float>(dg, d.g.size()),
          to_host<float>(dbeta, d.beta.size()), to_host<float>(ds0, s.state_floats())};
}

TEST(CudaKernels, GatedDeltaRuleBackwardMatchesReverseMode) {
  LT_REQUIRE_CUDA_DEVICE();
  for (const auto& s : kShapes)
    for (int variant = 0; variant < 2; ++variant) {  // 1: initial state and d_final_state
      const Data d = test::gdn::make_data(s, uint64_t(s.seq * 3 + s.v_dim), variant == 1, variant == 1);
      const auto in = test::gdn::to_inputs(d);
      const auto ref = test::gdn::naive_backward(in, test::to_double(d.dout), test::to_double(d.dfinal), s);
      const auto fb = test::gdn::forward_bounds(in, s);
      const auto bb = test::gdn::backward_bounds(in, ref, s, fb.tau);
      const Grads got = run_backward(d, s);
      const std::string what = name(s) + " variant " + std::to_string(variant);
      auto filled = [](const Vec& ref_grad, double b) { return Vec(ref_grad.size(), b); };
      test::expect_within(got.dq, ref.dq, filled(ref.dq, bb.dq), ("dq " + what).c_str());
      test::expect_within(got.dk, ref.dk, filled(ref.dk, bb.dk), ("dk " + what).c_str());
      test::expect_within(got.dv, ref.dv, filled(ref.dv, bb.dv), ("dv " + what).c_str());
      test::expect_within(got.dg, ref.dg, filled(ref.dg, bb.dg), ("dg " + what).c_str());
      test::expect_within(got.dbeta, ref.dbeta, filled(ref.dbeta, bb.dbeta), ("dbeta " + what).c_str());
      test::expect_within(got.ds0, ref.ds0, filled(ref.ds0, bb.ds0), ("d_initial_state " + what).c_str());
      // The same inputs twice: the same bits (no atomics, fixed orders).
      const Grads again = run_backward(d, s);
      EXPECT_EQ(0, std::memcmp(got.dq.data(), again.dq.data(), got.dq.size() * 4)) << what;
      EXPECT_EQ(0, std::memcmp(got.dg.data(), again.dg.data(), got.dg.size() * 4)) << what;
    }
}

// Ten chunks from a non-zero state: the error carried from chunk to chunk stays within the
// bound (linear in the chunk count).
TEST(CudaKernels, GatedDeltaRuleLongSequenceStaysNearRecurrence) {
  LT_REQUIRE_CUDA_DEVICE();
  check_forward({1, 600, 1, 2, 32, 32, 64}, 99, true);
}

TEST(CudaKernels, GatedDeltaRuleRejectsBadShapes) {
  GatedDeltaShape s{1, 10, 2, 3, 8, 8, 64};  // 3 value heads over 2 key heads
  EXPECT_THROW(cuda::gated_delta_rule_forward_workspace_bytes(s), std::invalid_argument);
  EXPECT_THROW(cuda::gated_delta_rule_backward_workspace_bytes(s), std::invalid_argument);
  s = {1, 0, 1, 1, 8, 8, 64};
  EXPECT_THROW(cuda::gated_delta_rule_forward_workspace_bytes(s), std::invalid_argument);
}

}  // namespace
}  // namespace lt
