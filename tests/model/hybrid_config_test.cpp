// Qwen3.5/3.6 hybrid configs: what the parser reads, what it refuses, and that the
// executor refuses to run a model it cannot compute yet. transformers' own reading of our
// written configs is ModelConfig.TransformersLoadsWhatWeWrite (config_test.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/config.h"
#include "model/hybrid_layers.h"
#include "model/parameters.h"
#include "plan/model_preset.h"

namespace lt {
namespace {

using nlohmann::json;

json tiny_hybrid() {
  return {{"model_type", "qwen3_5_text"}, {"hidden_size", 64},         {"intermediate_size", 96},
          {"num_hidden_layers", 8},       {"num_attention_heads", 4},  {"num_key_value_heads", 2},
          {"head_dim", 16},               {"vocab_size", 128},         {"linear_num_key_heads", 2},
          {"linear_num_value_heads", 4},  {"linear_key_head_dim", 8},  {"linear_value_head_dim", 8}};
}

std::string error_of(const json& j) {
  try {
    parse_model_config(j, "test");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(HybridConfig, Qwen36PresetIsTheHybridShape) {
  const ModelConfig c = resolve_model("qwen3.6-27b").config;
  ASSERT_TRUE(c.hybrid());
  EXPECT_EQ(c.model_type, "qwen3_5_text");
  ASSERT_EQ(c.layer_kinds.size(), 64u);
  for (int j = 0; j < 64; ++j)
    EXPECT_EQ(c.layer_kind(j), j % 4 == 3 ? LayerKind::Attention : LayerKind::LinearAttention) << j;
  EXPECT_EQ(c.linear.conv_dim(), 2 * 16 * 128 + 48 * 128);
  EXPECT_TRUE(c.attn_output_gate);
  EXPECT_EQ(c.partial_rotary_factor, 0.25);
  EXPECT_EQ(c.rope_theta, 1e7);
  // The gated q_proj yields query and gate: twice the query width.
  const auto specs = block_weight_specs(c, 3);
  const auto q = std::find_if(specs.begin(), specs.end(),
                              [](const WeightSpec& w) { return w.hf_name == "model.layers.3.self_attn.q_proj.weight"; });
  ASSERT_NE(q, specs.end());
  EXPECT_EQ(q->shape, (Shape{2 * 24 * 256, 5120}));
}

TEST(HybridConfig, DefaultsFollowQwen35TextConfig) {
  json j = tiny_hybrid();
  j.erase("linear_num_key_heads");
  j.erase("linear_num_value_heads");
  j.erase("head_dim");
  j["full_attention_interval"] = 2;
  const ModelConfig c = parse_model_config(j, "test");
  EXPECT_EQ(c.linear.key_heads, 16);
  EXPECT_EQ(c.linear.value_heads, 32);
  EXPECT_EQ(c.linear.conv_kernel, 4);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.partial_rotary_factor, 0.25);
  for (int j2 = 0; j2 < 8; ++j2) EXPECT_EQ(c.layer_kind(j2), j2 % 2 == 1 ? LayerKind::Attention : LayerKind::LinearAttention);
}

TEST(HybridConfig, TextConfigOfAVisionLanguageCheckpoint) {
  const json top = {{"model_type", "qwen3_5"}, {"text_config", tiny_hybrid()}};
  const ModelConfig c = parse_model_config(top, "test");
  EXPECT_EQ(c.model_type, "qwen3_5_text");
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_NE(error_of({{"model_type", "qwen3_5"}}).find("text_config"), std::string::npos);
}

TEST(HybridConfig, RefusesWhatItCannotMean) {
  json j = tiny_hybrid();
  j["layer_types"] = json::array({"linear_attention", "sliding_attention"});
  EXPECT_NE(error_of(j).find("list of 8 layer types"), std::string::npos);
  j["layer_types"] = json(std::vector<std::string>(8, "linear_attention"));
  j["layer_types"][5] = "mamba";
  EXPECT_NE(error_of(j).find("\"mamba\" is not a Qwen3.5 layer"), std::string::npos);
  j = tiny_hybrid();
  j["linear_num_value_heads"] = 3;
  EXPECT_NE(error_of(j).find("not a multiple of linear_num_key_heads"), std::string::npos);
  j = tiny_hybrid();
  j["attn_output_gate"] = false;
  EXPECT_NE(error_of(j).find("always gates"), std::string::npos);
  j = tiny_hybrid();
  j["rope_parameters"] = {{"rope_theta", 1e6}, {"partial_rotary_factor", 0.3}};  // 4.8 channels of 16
  EXPECT_NE(error_of(j).find("even number of channels"), std::string::npos);
  j["rope_parameters"]["partial_rotary_factor"] = 1.5;
  EXPECT_NE(error_of(j).find("must be in (0, 1]"), std::string::npos);
  j = tiny_hybrid();
  j["hidden_size"] = 1 << 20;
  j["linear_num_value_heads"] = 16384;
  j["linear_value_head_dim"] = 16384;  // 4.5e15 parameters: past int64-safe sizes
  EXPECT_NE(error_of(j).find("more than lazytrain supports"), std::string::npos);
  j = tiny_hybrid();
  j["hidden_size"] = -1;  // the shared fields are checked as for qwen3
  EXPECT_NE(error_of(j).find("must be positive"), std::string::npos);
}

TEST(HybridConfig, WritesWhatItReads) {
  const ModelConfig c = parse_model_config(tiny_hybrid(), "test");
  const ModelConfig back = parse_model_config(model_config_to_json(c), "written");
  EXPECT_EQ(back.layer_kinds, c.layer_kinds);
  EXPECT_EQ(back.linear.value_heads, c.linear.value_heads);
  EXPECT_EQ(back.partial_rotary_factor, c.partial_rotary_factor);
  EXPECT_EQ(model_config_to_json(back), model_config_to_json(c));
}

// Each layer's views cover exactly its own weight specs, in order: a DeltaNet layer binds
// the la_* members at the offsets of linear_attn.*, an attention layer q_proj at twice the
// query width (query and gate).
TEST(HybridConfig, EachLayerBindsItsOwnWeights) {
  const ModelConfig c = parse_model_config(tiny_hybrid(), "test");
  ModelParameters p(c);
  for (int64_t j = 0; j < c.num_layers; ++j) {
    const BlockTensors w = p.block(j);
    const std::string pre = "model.layers." + std::to_string(j) + ".";
    if (c.layer_kind(j) == LayerKind::LinearAttention) {
      EXPECT_EQ(w.la_in_proj_qkv, p.tensor(pre + "linear_attn.in_proj_qkv.weight"));
      EXPECT_EQ(w.la_A_log, p.tensor(pre + "linear_attn.A_log"));
      EXPECT_EQ(w.la_out_proj, p.tensor(pre + "linear_attn.out_proj.weight"));
      EXPECT_EQ(w.wq, nullptr);
    } else {
      EXPECT_EQ(w.wq, p.tensor(pre + "self_attn.q_proj.weight"));
      EXPECT_EQ(w.wk - w.wq, 2 * c.q_dim() * c.hidden_size);
      EXPECT_EQ(w.la_in_proj_qkv, nullptr);
    }
    EXPECT_EQ(w.wd, p.tensor(pre + "mlp.down_proj.weight"));
    EXPECT_EQ(p.block_base(j) + block_numel(c, j),
              j + 1 < c.num_layers ? p.block_base(j + 1) : p.final_norm());
  }
}

TEST(HybridConfig, UniformModelsKeepTheirBlockNumbers) {
  const ModelConfig c = resolve_model("qwen2.5-3b").config;
  for (int64_t j : {int64_t{0}, c.num_layers - 1}) {
    EXPECT_EQ(layer_saved_bytes(c, j, RecomputeOption::KeepInternals, 2, 256, 2),
              block_saved_bytes(c, RecomputeOption::KeepInternals, 2, 256, 2));
    EXPECT_EQ(layer_forward_flops(c, j, 2, 256), block_forward_flops(c, 2, 256, j));
  }
}

}  // namespace
}  // namespace lt
