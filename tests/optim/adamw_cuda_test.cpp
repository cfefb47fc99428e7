// The CUDA 8-bit AdamW kernel against the CPU kernels, bit for bit (both evaluate the
// same round-to-nearest fp32 operations in the same order). Runs only where the build found
// nvcc and the machine has a GPU; otherwise it is skipped with the reason printed.
#include <gtest/gtest.h>

#include <cmath>

#include "adamw_test_util.h"
#include "optim/adamw.h"
#include "optim/quant_map.h"
#ifdef LT_HAVE_CUDA
#include "kernels/cuda/adamw8_cuda.h"
#endif

namespace lt {
namespace {

#ifdef LT_HAVE_CUDA
void compare_one(int64_t n, bool bf16_grad) {
  AdamWConfig cfg;
  cfg.min_8bit_numel = 1;
  AdamW opt(cfg);
  opt.add_tensor("w", n);
  std::vector<float> p = test::normal_vector(n, 0.4f, 9);
  for (int64_t step = 1; step <= 2; ++step)  // non-trivial state first
    opt.step_tensor(0, p.data(), test::spread_gradient(n, step).data(), nullptr, 1e-3f, 1.f, step);
  std::vector<float> g = test::spread_gradient(n, 3);
  if (n > 600) g[300] = NAN;  // block 1 must be skipped by both
  const std::vector<bf16> g16 = test::to_bf16(g);
  const test::StateSnapshot s0 = test::snapshot(opt, 0);
  std::vector<float> p_gpu = p;

  std::vector<bf16> out_cpu(n);
  const StepReport r = bf16_grad ? opt.step_tensor(0, p.data(), g16.data(), out_cpu.data(), 2e-3f, 0.75f, 3)
                                 : opt.step_tensor(0, p.data(), g.data(), out_cpu.data(), 2e-3f, 0.75f, 3);
  const test::StateSnapshot s1 = test::snapshot(opt, 0);

  const AdamWStepConsts c = make_step_consts(cfg.hyper, 2e-3f, 0.75f, 3);
  const cuda::AdamW8DeviceConsts dc{c.beta1, c.one_minus_beta1, c.beta2, c.one_minus_beta2, c.eps,
                                    c.decay, c.step_size, c.inv_sqrt_bc2, c.clip};
  const cuda::AdamW8DeviceMaps maps{signed_dynamic_map().value, signed_dynamic_map().tree,
                                    unsigned_dynamic_map().value, unsigned_dynamic_map().tree};
  test::StateSnapshot sg = s0;
  std::vector<uint16_t> out_gpu(n);
  const int skipped = cuda::adamw8_step_host(
      p_gpu.data(), bf16_grad ? nullptr : g.data(), bf16_grad ? reinterpret_cast<const uint16_t*>(g16.data()) : nullptr,
      out_gpu.data(), sg.m_code.data(), sg.v_code.data(), sg.m_absmax.data(), sg.v_absmax.data(), n,
      static_cast<int>(cfg.block_size), dc, maps);
  EXPECT_EQ(skipped, r.skipped_blocks);
  EXPECT_TRUE(test::same_bits(p, p_gpu));
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out_cpu[i].bits, out_gpu[i]) << i;
  EXPECT_EQ(sg, s1);
}
#endif

TEST(AdamWCuda, MatchesCpuKernelBitwise) {
#ifndef LT_HAVE_CUDA
  GTEST_SKIP() << "built without CUDA: CMake found no working nvcc (the CPU kernels are tested elsewhere)";
#else
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine: the GPU kernel was compiled but not run";
  for (int64_t n : {int64_t{1}, int64_t{22}, int64_t{4097}, int64_t{1048577}})
    for (bool bf16_grad : {false, true}) {
      SCOPED_TRACE("n=" + std::to_string(n) + (bf16_grad ? " bf16" : " fp32"));
      compare_one(n, bf16_grad);
    }
#endif
}

}  // namespace
}  // namespace lt
