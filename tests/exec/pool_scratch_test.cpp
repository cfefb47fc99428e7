// The kernels' scratch outside the executor's arena (KernelTable::PoolScratch: the CUDA
// table's stream-ordered pool, for the entries whose CPU signatures take no workspace) is
// in what a plan counts: the most any one call of a step takes, added to the layer and
// head windows' scratch. The CPU's table takes none on the compute tier. The CUDA table's
// figures are sized here without a device (CudaBackend's tests run the calls).
#include <algorithm>
#include <cstdio>
#include <string>

#include <gtest/gtest.h>

#include "exec/backend.h"
#include "exec/streaming_executor.h"
#include "plan/model_preset.h"
#include "streaming_test_util.h"
#include "test_util.h"

namespace lt {
namespace {

TEST(KernelPoolScratch, TheCpuTableTakesNoneAndItsPlansCountTheArenaAlone) {
  using LK = LayerKind;
  for (const ModelConfig& c : {test::streaming_tiny_config(), test::qwen3_5_tiny_config({LK::LinearAttention,
                                                                                         LK::Attention})}) {
    for (Precision p : {Precision::F32, Precision::BF16}) {
      EXPECT_EQ(kernel_pool_scratch_bytes(c, 2, 32, cpu_kernel_table(), p), 0u);
      const ExecutorScratch e = executor_scratch(c, 2, 32, cpu_kernel_table(), p);
      EXPECT_EQ(e.layer_bytes, static_cast<double>(step_scratch(c, 2, 32, cpu_kernel_table(), p, false).layer));
    }
  }
}

// The cuda table's table, or null (with the reason in why) in a build without CUDA.
const KernelTable* cuda_table(std::string& why) {
  const KernelTable* table = nullptr;
  why = test::error_of([&] { table = &backend_kernel_table("cuda"); });
  return table;
}

// Qwen2.5-7B at 16 x 1024 tokens: the largest call is the MLP's up (or gate) projection's
// backward, which in bf16 rounds dy [T, I], x [T, C] and the weight [I, C] to bf16; the
// plan's layer and head scratch both carry it.
TEST(KernelPoolScratch, CudaPlansCountTheLargestCall) {
  std::string why;
  const KernelTable* k = cuda_table(why);
  if (!k) GTEST_SKIP() << "no CUDA table in this build: " << why;
  const ModelConfig c = resolve_model("qwen2.5-7b").config;
  const int64_t B = 16, S = 1024, T = B * S, C = c.hidden_size, I = c.intermediate_size;
  const size_t bf16_pool = kernel_pool_scratch_bytes(c, B, S, *k, Precision::BF16);
  EXPECT_EQ(bf16_pool, k->pool_scratch.linear_backward(T, C, I, Precision::BF16, false, true));
  EXPECT_GE(static_cast<double>(bf16_pool), 2.0 * static_cast<double>(T * I + T * C + I * C));
  // fp32 products round nothing: what is left (bias-gradient partials, norms' and the
  // embedding's workspaces) is far smaller.
  const size_t f32_pool = kernel_pool_scratch_bytes(c, B, S, *k, Precision::F32);
  std::printf("qwen2.5-7b at %lld x %lld tokens: pool scratch bf16 %.3f GB, fp32 %.3f GB\n",
              static_cast<long long>(B), static_cast<long long>(S), bf16_pool / 1e9, f32_pool / 1e9);
  EXPECT_GT(f32_pool, 0u);
  EXPECT_LT(f32_pool, bf16_pool / 4);
  for (Precision p : {Precision::F32, Precision::BF16}) {
    const size_t pool = kernel_pool_scratch_bytes(c, B, S, *k, p);
    const ExecutorScratch e = executor_scratch(c, B, S, *k, p);
    const StepScratch whole = step_scratch(c, B, S, *k, p, false), streamed = step_scratch(c, B, S, *k, p, true);
    EXPECT_EQ(e.layer_bytes, static_cast<double>(whole.layer + pool));
    EXPECT_EQ(e.head_bytes, static_cast<double>(std::max(whole.head, streamed.head) + pool));
  }
}

// A hybrid's Gated DeltaNet layers add the causal conv's backward, counted from their own
// shape (the attention-only model of the same width has none).
TEST(KernelPoolScratch, CudaCountsTheHybridConvolution) {
  std::string why;
  const KernelTable* k = cuda_table(why);
  if (!k) GTEST_SKIP() << "no CUDA table in this build: " << why;
  using LK = LayerKind;
  const ModelConfig c = test::qwen3_5_tiny_config({LK::LinearAttention, LK::Attention});
  const int64_t B = 64, S = 128;
  const size_t conv = k->pool_scratch.causal_conv1d_silu_backward({B, S, c.linear.conv_dim(), c.linear.conv_kernel});
  ASSERT_GT(conv, 0u);
  EXPECT_GE(kernel_pool_scratch_bytes(c, B, S, *k, Precision::F32), conv);
}

// The tensor-core attention (bf16) packs q, k and v (and, backward, dO) as bf16, each head
// padded to whole key tiles of 64 rows and a head dim of 64, 128 or 256, and its backward
// also takes each query row's delta (B x S x Hq floats, rounded up to 256 bytes): the
// sizes attention_tc_cuda.h's workspace functions promise. Nothing under fp32; counted: a
// table with those entries alone gives the larger, the backward's.
TEST(KernelPoolScratch, CudaCountsTheTensorCoreAttentionsWorkspace) {
  std::string why;
  const KernelTable* k = cuda_table(why);
  if (!k) GTEST_SKIP() << "no CUDA table in this build: " << why;
  const ModelConfig c = test::streaming_tiny_config();
  const int64_t B = 3, S = 70, Hq = c.num_heads, Hkv = c.num_kv_heads, D = c.head_dim;
  ASSERT_LE(D, 64) << "the expected sizes below pad D to 64";
  const size_t head = static_cast<size_t>(128 * 64) * 2;  // 70 rows padded to 128, D to 64, bf16
  const size_t forward = static_cast<size_t>(B * (Hq + 2 * Hkv)) * head;
  const size_t deltas = (static_cast<size_t>(B * S * Hq) * sizeof(float) + 255) / 256 * 256;
  const size_t backward = deltas + static_cast<size_t>(B * (2 * Hq + 2 * Hkv)) * head;
  ASSERT_NE(k->pool_scratch.attention_forward, nullptr);
  ASSERT_NE(k->pool_scratch.attention_backward, nullptr);
  EXPECT_EQ(k->pool_scratch.attention_forward(B, S, Hq, Hkv, D, Precision::BF16), forward);
  EXPECT_EQ(k->pool_scratch.attention_backward(B, S, Hq, Hkv, D, Precision::BF16), backward);
  EXPECT_EQ(k->pool_scratch.attention_forward(B, S, Hq, Hkv, D, Precision::F32), 0u);
  EXPECT_EQ(k->pool_scratch.attention_backward(B, S, Hq, Hkv, D, Precision::F32), 0u);
  KernelTable only = *k;
  only.pool_scratch = {};
  only.pool_scratch.attention_forward = k->pool_scratch.attention_forward;
  only.pool_scratch.attention_backward = k->pool_scratch.attention_backward;
  EXPECT_EQ(kernel_pool_scratch_bytes(c, B, S, only, Precision::BF16), backward);
  only.pool_scratch.attention_backward = nullptr;
  EXPECT_EQ(kernel_pool_scratch_bytes(c, B, S, only, Precision::BF16), forward);
}

}  // namespace
}  // namespace lt
