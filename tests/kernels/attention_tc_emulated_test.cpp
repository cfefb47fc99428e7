// The tensor-core attention's kernels (kernels/cuda/attention_tc_{forward,backward}.cuh) run
// on the CPU under the warp emulator (warp_emulator.h: fibers for CUDA threads, the
// PTX ISA's fragment layouts for mma.m16n8k16) against float64, with the bounds of its GPU
// test (attention_tc_checks.h). This checks the kernel's own logic - fragment indexing,
// tiles, masks, the online softmax - on any machine; the GPU test checks the hardware's.
// Smaller shapes than the GPU test's: each emulated product is two barriers of 32 threads.
#include "kernels/attention_tc_emulated.h"  // first: the warp emulator stands in for CUDA

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "kernels/attention_tc_checks.h"

namespace lt {
namespace {

using test::TcCase;

// The outputs start as NaN, so that a value the kernels do not write shows.
void poison(std::vector<float>& x) { std::fill(x.begin(), x.end(), std::nanf("")); }

void run_emulated(std::vector<float>& o, std::vector<float>& lse, const std::vector<float>& q,
                  const std::vector<float>& k, const std::vector<float>& v, const int32_t* doc, const TcCase& c) {
  poison(o), poison(lse);
  test::emulated_attention_forward_bf16(o.data(), lse.data(), q.data(), k.data(), v.data(), c.B, c.S, c.Hq, c.Hkv,
                                        c.D, test::case_scale(c), doc, c.window);
}

void run_backward_staged(bool column_passes, std::vector<float>& dq, std::vector<float>& dk, std::vector<float>& dv,
                         const std::vector<float>& dout, const std::vector<float>& q, const std::vector<float>& k,
                         const std::vector<float>& v, const std::vector<float>& o, const std::vector<float>& lse,
                         const int32_t* doc, const TcCase& c) {
  poison(dq), poison(dk), poison(dv);
  test::emulated_attention_backward_bf16(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(),
                                         o.data(), lse.data(), c.B, c.S, c.Hq, c.Hkv, c.D, test::case_scale(c), doc,
                                         c.window, column_passes);
}

void run_backward_emulated(std::vector<float>& dq, std::vector<float>& dk, std::vector<float>& dv,
                           const std::vector<float>& dout, const std::vector<float>& q, const std::vector<float>& k,
                           const std::vector<float>& v, const std::vector<float>& o, const std::vector<float>& lse,
                           const int32_t* doc, const TcCase& c) {
  run_backward_staged(false, dq, dk, dv, dout, q, k, v, o, lse, doc, c);
}

TEST(WarpEmulatedKernels, TensorCoreAttentionForwardMatchesFloat64) {
  test::check_forward({1, 67, 2, 1, 64, 0, false}, run_emulated);    // causal, GQA 2, a partial second tile
  test::check_forward({1, 200, 3, 1, 128, 40, false}, run_emulated); // sliding window: tiles skipped, GQA 3
  test::check_forward({2, 100, 1, 1, 80, 0, true}, run_emulated);    // documents, D padded to 128
  test::check_forward({1, 70, 2, 1, 256, 9, true}, run_emulated);    // both, MQA, the largest head dim
  test::check_forward({1, 3, 2, 2, 1, 0, false}, run_emulated);       // edges: 3 tokens, D 1
  test::check_forward({1, 129, 1, 1, 65, 500, false}, run_emulated);  // a window past S, one row past 2 tiles
}

TEST(WarpEmulatedKernels, TensorCoreAttentionBackwardMatchesFloat64) {
  test::check_backward({1, 67, 2, 1, 64, 0, false}, run_backward_emulated);    // causal, GQA 2, a partial tile
  test::check_backward({1, 130, 2, 1, 128, 40, false}, run_backward_emulated); // sliding window: tiles skipped
  test::check_backward({2, 100, 1, 1, 80, 0, true}, run_backward_emulated);    // documents, D padded to 128
  test::check_backward({1, 70, 2, 1, 256, 9, true}, run_backward_emulated);    // both, two column chunks
  test::check_backward({1, 3, 2, 2, 1, 0, false}, run_backward_emulated);       // edges: 3 tokens, D 1
  test::check_backward({1, 129, 1, 1, 48, 500, false}, run_backward_emulated);  // a window past S, 3 tiles
}

// What GPUs with 99 KB of shared memory a block run at D 256 (Gemma 3): the same bits.
TEST(WarpEmulatedKernels, TensorCoreAttentionBackwardInColumnPassesGivesTheSameBits) {
  test::check_column_passes_give_the_same_bits({1, 70, 4, 2, 256, 9, true}, run_backward_staged);  // GQA 2
  test::check_column_passes_give_the_same_bits({1, 40, 1, 1, 200, 0, false}, run_backward_staged);  // D padded
}

// The kernels stage their next tiles while they compute with this one (cp.async): the same
// bits whether the copies land as late as a GPU may land them or as early (the emulator's
// two ends, warp_emulator.h: copy_landing). A missing wait shows at the late end, a
// missing barrier before a restaging at the early end.
TEST(WarpEmulatedKernels, TensorCoreAttentionGivesTheSameBitsWhereverItsCopiesLand) {
  struct Restore {
    ~Restore() { emu::copy_landing = emu::CopyLanding::kAtWait; }
  } restore;
  // The third: D 256 in column passes (99 KB GPUs), where the passes stage each other's columns.
  const std::pair<TcCase, bool> cases[] = {{{1, 200, 2, 1, 64, 0, false}, false},
                                           {{1, 140, 2, 2, 128, 0, true}, false},
                                           {{1, 130, 2, 1, 256, 0, true}, true}};
  for (const auto& [c, column_passes] : cases) {
    const test::BackwardInputs in = test::backward_inputs(c);
    std::vector<float> out[2][5];  // o, lse, dq, dk, dv at each end
    for (int end = 0; end < 2; ++end) {
      emu::copy_landing = end == 0 ? emu::CopyLanding::kAtWait : emu::CopyLanding::kAtIssue;
      std::vector<float>(&x)[5] = out[end];
      x[0].resize(in.q.size()), x[1].resize(in.lse.size()), x[2].resize(in.q.size());
      x[3].resize(in.k.size()), x[4].resize(in.k.size());
      run_emulated(x[0], x[1], in.q, in.k, in.v, in.doc_start(), c);
      run_backward_staged(column_passes, x[2], x[3], x[4], in.dout, in.q, in.k, in.v, in.o, in.lse, in.doc_start(),
                          c);
    }
    const char* names[5] = {"o", "lse", "dq", "dk", "dv"};
    for (int i = 0; i < 5; ++i) {
      size_t differ = 0;
      for (size_t j = 0; j < out[0][i].size(); ++j)
        differ += std::memcmp(&out[0][i][j], &out[1][i][j], sizeof(float)) != 0;
      const std::string what = test::case_name(c) + (column_passes ? " column passes" : "");
      std::printf("  copies landing early vs late %s %s: %zu of %zu values differ in their bits\n", what.c_str(),
                  names[i], differ, out[0][i].size());
      EXPECT_EQ(differ, 0u) << what << " " << names[i];
    }
  }
}

}  // namespace
}  // namespace lt
