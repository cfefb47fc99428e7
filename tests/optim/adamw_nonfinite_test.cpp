// NaN/Inf gradients: the global check (clip_decision) skips the whole step; the kernels'
// block guard leaves any block with a non-finite gradient bit-for-bit unchanged and reports it.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "adamw_kernel_variants.h"
#include "adamw_test_util.h"
#include "core/error.h"
#include "optim/adamw.h"
#include "optim/grad_clip.h"

namespace lt {
namespace {

TEST(AdamWNonFinite, ClipDecisionFlagsNonFiniteNorm) {
  EXPECT_FALSE(clip_decision(std::numeric_limits<double>::quiet_NaN(), 1.0).finite);
  EXPECT_FALSE(clip_decision(std::numeric_limits<double>::infinity(), 1.0).finite);
  const ClipDecision d = clip_decision(16.0, 1.0);  // norm 4 -> factor 1 / (4 + 1e-6)
  EXPECT_TRUE(d.finite);
  EXPECT_DOUBLE_EQ(d.global_norm, 4.0);
  EXPECT_FLOAT_EQ(d.clip_factor, float(1.0 / (4.0 + 1e-6)));
  EXPECT_EQ(clip_decision(0.25, 1.0).clip_factor, 1.0f);  // below max_norm: no clipping
  EXPECT_EQ(clip_decision(1e6, 0.0).clip_factor, 1.0f);   // max_norm 0: clipping off
}

void check_block_guard(AdamWKernel kernel, int64_t n, bool bf16_grad) {
  AdamWConfig cfg;
  cfg.kernel = kernel;
  cfg.num_threads = 2;
  AdamW opt(cfg);
  opt.add_tensor("w", n);
  std::vector<float> p = test::normal_vector(n, 1.f, 3);
  std::vector<bf16> out(n);
  opt.step_tensor(0, p.data(), test::spread_gradient(n, 1).data(), out.data(), 1e-3f, 1.f, 1);  // non-zero state

  const int64_t B = cfg.block_size, nb = (n + B - 1) / B;
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), INFINITY, -INFINITY, 3e38f /* g^2 overflows */}) {
    std::vector<float> g = test::spread_gradient(n, 2);
    g[n - 1] = bad;  // last (possibly partial) block
    if (nb > 2) g[B + 7] = bad;  // block 1
    const std::vector<float> p0 = p;
    const std::vector<bf16> out0 = out;
    const test::StateSnapshot s0 = test::snapshot(opt, 0);
    const StepReport r = bf16_grad ? opt.step_tensor(0, p.data(), test::to_bf16(g).data(), out.data(), 1e-3f, 1.f, 2)
                                   : opt.step_tensor(0, p.data(), g.data(), out.data(), 1e-3f, 1.f, 2);
    const test::StateSnapshot s1 = test::snapshot(opt, 0);
    EXPECT_EQ(r.skipped_blocks, nb > 2 ? 2 : 1);
    // Bad blocks are untouched; every other block was updated.
    for (int64_t b = 0; b < nb; ++b) {
      const bool is_bad = b == nb - 1 || (nb > 2 && b == 1);
      const int64_t i0 = b * B, i1 = std::min(n, i0 + B);
      bool same = std::equal(p.begin() + i0, p.begin() + i1, p0.begin() + i0, [](float x, float y) {
        return std::memcmp(&x, &y, 4) == 0;
      });
      same &= std::equal(out.begin() + i0, out.begin() + i1, out0.begin() + i0, [](bf16 x, bf16 y) { return x.bits == y.bits; });
      if (opt.format(0) == StateFormat::Q8) {
        same &= std::equal(s1.m_code.begin() + i0, s1.m_code.begin() + i1, s0.m_code.begin() + i0);
        same &= std::equal(s1.v_code.begin() + i0, s1.v_code.begin() + i1, s0.v_code.begin() + i0);
        same &= s1.m_absmax[b] == s0.m_absmax[b] && s1.v_absmax[b] == s0.v_absmax[b];
      } else {
        same &= std::equal(s1.m.begin() + i0, s1.m.begin() + i1, s0.m.begin() + i0);
        same &= std::equal(s1.v.begin() + i0, s1.v.begin() + i1, s0.v.begin() + i0);
      }
      EXPECT_EQ(same, is_bad) << "block " << b << " of " << nb << " with gradient " << bad;
    }
    p = p0;  // restore for the next kind of bad value (state of good blocks moved on: fine)
  }
}

TEST(AdamWNonFinite, BadBlocksLeftUnchanged) {
  test::for_each_kernel_variant([](AdamWKernel k) {
    for (int64_t n : {int64_t{22}, int64_t{4097}, int64_t{100000}})
      for (bool bf16_grad : {false, true}) {
        SCOPED_TRACE("n=" + std::to_string(n) + (bf16_grad ? " bf16" : " fp32"));
        check_block_guard(k, n, bf16_grad);
      }
  });
}

TEST(AdamWNonFinite, BadArgumentsThrow) {
  AdamW opt;
  opt.add_tensor("w", 10);
  std::vector<float> p(10), g(10);
  EXPECT_THROW(opt.step_tensor(0, p.data(), g.data(), nullptr, 1e-3f, 1.f, 0), Error);  // step 0
  EXPECT_THROW(opt.step_tensor(0, p.data(), g.data(), nullptr, NAN, 1.f, 1), Error);
  EXPECT_THROW(opt.step_tensor(0, p.data(), g.data(), nullptr, 1e-3f, NAN, 1), Error);
  EXPECT_THROW(opt.step_tensor(0, p.data(), g.data(), nullptr, 1e-3f, 1.5f, 1), Error);
}

}  // namespace
}  // namespace lt
