// Weight and activation specs: names, order, shapes, bytes and FLOPs. Names and shapes are
// also checked against transformers' own models in config_test.cpp.
#include <gtest/gtest.h>

#include "model/config.h"
#include "model/layer_specs.h"

namespace lt {
namespace {

ModelConfig small(const std::string& type) {
  ModelConfig c;
  c.model_type = type;
  c.hidden_size = 32;
  c.num_layers = 3;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 16;  // q_dim 64 != hidden, to catch swapped dimensions
  c.intermediate_size = 48;
  c.vocab_size = 100;
  return c;
}

std::vector<std::string> names(const std::vector<WeightSpec>& w) {
  std::vector<std::string> out;
  for (const auto& s : w) out.push_back(s.hf_name);
  return out;
}

TEST(LayerSpecs, PlainBlockOrderAndShapes) {
  const ModelConfig c = small("llama");
  const auto w = block_weight_specs(c, 2);
  const std::string p = "model.layers.2.";
  EXPECT_EQ(names(w), (std::vector<std::string>{
                          p + "input_layernorm.weight", p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight",
                          p + "self_attn.v_proj.weight", p + "self_attn.o_proj.weight",
                          p + "post_attention_layernorm.weight", p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight",
                          p + "mlp.down_proj.weight"}));
  EXPECT_EQ(w[0].shape, (Shape{32}));
  EXPECT_EQ(w[1].shape, (Shape{64, 32}));
  EXPECT_EQ(w[2].shape, (Shape{32, 32}));
  EXPECT_EQ(w[3].shape, (Shape{32, 32}));
  EXPECT_EQ(w[4].shape, (Shape{32, 64}));
  EXPECT_EQ(w[5].shape, (Shape{32}));
  EXPECT_EQ(w[6].shape, (Shape{48, 32}));
  EXPECT_EQ(w[7].shape, (Shape{48, 32}));
  EXPECT_EQ(w[8].shape, (Shape{32, 48}));
}

TEST(LayerSpecs, BiasesAndQkNormInOrder) {
  ModelConfig c = small("llama");
  c.qkv_bias = c.o_bias = c.mlp_bias = true;
  c.qk_norm = true;  // not a real llama, but every option at once
  const std::string p = "model.layers.0.";
  const auto w = block_weight_specs(c, 0);
  EXPECT_EQ(names(w),
            (std::vector<std::string>{
                p + "input_layernorm.weight", p + "self_attn.q_proj.weight", p + "self_attn.q_proj.bias",
                p + "self_attn.k_proj.weight", p + "self_attn.k_proj.bias", p + "self_attn.v_proj.weight",
                p + "self_attn.v_proj.bias", p + "self_attn.q_norm.weight", p + "self_attn.k_norm.weight",
                p + "self_attn.o_proj.weight", p + "self_attn.o_proj.bias", p + "post_attention_layernorm.weight",
                p + "mlp.gate_proj.weight", p + "mlp.gate_proj.bias", p + "mlp.up_proj.weight", p + "mlp.up_proj.bias",
                p + "mlp.down_proj.weight", p + "mlp.down_proj.bias"}));
  EXPECT_EQ(w[2].shape, (Shape{64}));   // q bias
  EXPECT_EQ(w[4].shape, (Shape{32}));   // k bias
  EXPECT_EQ(w[7].shape, (Shape{16}));   // q_norm over head_dim
  EXPECT_EQ(w[10].shape, (Shape{32}));  // o bias
  EXPECT_EQ(w[17].shape, (Shape{32}));  // down bias
}

TEST(LayerSpecs, EmbeddingHeadAndTying) {
  ModelConfig c = small("qwen2");
  EXPECT_EQ(embedding_weight_spec(c).hf_name, "model.embed_tokens.weight");
  EXPECT_EQ(embedding_weight_spec(c).shape, (Shape{100, 32}));
  EXPECT_EQ(names(head_weight_specs(c)), (std::vector<std::string>{"model.norm.weight", "lm_head.weight"}));
  EXPECT_EQ(head_weight_specs(c)[1].shape, (Shape{100, 32}));
  const int64_t untied = c.num_params();
  c.tie_word_embeddings = true;
  EXPECT_EQ(names(head_weight_specs(c)), (std::vector<std::string>{"model.norm.weight"}));
  EXPECT_EQ(c.num_params(), untied - 100 * 32);
  const auto all = all_weight_specs(c);
  EXPECT_EQ(all.front().hf_name, "model.embed_tokens.weight");
  EXPECT_EQ(all.back().hf_name, "model.norm.weight");
  EXPECT_EQ(all.size(), 1 + 3 * 9 + 1u);
}

TEST(LayerSpecs, SavedActivationsKeepInternals) {
  ModelConfig c = small("qwen3");
  c.qk_norm = true;
  const int64_t B = 2, S = 5, T = B * S;
  const auto a = block_saved_activations(c, RecomputeOption::KeepInternals, B, S, 2);
  std::vector<std::string> got;
  for (const auto& s : a) got.push_back(s.name);
  EXPECT_EQ(got, (std::vector<std::string>{"attn_norm_rstd", "attn_norm_out", "q_pre_norm", "k_pre_norm",
                                           "q_norm_rstd", "k_norm_rstd", "q", "k", "v", "attn_out", "attn_lse",
                                           "resid_mid", "mlp_norm_rstd", "mlp_norm_out", "mlp_gate", "mlp_up",
                                           "mlp_act"}));
  // Hand-computed bytes, bf16 activations (2 B) and fp32 statistics (4 B):
  //  rstd 4T, norm_out 2TC, q_pre 2T*64, k_pre 2T*32, q_rstd 4T*4, k_rstd 4T*2, q 2T*64,
  //  k, v 2T*32 each, attn_out 2T*64, lse 4*B*4*S, resid_mid 2TC, rstd 4T, norm_out 2TC,
  //  gate, up, act 2T*48 each.
  const int64_t want = 4 * T + 2 * T * 32 + 2 * T * 64 + 2 * T * 32 + 4 * T * 4 + 4 * T * 2 + 2 * T * 64 +
                       2 * (2 * T * 32) + 2 * T * 64 + 4 * B * 4 * S + 2 * T * 32 + 4 * T + 2 * T * 32 +
                       3 * (2 * T * 48);
  EXPECT_EQ(block_saved_bytes(c, RecomputeOption::KeepInternals, B, S, 2), want);
  EXPECT_EQ(a[10].shape, (Shape{B, 4, S}));
  EXPECT_EQ(a[4].shape, (Shape{T * 4}));

  c.qk_norm = false;
  EXPECT_EQ(block_saved_activations(c, RecomputeOption::KeepInternals, B, S, 2).size(), 13u);
  EXPECT_TRUE(block_saved_activations(c, RecomputeOption::RecomputeFromInput, B, S, 2).empty());
  EXPECT_EQ(block_saved_bytes(c, RecomputeOption::RecomputeFromInput, B, S, 4), 0);
  EXPECT_EQ(boundary_bytes(c, B, S, 4), T * 32 * 4);
}

TEST(LayerSpecs, Flops) {
  const ModelConfig c = small("llama");
  const int64_t B = 2, S = 5;
  const double T = B * S;
  // Matmul params: q 32*64, k 32*32, v 32*32, o 64*32, MLP 3*32*48.
  const double params = 32 * 64 + 32 * 32 + 32 * 32 + 64 * 32 + 3 * 32 * 48;
  const double attention = 2.0 * 2.0 * B * 4 * 16 * (S * (S + 1) / 2.0);
  EXPECT_DOUBLE_EQ(block_forward_flops(c, B, S), 2 * T * params + attention);
  EXPECT_DOUBLE_EQ(head_forward_flops(c, B, S), 2 * T * 32 * 100);
}

}  // namespace
}  // namespace lt
