// The step's small inputs in the executor's host-tier pool (exec/step_inputs.h): the
// RoPE tables bound are the in-memory step's (global and, for sliding layers, local), the
// targets and the document starts and positions are copies inside the pool's buffer (which
// the pool counts), and a context without documents stays without them.
#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

#include "core/aligned_buffer.h"
#include "exec/step_inputs.h"
#include "layers/step_batch.h"
#include "streaming_test_util.h"

namespace lt {
namespace {

// Whether [p, p + n) lies in the pool's one buffer.
bool in_pool(const void* p, size_t n, const std::byte* base, size_t size) {
  const auto* b = static_cast<const std::byte*>(p);
  return b >= base && b + n <= base + size;
}

TEST(StepInputs, TablesTargetsAndDocumentsLiveInThePool) {
  ModelConfig c = test::streaming_tiny_config(2);
  c.local_rope = true;  // Gemma 3's second table for sliding layers
  c.local_rope_theta = 1e4;
  const int64_t batch = 2, seq = 16, T = batch * seq;
  HostPool pool("step inputs test");
  StepInputs inputs(pool, c, batch, seq);
  EXPECT_EQ(pool.buffers_in_use(), 1u);
  const size_t held = pool.bytes_in_use();

  BlockContext want, got;
  AlignedBuffer<float> cos, sin;
  set_rope_tables(want, cos, sin, c, seq);
  inputs.bind_rope(got);
  const size_t n = cos.size() / 2;  // floats per table (global, then local)
  ASSERT_NE(want.local_rope_cos, nullptr);
  for (auto [g, w] : {std::pair{got.rope_cos, want.rope_cos}, {got.rope_sin, want.rope_sin},
                      {got.local_rope_cos, want.local_rope_cos}, {got.local_rope_sin, want.local_rope_sin}}) {
    ASSERT_NE(g, w);
    EXPECT_EQ(std::vector<float>(g, g + n), std::vector<float>(w, w + n));
  }

  std::vector<int32_t> targets(T);
  for (int64_t t = 0; t < T; ++t) targets[t] = static_cast<int32_t>(t % 7 == 3 ? -100 : t);
  const int32_t* tg = inputs.set_targets(targets);
  EXPECT_EQ(std::vector<int32_t>(tg, tg + T), targets);

  // Two rows, the first packing documents at 0 and 5.
  std::vector<int32_t> doc_start(T, 0);
  for (int64_t s = 5; s < seq; ++s) doc_start[s] = 5;
  StepDocuments docs;
  BlockContext ctx;
  docs.bind(ctx, doc_start.data(), batch, seq);
  const std::vector<int32_t> positions(ctx.positions, ctx.positions + T);
  inputs.bind_documents(ctx);
  EXPECT_EQ(std::vector<int32_t>(ctx.doc_start, ctx.doc_start + T), doc_start);
  EXPECT_EQ(std::vector<int32_t>(ctx.positions, ctx.positions + T), positions);

  // All of it in the pool's one buffer (which starts with the cos table), and nothing after
  // setup takes more.
  const auto* base = reinterpret_cast<const std::byte*>(got.rope_cos);
  for (auto [p, bytes] : {std::pair{static_cast<const void*>(got.rope_cos), 2 * n * sizeof(float)},
                          {static_cast<const void*>(got.rope_sin), 2 * n * sizeof(float)},
                          {static_cast<const void*>(tg), T * sizeof(int32_t)},
                          {static_cast<const void*>(ctx.doc_start), T * sizeof(int32_t)},
                          {static_cast<const void*>(ctx.positions), T * sizeof(int32_t)}})
    EXPECT_TRUE(in_pool(p, bytes, base, held));
  EXPECT_EQ(pool.buffers_in_use(), 1u);
  EXPECT_EQ(pool.bytes_in_use(), held);

  BlockContext none;
  docs.bind(none, nullptr, batch, seq);
  inputs.bind_documents(none);
  EXPECT_EQ(none.doc_start, nullptr);
  EXPECT_EQ(none.positions, nullptr);
}

}  // namespace
}  // namespace lt
