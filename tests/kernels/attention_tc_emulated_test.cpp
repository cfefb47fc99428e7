// The tensor-core attention's kernels (kernels/cuda/attention_tc_{forward,backward}.cuh) run
// on the CPU under the warp emulator (warp_emulator.h: host threads for CUDA threads, the
// PTX ISA's fragment layouts for mma.m16n8k16) against float64, with the bounds of its GPU
// test (attention_tc_checks.h). This checks the kernel's own logic - fragment indexing,
// tiles, masks, the online softmax - on any machine; the GPU test checks the hardware's.
// Smaller shapes than the GPU test's: each emulated product is two barriers of 32 threads.
#include "kernels/warp_emulator.h"  // first: it stands in for CUDA in the kernel's header

#include "kernels/cuda/attention_tc_backward.cuh"
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
              cuda::tc::forward_smem_bytes<DP>(), &cuda::tc::forward_tc_kernel<DP>, o.data(), lse.data(), q.data(),
              k.data(), v.data(), s);
}

void run_emulated(std::vector<float>& o, std::vector<float>& lse, const std::vector<float>& q,
                  const std::vector<float>& k, const std::vector<float>& v, const int32_t* doc, const TcCase& c) {
  const cuda::tc::TcShape s{c.B, c.S, c.Hq, c.Hkv, c.D, 1.0f / std::sqrt(static_cast<float>(c.D)), doc, c.window};
  if (c.D <= 64) launch<64>(o, lse, q, k, v, s);
  else if (c.D <= 128) launch<128>(o, lse, q, k, v, s);
  else launch<256>(o, lse, q, k, v, s);
}

template <int DP>
void launch_backward(std::vector<float>& dq, std::vector<float>& dk, std::vector<float>& dv,
                     const std::vector<float>& dout, const std::vector<float>& q, const std::vector<float>& k,
                     const std::vector<float>& v, const std::vector<float>& o, const std::vector<float>& lse,
                     const cuda::tc::TcShape& s) {
  constexpr unsigned chunks = DP / cuda::tc::kChunk<DP>;
  const auto tiles = static_cast<unsigned>((s.S + cuda::tc::kKeyTile - 1) / cuda::tc::kKeyTile);
  emu::launch(tiles, static_cast<unsigned>(s.Hq) * chunks, static_cast<unsigned>(s.B), cuda::tc::kThreads,
              cuda::tc::dq_smem_bytes<DP>(), &cuda::tc::dq_tc_kernel<DP>, dq.data(), dout.data(), q.data(), k.data(),
              v.data(), o.data(), lse.data(), s);
  emu::launch(tiles, static_cast<unsigned>(s.Hkv) * chunks, static_cast<unsigned>(s.B), cuda::tc::kThreads,
              cuda::tc::dkv_smem_bytes<DP>(), &cuda::tc::dkv_tc_kernel<DP>, dk.data(), dv.data(), dout.data(),
              q.data(), k.data(), v.data(), o.data(), lse.data(), s);
}

void run_backward_emulated(std::vector<float>& dq, std::vector<float>& dk, std::vector<float>& dv,
                           const std::vector<float>& dout, const std::vector<float>& q, const std::vector<float>& k,
                           const std::vector<float>& v, const std::vector<float>& o, const std::vector<float>& lse,
                           const int32_t* doc, const TcCase& c) {
  const cuda::tc::TcShape s{c.B, c.S, c.Hq, c.Hkv, c.D, 1.0f / std::sqrt(static_cast<float>(c.D)), doc, c.window};
  if (c.D <= 64) launch_backward<64>(dq, dk, dv, dout, q, k, v, o, lse, s);
  else if (c.D <= 128) launch_backward<128>(dq, dk, dv, dout, q, k, v, o, lse, s);
  else launch_backward<256>(dq, dk, dv, dout, q, k, v, o, lse, s);
}

TEST(WarpEmulatedKernels, TensorCoreAttentionForwardMatchesFloat64) {
  test::check_forward({1, 67, 2, 1, 64, 0, false}, run_emulated);    // causal, GQA 2, a partial second tile
  test::check_forward({1, 200, 3, 1, 128, 40, false}, run_emulated); // sliding window: tiles skipped, GQA 3
  test::check_forward({2, 100, 1, 1, 80, 0, true}, run_emulated);    // documents, D padded to 128
  test::check_forward({1, 70, 2, 1, 256, 9, true}, run_emulated);    // both, MQA, the largest head dim
  test::check_forward({1, 3, 2, 2, 1, 0, false}, run_emulated);       // edges: 3 tokens, D 1
  test::check_forward({1, 129, 1, 1, 65, 500, false}, run_emulated);  // a window past S, one row past 2 tiles
}

}  // namespace
}  // namespace lt

namespace lt {
namespace {

TEST(WarpEmulatedKernels, TensorCoreAttentionBackwardMatchesFloat64) {
  test::check_backward({1, 67, 2, 1, 64, 0, false}, run_backward_emulated);    // causal, GQA 2, a partial tile
  test::check_backward({1, 150, 2, 1, 128, 40, false}, run_backward_emulated); // sliding window: tiles skipped
  test::check_backward({2, 100, 1, 1, 80, 0, true}, run_backward_emulated);    // documents, D padded to 128
  test::check_backward({1, 70, 2, 1, 256, 9, true}, run_backward_emulated);    // both, two column chunks
  test::check_backward({1, 3, 2, 2, 1, 0, false}, run_backward_emulated);       // edges: 3 tokens, D 1
  test::check_backward({1, 129, 1, 1, 65, 500, false}, run_backward_emulated);  // a window past S, 3 tiles
}

}  // namespace
}  // namespace lt
