// The tensor-core attention's forward kernel (kernels/cuda/attention_tc_forward.cuh) run
// on the CPU under the warp emulator (warp_emulator.h: host threads for CUDA threads, the
// PTX ISA's fragment layouts for mma.m16n8k16) against float64, with the bounds of its GPU
// test (attention_tc_checks.h). This checks the kernel's own logic - fragment indexing,
// tiles, masks, the online softmax - on any machine; the GPU test checks the hardware's.
// Smaller shapes than the GPU test's: each emulated product is two barriers of 32 threads.
#include "kernels/warp_emulator.h"  // first: it stands in for CUDA in the kernel's header

#include "kernels/cuda/attention_tc_forward.cuh"

#include <gtest/gtest.h>

#include "kernels/attention_tc_checks.h"

namespace lt {
namespace {

using test::TcCase;

template <int DP>
void launch(std::vector<float>& o, std::vector<float>& lse, const std::vector<float>& q, const std::vector<float>& k,
            const std::vector<float>& v, const cuda::tc::TcShape& s) {
  const auto blocks = static_cast<unsigned>((s.S + cuda::tc::kBlockRows - 1) / cuda::tc::kBlockRows);
  emu::launch(blocks, static_cast<unsigned>(s.Hq), static_cast<unsigned>(s.B), cuda::tc::kThreads,
              cuda::tc::Tiles<DP>::kBytes, &cuda::tc::forward_tc_kernel<DP>, o.data(), lse.data(), q.data(), k.data(),
              v.data(), s);
}

void run_emulated(std::vector<float>& o, std::vector<float>& lse, const std::vector<float>& q,
                  const std::vector<float>& k, const std::vector<float>& v, const int32_t* doc, const TcCase& c) {
  const cuda::tc::TcShape s{c.B, c.S, c.Hq, c.Hkv, c.D, 1.0f / std::sqrt(static_cast<float>(c.D)), doc, c.window};
  if (c.D <= 64) launch<64>(o, lse, q, k, v, s);
  else if (c.D <= 128) launch<128>(o, lse, q, k, v, s);
  else launch<256>(o, lse, q, k, v, s);
}

TEST(WarpEmulatedKernels, TensorCoreAttentionForwardMatchesFloat64) {
  test::check_forward({1, 67, 2, 1, 64, 0, false}, run_emulated);    // causal, GQA 2, a partial second tile
  test::check_forward({1, 200, 3, 1, 128, 40, false}, run_emulated); // sliding window: tiles skipped, GQA 3
  test::check_forward({2, 100, 1, 1, 80, 0, true}, run_emulated);    // documents, D padded to 128
  test::check_forward({1, 70, 2, 1, 256, 9, true}, run_emulated);    // both, MQA, the largest head dim
}

}  // namespace
}  // namespace lt
