// The generator keeps each layer's own kind of state: a KV cache for the softmax-attention
// layers only, a Gated DeltaNet recurrent state for the linear-attention layers only.
// (Its outputs are GeneratorParity's, model_parity_test.cpp.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "exec/streaming_test_util.h"
#include "layers/generator.h"
#include "model/config.h"
#include "model/parameters.h"

namespace lt {
namespace {

// A tiny Qwen3.5 hybrid: linear, attention, linear, linear, linear, linear, linear,
// attention (two of eight layers keep a cache, as full_attention_interval 4 would give).
ModelConfig tiny_hybrid() {
  std::vector<LayerKind> kinds(8, LayerKind::LinearAttention);
  kinds[1] = kinds[7] = LayerKind::Attention;
  return test::qwen3_5_tiny_config(kinds);
}

// Keys and values, fp32, max_len positions of kv_dim each, for `layers` layers.
int64_t kv_bytes(const ModelConfig& c, int64_t layers, int64_t max_len) {
  return layers * 2 * max_len * c.kv_dim() * static_cast<int64_t>(sizeof(float));
}

TEST(GeneratorState, HybridModelCachesKeysAndValuesOfItsAttentionLayersOnly) {
  const ModelConfig c = tiny_hybrid();
  const int64_t max_len = 40;
  const Generator gen(c, max_len, Precision::F32);
  EXPECT_EQ(gen.kv_cache_bytes(), kv_bytes(c, 2, max_len));
  EXPECT_EQ(gen.recurrent_state_layers(), 6);
}

TEST(GeneratorState, DenseModelCachesEveryLayer) {
  const ModelConfig c = test::streaming_tiny_config(3);
  const Generator gen(c, 40, Precision::F32);
  EXPECT_EQ(gen.kv_cache_bytes(), kv_bytes(c, 3, 40));
  EXPECT_EQ(gen.recurrent_state_layers(), 0);
}

// The attention layers' cache rows are packed, in layer order; a layer that read another
// layer's row would change what the decode attends to. Each decoded token must be the
// argmax of a prefill of everything before it (prefill writes the cache, never reads it).
TEST(GeneratorState, HybridDecodeReadsEachAttentionLayersOwnCache) {
  const ModelConfig c = tiny_hybrid();
  ModelParameters params(c);
  test::init_parameters(params, 21);
  Generator gen(c, 40, Precision::F32);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 6; ++i) prompt.push_back((i * 53 + 3) % c.vocab_size);
  const std::vector<int32_t> generated = gen.generate(params, prompt, 8);
  ASSERT_EQ(generated.size(), 8u);
  // Feed prompt + generated[0..k) through prefill: its argmax must be generated[k].
  std::vector<int32_t> seq = prompt;
  for (size_t k = 0; k < generated.size(); ++k) {
    const std::vector<float> lg = gen.last_logits(params, seq);
    const int32_t next = static_cast<int32_t>(std::max_element(lg.begin(), lg.end()) - lg.begin());
    EXPECT_EQ(next, generated[k]) << "token " << k;
    seq.push_back(generated[k]);
  }
}

}  // namespace
}  // namespace lt
