// Gemma 3 text configs (gemma3_text, and the text_config of a gemma3 checkpoint): the
// fields Gemma3TextConfig post-processes (layer_types from sliding_window_pattern, RoPE
// per layer type from rope_parameters or the 4.x rope_theta / rope_local_base_freq /
// rope_scaling), the block it selects, the writer's round trip, and clear errors for what
// lazytrain does not implement. The saved-by-transformers path (save_pretrained, then
// load) is covered end to end by tests/layers/model_parity_test.cpp's gemma3 cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/safetensors_writer.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/layer_specs.h"
#include "model/rope_frequencies.h"
#include "test_util.h"

namespace lt {
namespace {

using nlohmann::json;

json tiny_gemma() {
  return {{"model_type", "gemma3_text"}, {"hidden_size", 32},         {"intermediate_size", 48},
          {"num_hidden_layers", 7},      {"num_attention_heads", 4},  {"num_key_value_heads", 2},
          {"head_dim", 16},              {"vocab_size", 64},          {"max_position_embeddings", 256}};
}

void expect_error(const json& j, const std::string& part) {
  try {
    parse_model_config(j, "cfg.json");
    FAIL() << "no error for " << j.dump();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(part), std::string::npos) << "missing '" << part << "' in: " << msg;
    EXPECT_NE(msg.find("cfg.json"), std::string::npos) << msg;
  }
}

// Gemma3TextConfig's defaults: pattern 6 (every sixth layer global), window 4096, global
// theta 1e6, local 1e4, query_pre_attn_scalar 256, tied embeddings, pad token 0.
TEST(Gemma3Config, ClassDefaultsAndLegacyPattern) {
  const ModelConfig c = parse_model_config(tiny_gemma(), "cfg.json");
  ASSERT_EQ(c.layer_types.size(), 7u);
  for (int64_t l = 0; l < 7; ++l)
    EXPECT_EQ(c.layer_is_sliding(l), l != 5) << "layer " << l;
  EXPECT_EQ(c.sliding_window, 4096);
  EXPECT_EQ(c.layer_window(5), 0);
  EXPECT_EQ(c.layer_window(0), 4096);
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_TRUE(c.local_rope);
  EXPECT_EQ(c.local_rope_theta, 1e4);
  EXPECT_EQ(c.query_pre_attn_scalar, 256);
  EXPECT_FLOAT_EQ(c.attention_scale(), 1.0f / 16.0f);
  EXPECT_TRUE(c.tie_word_embeddings && c.qk_norm && c.sandwich_norms && c.scale_embeddings);
  EXPECT_EQ(c.mlp_activation, MlpActivation::GeluTanh);
  EXPECT_EQ(c.norm_weight_offset, 1.0);
  EXPECT_EQ(c.padding_idx, 0);

  // 4.x spelling: rope_theta and rope_scaling (global layers), rope_local_base_freq.
  json j = tiny_gemma();
  j["sliding_window_pattern"] = 3;
  j["rope_theta"] = 5e5;
  j["rope_local_base_freq"] = 2e3;
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
  j["sliding_window"] = 512;
  const ModelConfig d = parse_model_config(j, "cfg.json");
  for (int64_t l = 0; l < 7; ++l) EXPECT_EQ(d.layer_is_sliding(l), (l + 1) % 3 != 0) << "layer " << l;
  EXPECT_EQ(d.rope_theta, 5e5);
  EXPECT_EQ(d.rope_scaling.type, RopeScalingType::Linear);
  EXPECT_EQ(d.rope_scaling.factor, 8.0);
  EXPECT_EQ(d.local_rope_theta, 2e3);
  EXPECT_EQ(d.local_rope_scaling.type, RopeScalingType::None);
  // The tables differ per layer type: global inv_freq = theta^(-2j/D) / 8, local unscaled.
  const auto global = rope_inv_freq(d), local = rope_inv_freq(d, true);
  EXPECT_DOUBLE_EQ(global[1], std::pow(5e5, -2.0 / 16) / 8);
  EXPECT_DOUBLE_EQ(local[1], std::pow(2e3, -2.0 / 16));
}

TEST(Gemma3Config, RopeParametersByLayerTypeAndLayerTypes) {
  json j = tiny_gemma();
  j["num_hidden_layers"] = 3;
  j["layer_types"] = {"full_attention", "sliding_attention", "sliding_attention"};
  j["rope_parameters"] = {{"full_attention", {{"rope_type", "linear"}, {"factor", 2.0}, {"rope_theta", 1e6}}},
                          {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 1e4}}}};
  j["query_pre_attn_scalar"] = 20;
  j["tie_word_embeddings"] = false;
  j["pad_token_id"] = nullptr;
  const ModelConfig c = parse_model_config(j, "cfg.json");
  EXPECT_FALSE(c.layer_is_sliding(0));
  EXPECT_TRUE(c.layer_is_sliding(1) && c.layer_is_sliding(2));
  EXPECT_EQ(c.rope_scaling.factor, 2.0);
  EXPECT_FLOAT_EQ(c.attention_scale(), static_cast<float>(1 / std::sqrt(20.0)));
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.padding_idx, -1);
  // The writer's config parses back to the same model.
  const ModelConfig r = parse_model_config(model_config_to_json(c), "written");
  EXPECT_EQ(r.layer_types, c.layer_types);
  EXPECT_EQ(r.sliding_window, c.sliding_window);
  EXPECT_EQ(r.rope_theta, c.rope_theta);
  EXPECT_EQ(r.rope_scaling.factor, c.rope_scaling.factor);
  EXPECT_EQ(r.local_rope_theta, c.local_rope_theta);
  EXPECT_EQ(r.query_pre_attn_scalar, c.query_pre_attn_scalar);
  EXPECT_EQ(r.padding_idx, c.padding_idx);
  EXPECT_EQ(r.tie_word_embeddings, c.tie_word_embeddings);
  EXPECT_EQ(r.num_params(), c.num_params());
}

// The block's weights under their Hugging Face names, in checkpoint order.
TEST(Gemma3Config, WeightNames) {
  json j = tiny_gemma();
  j["num_hidden_layers"] = 1;
  const ModelConfig c = parse_model_config(j, "cfg.json");
  std::vector<std::string> names;
  for (const auto& w : block_weight_specs(c, 0)) names.push_back(w.hf_name.substr(std::string("model.layers.0.").size()));
  const std::vector<std::string> want = {
      "input_layernorm.weight",          "self_attn.q_proj.weight",         "self_attn.k_proj.weight",
      "self_attn.v_proj.weight",         "self_attn.q_norm.weight",         "self_attn.k_norm.weight",
      "self_attn.o_proj.weight",         "post_attention_layernorm.weight", "pre_feedforward_layernorm.weight",
      "mlp.gate_proj.weight",            "mlp.up_proj.weight",              "mlp.down_proj.weight",
      "post_feedforward_layernorm.weight"};
  EXPECT_EQ(names, want);
  EXPECT_EQ(head_weight_specs(c).size(), 1u);  // tied: no lm_head.weight
}

TEST(Gemma3Config, MultimodalCheckpointUsesItsTextConfig) {
  json text = tiny_gemma();
  text.erase("model_type");
  const json j = {{"model_type", "gemma3"}, {"text_config", text}, {"vision_config", {{"hidden_size", 8}}}};
  const ModelConfig c = parse_model_config(j, "cfg.json");
  EXPECT_EQ(c.model_type, "gemma3_text");
  EXPECT_EQ(c.hidden_size, 32);
  EXPECT_EQ(c.layer_types.size(), 7u);
  expect_error(json{{"model_type", "gemma3"}}, "text_config");
}

TEST(Gemma3Config, UnsupportedOptionsAreClearErrors) {
  json j = tiny_gemma();
  j["final_logit_softcapping"] = 30.0;
  expect_error(j, "final_logit_softcapping");
  j = tiny_gemma();
  j["attn_logit_softcapping"] = 50.0;
  expect_error(j, "soft-capping is not implemented");
  j = tiny_gemma();
  j["final_logit_softcapping"] = nullptr;  // null, as Gemma 3 releases write: fine
  EXPECT_NO_THROW(parse_model_config(j, "cfg.json"));
  j = tiny_gemma();
  j["use_bidirectional_attention"] = true;
  expect_error(j, "bidirectional");
  j = tiny_gemma();
  j["hidden_activation"] = "gelu";
  expect_error(j, "hidden_activation");
  j = tiny_gemma();
  j["layer_types"] = {"full_attention"};
  expect_error(j, "layer_types");
  j = tiny_gemma();
  j["num_hidden_layers"] = 1;
  j["layer_types"] = {"chunked_attention"};
  expect_error(j, "chunked_attention");
  j = tiny_gemma();
  j["sliding_window"] = nullptr;
  expect_error(j, "sliding_window");
  j = tiny_gemma();
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e4}};
  expect_error(j, "keys them by layer type");
  j = tiny_gemma();
  j["query_pre_attn_scalar"] = 0;
  expect_error(j, "query_pre_attn_scalar");
}

// The planner's table: Gemma 3 saves the two projection outputs its sandwich norms read
// and their rstd, on top of what the same config saves without them; fp32 stats.
TEST(Gemma3Config, SavedActivationsAddTheSandwichNorms) {
  const ModelConfig g = parse_model_config(tiny_gemma(), "cfg.json");
  ModelConfig plain = g;
  plain.sandwich_norms = false;
  const int64_t B = 2, S = 10, T = B * S, C = g.hidden_size;
  for (int bytes : {2, 4}) {
    const int64_t extra = block_saved_bytes(g, RecomputeOption::KeepInternals, B, S, bytes) -
                          block_saved_bytes(plain, RecomputeOption::KeepInternals, B, S, bytes);
    EXPECT_EQ(extra, 2 * T * C * bytes + 2 * T * 4) << bytes;
    EXPECT_EQ(block_saved_bytes(g, RecomputeOption::RecomputeFromInput, B, S, bytes), 0);
  }
  std::vector<std::string> names;
  for (const auto& a : block_saved_activations(g, RecomputeOption::KeepInternals, B, S, 4)) names.push_back(a.name);
  for (const char* n : {"attn_proj_out", "post_attn_norm_rstd", "mlp_down_out", "post_mlp_norm_rstd"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
}

// FLOPs: a sliding layer computes only the pairs inside its window.
TEST(Gemma3Config, WindowedFlopsCountOnlyTheWindow) {
  json j = tiny_gemma();
  j["sliding_window"] = 4;
  const ModelConfig c = parse_model_config(j, "cfg.json");
  const double full = block_forward_flops(c, 1, 10, 5), slide = block_forward_flops(c, 1, 10, 0);
  // 10 queries: causal 55 pairs; window 4: 1+2+3+4 + 6*4 = 34 pairs; 4 FLOPs per pair-dim.
  EXPECT_DOUBLE_EQ(full - slide, 4.0 * c.num_heads * c.head_dim * (55 - 34));
  EXPECT_DOUBLE_EQ(block_forward_flops(c, 1, 10), full);
}

// A gemma3 (multimodal) checkpoint: config.json with a text_config, the language model's
// tensors under transformers 5's model.language_model.* names, a vision tensor beside
// them. load_parameters reads the language model; every value lands where it belongs.
TEST(Gemma3Config, LoadsTheLanguageModelOfAMultimodalCheckpoint) {
  json text = tiny_gemma();
  text["num_hidden_layers"] = 2;
  const ModelConfig c = parse_model_config(text, "text");
  test::TempDir dir("gemma3-multimodal");
  const json top = {{"model_type", "gemma3"}, {"text_config", text}};
  write_file_atomic((dir.path() / "config.json").string(), top.dump());
  std::vector<std::vector<float>> data;
  std::vector<NamedTensor> tensors;
  const auto specs = all_weight_specs(c);
  data.reserve(specs.size() + 1);
  for (size_t k = 0; k < specs.size(); ++k) {
    data.emplace_back(specs[k].numel());
    for (size_t i = 0; i < data.back().size(); ++i) data.back()[i] = static_cast<float>(k) + 1e-3f * (i % 997);
    const std::string& n = specs[k].hf_name;
    tensors.push_back({"model.language_model." + n.substr(6), {data.back().data(), DType::F32, specs[k].shape}});
  }
  data.emplace_back(4, 7.0f);
  tensors.push_back({"model.vision_tower.patch.weight", {data.back().data(), DType::F32, {4}}});
  save_safetensors((dir.path() / "model.safetensors").string(), tensors);

  const ModelConfig loaded = load_model_config(dir.str());
  EXPECT_EQ(loaded.model_type, "gemma3_text");
  ModelParameters p(loaded);
  load_parameters(p, dir.str());
  for (size_t k = 0; k < specs.size(); ++k) {
    const float* got = p.tensor(specs[k].hf_name);
    EXPECT_EQ(0, std::memcmp(got, data[k].data(), data[k].size() * sizeof(float))) << specs[k].hf_name;
  }
}

}  // namespace
}  // namespace lt
