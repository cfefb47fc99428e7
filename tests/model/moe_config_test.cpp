// qwen3_moe and mixtral configs (model/config_moe.h): the MoE classes' defaults
// (transformers 5.24 Qwen3MoeConfig / MixtralConfig), which layers are sparse, what the
// parser refuses, the round trip through model_config_to_json, and how a sparse layer's
// experts are laid out; transformers
// reads the same values from both the input configs and the ones we write
// (tests/reference/moe_config_check.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/config.h"
#include "model/config_moe.h"
#include "model/layer_specs.h"
#include "model/parameters.h"
#include "plan/model_preset.h"
#include "test_util.h"

namespace lt {
namespace {

using nlohmann::json;

// 8 heads: MixtralConfig's num_key_value_heads default (8) must divide them.
json tiny(const std::string& type) {
  return {{"model_type", type},       {"hidden_size", 64}, {"intermediate_size", 96}, {"num_hidden_layers", 4},
          {"num_attention_heads", 8}, {"vocab_size", 128}};
}

// The error parse_model_config gives for j; empty when it accepts it.
std::string error_of(const json& j) {
  return test::error_of([&] { parse_model_config(j, "test"); });
}

TEST(MoeConfig, Qwen3MoeDefaultsFollowQwen3MoeConfig) {
  json j = tiny("qwen3_moe");
  j.erase("intermediate_size");
  const ModelConfig c = parse_model_config(j, "test");
  EXPECT_EQ(c.model_type, "qwen3_moe");
  ASSERT_TRUE(c.has_moe());
  EXPECT_EQ(c.moe.num_experts, 128);
  EXPECT_EQ(c.moe.experts_per_token, 8);
  EXPECT_EQ(c.moe.expert_intermediate, 768);
  EXPECT_FALSE(c.moe.norm_topk_prob);
  EXPECT_EQ(c.moe.decoder_sparse_step, 1);
  EXPECT_TRUE(c.moe.mlp_only_layers.empty());
  EXPECT_EQ(c.moe.router_aux_loss_coef, 0.001);
  EXPECT_FALSE(c.moe.output_router_logits);
  EXPECT_EQ(c.intermediate_size, 6144);  // the dense layers' width
  // No head_dim default in Qwen3MoeConfig: hidden_size / num_attention_heads (not qwen3's 128).
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.num_kv_heads, 4);  // Qwen3MoeConfig's, not num_attention_heads
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.max_position_embeddings, 32768);
  EXPECT_EQ(c.sliding_window, 0);
  for (int64_t l = 0; l < c.num_layers; ++l) EXPECT_TRUE(c.layer_is_sparse(l)) << l;
}

TEST(MoeConfig, MixtralDefaultsFollowMixtralConfig) {
  const ModelConfig c = parse_model_config(tiny("mixtral"), "test");
  EXPECT_EQ(c.model_type, "mixtral");
  ASSERT_TRUE(c.has_moe());
  EXPECT_EQ(c.moe.num_experts, 8);
  EXPECT_EQ(c.moe.experts_per_token, 2);
  EXPECT_EQ(c.moe.expert_intermediate, 96);  // the experts are intermediate_size wide
  EXPECT_TRUE(c.moe.norm_topk_prob);
  EXPECT_EQ(c.moe.router_aux_loss_coef, 0.001);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.sliding_window, 0);  // MixtralConfig: None (MistralConfig's is 4096)
  EXPECT_EQ(c.max_position_embeddings, 4096 * 32);
  EXPECT_FALSE(c.qk_norm);
  for (int64_t l = 0; l < c.num_layers; ++l) EXPECT_TRUE(c.layer_is_sparse(l)) << l;
}

TEST(MoeConfig, MixtralKeyValueHeadsDefaultIsEight) {
  json j = tiny("mixtral");
  j["num_attention_heads"] = 16;
  EXPECT_EQ(parse_model_config(j, "test").num_kv_heads, 8);
  j["num_key_value_heads"] = nullptr;  // MixtralConfig.__post_init__: None means num_attention_heads
  EXPECT_EQ(parse_model_config(j, "test").num_kv_heads, 16);
}

TEST(MoeConfig, Qwen3MoeSparseLayers) {
  json j = tiny("qwen3_moe");
  j["num_hidden_layers"] = 6;
  j["decoder_sparse_step"] = 2;
  j["mlp_only_layers"] = {3};
  const ModelConfig c = parse_model_config(j, "test");
  // (l + 1) % 2 == 0 and not 3: layers 1 and 5.
  const bool want[] = {false, true, false, false, false, true};
  for (int64_t l = 0; l < 6; ++l) EXPECT_EQ(c.layer_is_sparse(l), want[l]) << l;
}

TEST(MoeConfig, Qwen3MoeSlidingWindowCoversEveryLayer) {
  json j = tiny("qwen3_moe");
  j["use_sliding_window"] = true;
  j["sliding_window"] = 32;
  const ModelConfig c = parse_model_config(j, "test");
  EXPECT_EQ(c.sliding_window, 32);
  for (int64_t l = 0; l < c.num_layers; ++l) EXPECT_EQ(c.layer_window(l), 32) << l;
  j["use_sliding_window"] = false;
  EXPECT_EQ(parse_model_config(j, "test").sliding_window, 0);
}

TEST(MoeConfig, RefusesWhatItCannotMean) {
  struct Case {
    const char* type;
    const char* key;
    json value;
    const char* expect;
  } cases[] = {
      {"qwen3_moe", "num_experts_per_tok", 9, "not in [1, num_experts = 8]"},
      {"qwen3_moe", "num_experts", 0, "use model_type \"qwen3\""},
      {"qwen3_moe", "moe_intermediate_size", 0, "must be positive"},
      {"qwen3_moe", "decoder_sparse_step", 0, "must be positive"},
      {"qwen3_moe", "mlp_only_layers", json::array({4}), "not a layer index in [0, 4)"},
      {"qwen3_moe", "mlp_only_layers", "all", "must be a list"},
      {"qwen3_moe", "router_aux_loss_coef", -1.0, "non-negative"},
      {"qwen3_moe", "norm_topk_prob", 1, "must be true or false"},
      {"mixtral", "num_local_experts", 1, "not in [1, num_local_experts = 1]"},
      {"mixtral", "router_jitter_noise", 0.01, "jitter noise is not implemented"},
  };
  for (const Case& k : cases) {
    json j = tiny(k.type);
    j["num_experts"] = 8;
    if (std::string(k.type) == "mixtral") j.erase("num_experts");
    j[k.key] = k.value;
    if (std::string(k.key) == "num_local_experts") j["num_experts_per_tok"] = 2;
    const std::string msg = error_of(j);
    EXPECT_NE(msg.find(k.expect), std::string::npos) << k.type << " " << k.key << ": " << msg;
    EXPECT_NE(msg.find(k.key), std::string::npos) << "names the field: " << msg;
  }
}

void expect_same(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.model_type, b.model_type);
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.num_layers, b.num_layers);
  EXPECT_EQ(a.num_heads, b.num_heads);
  EXPECT_EQ(a.num_kv_heads, b.num_kv_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.intermediate_size, b.intermediate_size);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.max_position_embeddings, b.max_position_embeddings);
  EXPECT_EQ(a.rms_norm_eps, b.rms_norm_eps);
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.qk_norm, b.qk_norm);
  EXPECT_EQ(a.qkv_bias, b.qkv_bias);
  EXPECT_EQ(a.sliding_window, b.sliding_window);
  EXPECT_EQ(a.moe.num_experts, b.moe.num_experts);
  EXPECT_EQ(a.moe.experts_per_token, b.moe.experts_per_token);
  EXPECT_EQ(a.moe.expert_intermediate, b.moe.expert_intermediate);
  EXPECT_EQ(a.moe.norm_topk_prob, b.moe.norm_topk_prob);
  EXPECT_EQ(a.moe.decoder_sparse_step, b.moe.decoder_sparse_step);
  EXPECT_EQ(a.moe.mlp_only_layers, b.moe.mlp_only_layers);
  EXPECT_EQ(a.moe.router_aux_loss_coef, b.moe.router_aux_loss_coef);
  EXPECT_EQ(a.moe.output_router_logits, b.moe.output_router_logits);
}

TEST(MoeConfig, WrittenConfigReadsBackTheSame) {
  json q = tiny("qwen3_moe");
  q["num_hidden_layers"] = 6;
  q["num_experts"] = 16;
  q["num_experts_per_tok"] = 4;
  q["moe_intermediate_size"] = 40;
  q["norm_topk_prob"] = true;
  q["decoder_sparse_step"] = 2;
  q["mlp_only_layers"] = {1};
  q["router_aux_loss_coef"] = 0.02;
  q["output_router_logits"] = true;
  q["attention_bias"] = true;
  q["use_sliding_window"] = true;
  q["sliding_window"] = 64;
  q["head_dim"] = 32;
  json m = tiny("mixtral");
  m["num_local_experts"] = 4;
  m["sliding_window"] = 128;
  m["num_key_value_heads"] = 2;
  m["router_aux_loss_coef"] = 0.02;
  for (const json& j : {q, m}) {
    const ModelConfig a = parse_model_config(j, "first");
    const json written = model_config_to_json(a);
    EXPECT_EQ(written.at("architectures")[0], j["model_type"] == "mixtral" ? "MixtralForCausalLM" : "Qwen3MoeForCausalLM");
    const ModelConfig b = parse_model_config(written, "written");
    expect_same(a, b);
  }
  // A dense family cannot carry experts.
  ModelConfig dense = parse_model_config(q, "q");
  dense.model_type = "qwen3";
  EXPECT_THROW(model_config_to_json(dense), Error);
}

TEST(MoeConfig, SparseLayersLayOutTheirExpertsPerCheckpointTensor) {
  for (const char* type : {"qwen3_moe", "mixtral"}) {
    json j = tiny(type);
    const bool mixtral = std::string(type) == "mixtral";
    j[mixtral ? "num_local_experts" : "num_experts"] = 3;
    j["num_experts_per_tok"] = 2;
    if (!mixtral) j["moe_intermediate_size"] = 40, j["mlp_only_layers"] = {1};
    const ModelConfig c = parse_model_config(j, "test");
    const int64_t C = 64, E = 3, I = mixtral ? 96 : 40;
    const std::string block = mixtral ? "model.layers.0.block_sparse_moe." : "model.layers.0.mlp.";
    const std::vector<WeightSpec> w = block_weight_specs(c, 0);
    // input norm, q, k, v, o (+ q/k norms for qwen3_moe), post-attention norm, then the MoE.
    const auto router = std::find_if(w.begin(), w.end(), [&](const WeightSpec& s) { return s.hf_name == block + "gate.weight"; });
    ASSERT_NE(router, w.end()) << type;
    EXPECT_EQ(router->shape, (Shape{E, C}));
    ASSERT_EQ(w.end() - router, 1 + 3 * E) << type << ": the router, then three tensors per expert, last";
    const std::string gate = mixtral ? "w1" : "gate_proj", up = mixtral ? "w3" : "up_proj", down = mixtral ? "w2" : "down_proj";
    for (int64_t e = 0; e < E; ++e) {  // gate_up [E, 2I, C]: each expert's gate rows, then its up rows
      EXPECT_EQ(router[1 + 2 * e].hf_name, block + "experts." + std::to_string(e) + "." + gate + ".weight");
      EXPECT_EQ(router[2 + 2 * e].hf_name, block + "experts." + std::to_string(e) + "." + up + ".weight");
      EXPECT_EQ(router[1 + 2 * e].shape, (Shape{I, C}));
      EXPECT_EQ(router[1 + 2 * E + e].hf_name, block + "experts." + std::to_string(e) + "." + down + ".weight");
      EXPECT_EQ(router[1 + 2 * E + e].shape, (Shape{C, I}));
    }
    // The block's views cover the same elements in the same order (ModelParameters checks
    // the total; here the MoE fields' sizes).
    const std::vector<BlockField> f = block_fields(c, 0);
    ASSERT_GE(f.size(), 3u);
    EXPECT_EQ(f[f.size() - 3].numel, E * C);
    EXPECT_EQ(f[f.size() - 2].numel, E * 2 * I * C);
    EXPECT_EQ(f[f.size() - 1].numel, E * C * I);
    EXPECT_EQ(block_numel(c, 0), [&] {
      int64_t n = 0;
      for (const BlockField& x : f) n += x.numel;
      return n;
    }());
    if (!mixtral) {  // layer 1 is dense (mlp_only_layers)
      const std::vector<WeightSpec> dense = block_weight_specs(c, 1);
      EXPECT_EQ(dense.back().hf_name, "model.layers.1.mlp.down_proj.weight");
    }
  }
}

TEST(MoeConfig, Qwen3MoeReadsTransformersNameForTheExpertCount) {
  // transformers 5.x's save_pretrained writes qwen3_moe's expert count as num_local_experts.
  json j = tiny("qwen3_moe");
  j["num_experts_per_tok"] = 2;
  j["num_local_experts"] = 6;
  EXPECT_EQ(parse_model_config(j, "test").moe.num_experts, 6);
  j["num_experts"] = 6;
  EXPECT_EQ(parse_model_config(j, "test").moe.num_experts, 6);
  j["num_experts"] = 5;
  EXPECT_NE(error_of(j).find("two expert counts"), std::string::npos) << error_of(j);
}

// The presets' sizes against the published ones, within one unit of the last digit given
// (a figure may be truncated rather than rounded: the 3.35B a token of Qwen3-30B-A3B
// computes with, embedding and head included, is published as 3.3B): Qwen3-30B-A3B 30.5B
// total, 3.3B activated (its model card); Mixtral 8x7B 46.7B total, 12.9B per token
// (Mistral AI's model card).
TEST(MoeConfig, PresetsHaveTheirPublishedSizes) {
  struct Published {
    const char* preset;
    double total, active, digit;
  };
  for (const Published& p : {Published{"qwen3-30b-a3b", 30.5e9, 3.3e9, 0.1e9}, Published{"mixtral-8x7b", 46.7e9, 12.9e9, 0.1e9}}) {
    const ModelConfig c = resolve_model(p.preset).config;
    const double total = static_cast<double>(c.num_params()), active = static_cast<double>(active_params(c));
    std::printf("  %s: %.4fB parameters, %.4fB active\n", p.preset, total / 1e9, active / 1e9);
    EXPECT_LE(std::fabs(total - p.total), p.digit) << p.preset;
    EXPECT_LE(std::fabs(active - p.active), p.digit) << p.preset;
  }
  // A dense model computes with all of its parameters.
  const ModelConfig dense = parse_model_config(tiny("qwen3"), "test");
  EXPECT_EQ(active_params(dense), dense.num_params());
}

// Qwen3.5 MoE: the hybrid text config with every layer sparse and a gated shared expert,
// whose width is the layers' dense intermediate_size; read from a qwen3_5_moe (vision-
// language) checkpoint's text_config too, and written back as a qwen3_5_moe_text config.
TEST(MoeConfig, Qwen35MoeReadsItsTextConfig) {
  const json text = {{"model_type", "qwen3_5_moe_text"}, {"hidden_size", 64}, {"num_hidden_layers", 4},
                     {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"head_dim", 16},
                     {"vocab_size", 128}, {"linear_num_key_heads", 2}, {"linear_num_value_heads", 4},
                     {"linear_key_head_dim", 8}, {"linear_value_head_dim", 12}, {"num_experts", 6},
                     {"num_experts_per_tok", 2}, {"moe_intermediate_size", 40},
                     {"shared_expert_intermediate_size", 56}, {"router_aux_loss_coef", 0.01},
                     {"output_router_logits", true}};
  const json wrapped = {{"model_type", "qwen3_5_moe"}, {"text_config", text}};
  for (const json& j : {text, wrapped}) {
    const ModelConfig c = parse_model_config(j, "test");
    EXPECT_EQ(c.model_type, "qwen3_5_moe_text");
    ASSERT_TRUE(c.hybrid() && c.has_moe());
    EXPECT_EQ(c.layer_kind(3), LayerKind::Attention);  // full_attention_interval 4
    EXPECT_EQ(c.moe.num_experts, 6);
    EXPECT_EQ(c.moe.expert_intermediate, 40);
    EXPECT_EQ(c.moe.shared_expert_intermediate, 56);
    EXPECT_EQ(c.intermediate_size, 56);
    EXPECT_TRUE(c.moe.norm_topk_prob);
    EXPECT_TRUE(c.moe.output_router_logits);
    for (int64_t l = 0; l < 4; ++l) EXPECT_TRUE(c.layer_is_sparse(l)) << l;
    const std::vector<WeightSpec> w = block_weight_specs(c, 0);
    EXPECT_EQ(w.back().hf_name, "model.layers.0.mlp.shared_expert_gate.weight");
    EXPECT_EQ(w.back().shape, (Shape{1, 64}));
    const ModelConfig back = parse_model_config(model_config_to_json(c), "written");
    EXPECT_EQ(back.model_type, "qwen3_5_moe_text");
    EXPECT_EQ(back.moe.num_experts, 6);
    EXPECT_EQ(back.moe.shared_expert_intermediate, 56);
    EXPECT_EQ(back.moe.router_aux_loss_coef, 0.01);
    EXPECT_EQ(back.layer_kinds, c.layer_kinds);
  }
}

// transformers' reading of each input config (class defaults included) and of what we write
// for it equals ours; for the small cases it also builds the model and checks which layers
// are sparse.
TEST(MoeConfig, TransformersReadsWhatWeRead) {
  json q_defaults = tiny("qwen3_moe");  // 128 experts of 768: too big to build, read only
  json m_defaults = tiny("mixtral");
  json q = tiny("qwen3_moe");
  q["num_hidden_layers"] = 6;
  q["num_experts"] = 4;
  q["num_experts_per_tok"] = 2;
  q["moe_intermediate_size"] = 24;
  q["norm_topk_prob"] = true;
  q["decoder_sparse_step"] = 2;
  q["mlp_only_layers"] = {3};
  q["router_aux_loss_coef"] = 0.02;
  q["output_router_logits"] = true;
  q["use_sliding_window"] = true;
  q["sliding_window"] = 64;
  json m = tiny("mixtral");
  m["num_local_experts"] = 4;
  m["num_key_value_heads"] = 2;
  m["sliding_window"] = 128;
  m["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 5e5}};
  const std::pair<json, bool> cases[] = {{q_defaults, false}, {m_defaults, true}, {q, true}, {m, true}};
  test::TempDir dir("moe-config");
  std::string args;
  int i = 0;
  for (const auto& [input, build] : cases) {
    const ModelConfig c = parse_model_config(input, "case");
    const std::filesystem::path d = dir.path() / (c.model_type + std::to_string(i++));
    std::filesystem::create_directories(d);
    std::ofstream(d / "input.json") << input.dump();
    std::ofstream(d / "config.json") << model_config_to_json(c).dump();
    json sparse = json::array();
    for (int64_t l = 0; l < c.num_layers; ++l) sparse.push_back(c.layer_is_sparse(l));
    const json expected = {{"num_experts", c.moe.num_experts},
                           {"experts_per_token", c.moe.experts_per_token},
                           {"expert_intermediate", c.moe.expert_intermediate},
                           {"norm_topk_prob", c.moe.norm_topk_prob},
                           {"decoder_sparse_step", c.moe.decoder_sparse_step},
                           {"mlp_only_layers", c.moe.mlp_only_layers},
                           {"router_aux_loss_coef", c.moe.router_aux_loss_coef},
                           {"output_router_logits", c.moe.output_router_logits},
                           {"head_dim", c.head_dim},
                           {"num_kv_heads", c.num_kv_heads},
                           {"rms_norm_eps", c.rms_norm_eps},
                           {"rope_theta", c.rope_theta},
                           {"sliding_window", c.sliding_window},
                           {"build", build},
                           {"sparse_layers", sparse}};
    std::ofstream(d / "expected.json") << expected.dump();
    args += " '" + d.string() + "'";
  }
  const auto r = test::run_reference_script("moe_config_check.py", args);
  ASSERT_PYTHON_OK(r);
}

}  // namespace
}  // namespace lt
