// The fused AdamW kernels (8-bit and fp32 state, every variant the CPU runs) element by element
// against the float64 reference of the same algorithm (adamw_reference.h), at awkward sizes.
// Each step starts the reference from the kernel's own state, so errors cannot compound.
#include <gtest/gtest.h>

#include <string>

#include "adamw_reference.h"
#include "adamw_kernel_variants.h"
#include "adamw_test_util.h"
#include "core/error.h"
#include "optim/adamw.h"
#include "optim/quant_map.h"

namespace lt {
namespace {

using test::RefHyper;

struct Case {
  int64_t n;
  int64_t block = 256;
  int64_t min_8bit = 4096;
  bool bf16_grad = false;
};

// Checks one step of tensor 0 of `opt`; returns the number of codes that differ from the
// reference's nearest code (allowed only where rounding makes the choice ambiguous).
int64_t check_step(AdamW& opt, const RefHyper& h, std::vector<float>& p, const std::vector<float>& g32, bool bf16_grad) {
  const int64_t n = opt.numel(0), B = opt.config().block_size;
  const double u = 0x1p-24;
  const auto map_m = test::reference_dynamic_map(true), map_v = test::reference_dynamic_map(false);
  const std::vector<bf16> g16 = test::to_bf16(g32);
  std::vector<double> g(n);
  for (int64_t i = 0; i < n; ++i) g[i] = bf16_grad ? bf16_to_f32(g16[i]) : g32[i];

  const std::vector<float> p_old = p;
  const test::StateSnapshot s0 = test::snapshot(opt, 0);
  std::vector<bf16> out(n);
  const StepReport rep = bf16_grad ? opt.step_tensor(0, p.data(), g16.data(), out.data(), float(h.lr), float(h.clip), h.step)
                                   : opt.step_tensor(0, p.data(), g32.data(), out.data(), float(h.lr), float(h.clip), h.step);
  EXPECT_TRUE(rep.ok());
  const test::StateSnapshot s1 = test::snapshot(opt, 0);
  const bool q8 = opt.format(0) == StateFormat::Q8;

  int64_t code_diffs = 0, bad = 0;
  for (int64_t b0 = 0; b0 < n; b0 += B) {
    const int64_t len = std::min(B, n - b0), blk = b0 / B;
    std::vector<test::RefElement> e(len);
    double am = 0, av = 0, s_max = 0;
    for (int64_t j = 0; j < len; ++j) {
      const int64_t i = b0 + j;
      const double m_old = q8 ? map_m[s0.m_code[i]] * double(s0.m_absmax[blk]) : s0.m[i];
      const double v_old = q8 ? map_v[s0.v_code[i]] * double(s0.v_absmax[blk]) : s0.v[i];
      e[j] = test::reference_element(h, p_old[i], g[i], m_old, v_old);
      am = std::max(am, std::fabs(e[j].m));
      av = std::max(av, e[j].v);
      s_max = std::max(s_max, e[j].s_m);
    }
    for (int64_t j = 0; j < len && bad < 10; ++j) {
      const int64_t i = b0 + j;
      const double tol = test::reference_p_tolerance(h, p_old[i], e[j]);
      if (!(std::fabs(p[i] - e[j].p) <= tol)) {
        ADD_FAILURE() << "p[" << i << "] = " << p[i] << ", reference " << e[j].p << ", tolerance " << tol;
        ++bad;
      }
      if (out[i].bits != f32_to_bf16(p[i]).bits) {
        ADD_FAILURE() << "bf16 copy of p[" << i << "] is not the rounded parameter";
        ++bad;
      }
      if (!q8) {  // fp32 state: m within 4u s_m, v within 4u v (see adamw_reference.h)
        if (!(std::fabs(s1.m[i] - e[j].m) <= 8 * u * e[j].s_m + 1e-38) || !(std::fabs(s1.v[i] - e[j].v) <= 8 * u * e[j].v + 1e-38)) {
          ADD_FAILURE() << "m/v[" << i << "] = " << s1.m[i] << "/" << s1.v[i] << ", reference " << e[j].m << "/" << e[j].v;
          ++bad;
        }
        continue;
      }
      // Normalized states. The kernel's x differs from the reference's by at most dx (its m
      // error, its absmax error scaled by |x|, and 3 roundings of the normalization), so its
      // code may be any whose distance to x_ref is within 2 dx of the nearest one.
      const double xm = am > 0 ? e[j].m / am : 0, xv = av > 0 ? e[j].v / av : 0;
      const double dxm = am > 0 ? 2 * (4 * u * e[j].s_m / am + 4 * u * s_max / am * std::fabs(xm) + 3 * u * std::fabs(xm)) : 0;
      const double dxv = 2 * 11 * u * xv;
      const int km = s1.m_code[i], kv = s1.v_code[i];
      const int rm = test::reference_nearest(map_m, xm), rv = test::reference_nearest(map_v, xv);
      const bool ok_m = std::fabs(xm - map_m[km]) <= std::fabs(xm - map_m[rm]) + 2 * dxm;
      const bool ok_v = std::fabs(xv - map_v[kv]) <= std::fabs(xv - map_v[rv]) + 2 * dxv;
      if (!ok_m || !ok_v) {
        ADD_FAILURE() << "codes of element " << i << ": m " << km << " (reference " << rm << ", x " << xm << "), v " << kv
                      << " (reference " << rv << ", x " << xv << ")";
        ++bad;
      }
      code_diffs += (km != rm) + (kv != rv);
    }
    if (q8) {  // absmax: the max of values each within 4u s_m (m) or 4u v (v)
      EXPECT_NEAR(s1.m_absmax[blk], am, 8 * u * s_max + 1e-38) << "block " << blk;
      EXPECT_NEAR(s1.v_absmax[blk], av, 8 * u * av + 1e-38) << "block " << blk;
    }
  }
  return code_diffs;
}

void run_case(const Case& c, AdamWKernel kernel) {
  AdamWConfig cfg;
  cfg.block_size = c.block;
  cfg.min_8bit_numel = c.min_8bit;
  cfg.kernel = kernel;
  AdamW opt(cfg);
  opt.add_tensor("w", c.n);
  std::vector<float> p = test::normal_vector(c.n, 0.5f, 11 + c.n);
  // Steps 1..4 exercise large bias corrections; 1000 the settled regime. lr and the clip
  // factor vary so the decay and scaling terms are not trivial.
  const int64_t steps[] = {1, 2, 3, 4, 1000};
  int64_t diffs = 0;
  for (int k = 0; k < 5; ++k) {
    const RefHyper h{cfg.hyper.beta1, cfg.hyper.beta2, cfg.hyper.eps, cfg.hyper.weight_decay,
                     double(1e-3f * (k + 1)), double(k % 2 ? 0.625f : 1.0f), steps[k]};
    diffs += check_step(opt, h, p, test::spread_gradient(c.n, 1000 * k + c.n), c.bf16_grad);
    if (::testing::Test::HasFailure()) return;
  }
  // An ambiguous code needs the reference value within ~1e-6 relative of a midpoint.
  EXPECT_LE(diffs, 5 * 2 * c.n / 1000 + 2) << "too many codes off the reference's nearest";
}

std::string label(const Case& c) {
  return "n=" + std::to_string(c.n) + " block=" + std::to_string(c.block) + " min8=" + std::to_string(c.min_8bit) +
         (c.bf16_grad ? " bf16 grad" : " fp32 grad");
}

const Case kCases[] = {
    {1}, {22}, {4095}, {4097}, {1048577},                   // the sizes, default rules
    {1, 256, 1}, {22, 256, 1}, {4095, 256, 1},              // the same small sizes forced to 8-bit
    {4097, 256, 4096, true}, {5000, 16, 4096}, {70000, 4096, 4096, true}, {3000, 48, 1},
};

TEST(AdamWReference, ScalarKernelMatchesFloat64) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(label(c));
    run_case(c, AdamWKernel::Scalar);
  }
}

TEST(AdamWReference, VectorKernelsMatchFloat64) {
  test::for_each_kernel_variant([](AdamWKernel kernel) {
    if (kernel == AdamWKernel::Scalar) return;  // ScalarKernelMatchesFloat64
    for (const Case& c : kCases) {
      SCOPED_TRACE(label(c));
      run_case(c, kernel);
    }
  });
}

TEST(AdamWReference, FormatFollowsSizeAndOptions) {
  AdamW opt;
  EXPECT_EQ(opt.format(opt.add_tensor("small", 4095)), StateFormat::F32);
  EXPECT_EQ(opt.format(opt.add_tensor("large", 4096)), StateFormat::Q8);
  AdamWTensorOptions keep;
  keep.keep_fp32 = true;
  EXPECT_EQ(opt.format(opt.add_tensor("embed", 1 << 20, keep)), StateFormat::F32);
  // (4096 codes * 2) + 16 blocks * 2 absmax * 4 bytes, plus fp32 m, v for the others.
  EXPECT_EQ(opt.state_bytes(), 8 * 4095u + (2 * 4096u + 16 * 8u) + 8u * (1 << 20));
  EXPECT_THROW(opt.add_tensor("large", 10), Error);
  AdamWConfig bad;
  bad.block_size = 100;
  EXPECT_THROW(AdamW{bad}, Error);
}

}  // namespace
}  // namespace lt
