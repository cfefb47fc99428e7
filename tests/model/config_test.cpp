// config.json parsing and writing, checked against transformers both ways, plus the
// errors for everything lazytrain does not implement.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/safetensors_writer.h"
#include "model/config.h"
#include "model/layer_specs.h"
#include "model/rope_frequencies.h"
#include "test_util.h"

namespace lt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// transformers computes inv_freq in fp32: theta^(2j/D) carries a relative error of about
// ln(theta) * 2^-24 from rounding the exponent (<= 14 * 6e-8 = 8.4e-7 for theta <= 1e6),
// plus a few fp32 roundings (6e-8 each) in the division and llama3 blending: 2e-6 bounds it.
constexpr double kInvFreqRelTol = 2e-6;

std::map<std::string, Shape> spec_map(const ModelConfig& c) {
  std::map<std::string, Shape> m;
  for (const auto& w : all_weight_specs(c)) m[w.hf_name] = w.shape;
  return m;
}

// --- transformers writes, lazytrain reads ---------------------------------------------

TEST(ModelConfig, ParsesConfigsSavedByTransformers) {
  test::TempDir dir("config-from-hf");
  auto r = test::run_reference_script("config_from_transformers.py", "'" + dir.str() + "'");
  ASSERT_PYTHON_OK(r);
  int cases = 0;
  for (const auto& entry : fs::directory_iterator(dir.path())) {
    SCOPED_TRACE(entry.path().filename().string());
    ++cases;
    const json e = json::parse(read_text_file((entry.path() / "expected.json").string()));
    const ModelConfig c = load_model_config(entry.path().string());
    EXPECT_EQ(c.model_type, e["model_type"]);
    EXPECT_EQ(c.hidden_size, e["hidden_size"]);
    EXPECT_EQ(c.num_layers, e["num_layers"]);
    EXPECT_EQ(c.num_heads, e["num_heads"]);
    EXPECT_EQ(c.num_kv_heads, e["num_kv_heads"]);
    EXPECT_EQ(c.head_dim, e["head_dim"]);
    EXPECT_EQ(c.intermediate_size, e["intermediate_size"]);
    EXPECT_EQ(c.vocab_size, e["vocab_size"]);
    EXPECT_EQ(c.max_position_embeddings, e["max_position_embeddings"]);
    EXPECT_EQ(c.rms_norm_eps, e["rms_norm_eps"].get<double>());
    EXPECT_EQ(c.rope_theta, e["rope_theta"].get<double>());
    EXPECT_EQ(c.rope_scaling.factor, e["rope_factor"].get<double>());
    const std::string rope_type = e["rope_type"];
    EXPECT_EQ(c.rope_scaling.type, rope_type == "llama3"   ? RopeScalingType::Llama3
                                   : rope_type == "linear" ? RopeScalingType::Linear
                                                           : RopeScalingType::None);
    EXPECT_EQ(c.tie_word_embeddings, e["tie_word_embeddings"]);
    EXPECT_EQ(c.qkv_bias, e["qkv_bias"]);
    EXPECT_EQ(c.o_bias, e["o_bias"]);
    EXPECT_EQ(c.mlp_bias, e["mlp_bias"]);
    EXPECT_EQ(c.qk_norm, e["qk_norm"]);
    EXPECT_EQ(c.torch_dtype, e["dtype"]);
    EXPECT_EQ(c.sliding_window, e["sliding_window"]);
    EXPECT_EQ(c.num_params(), e["num_params"]);
    std::map<std::string, Shape> want;
    for (const auto& [name, shape] : e["weights"].items()) want[name] = shape.get<Shape>();
    EXPECT_EQ(spec_map(c), want);
    if (!e["inv_freq"].is_null()) {
      const auto theirs = e["inv_freq"].get<std::vector<double>>();
      const auto ours = rope_inv_freq(c);
      ASSERT_EQ(ours.size(), theirs.size());
      for (size_t j = 0; j < ours.size(); ++j)
        EXPECT_NEAR(ours[j], theirs[j], kInvFreqRelTol * ours[j]) << "j=" << j;
    }
  }
  EXPECT_EQ(cases, 6);
}

// --- lazytrain writes, transformers reads ----------------------------------------------

// Writes config.json, model.safetensors (distinct values per tensor) and expected.json.
void write_model_dir(const ModelConfig& c, const fs::path& dir) {
  fs::create_directories(dir);
  write_file_atomic((dir / "config.json").string(), model_config_to_json(c).dump(2));
  std::vector<std::vector<float>> data;
  std::vector<NamedTensor> tensors;
  json weights = json::object();
  const auto specs = all_weight_specs(c);
  data.reserve(specs.size());
  for (size_t k = 0; k < specs.size(); ++k) {
    data.emplace_back(specs[k].numel());
    for (size_t i = 0; i < data.back().size(); ++i) data.back()[i] = static_cast<float>(k) + 1e-3f * (i % 997);
    tensors.push_back({specs[k].hf_name, {data.back().data(), DType::F32, specs[k].shape}});
    weights[specs[k].hf_name] = specs[k].shape;
  }
  save_safetensors((dir / "model.safetensors").string(), tensors);
  json expected = {{"num_params", c.num_params()}, {"weights", weights}, {"inv_freq", rope_inv_freq(c)}};
  write_file_atomic((dir / "expected.json").string(), expected.dump());
}

json tiny(const std::string& type) {
  return {{"model_type", type},        {"hidden_size", 32},     {"intermediate_size", 48},
          {"num_hidden_layers", 2},    {"num_attention_heads", 4}, {"num_key_value_heads", 2},
          {"vocab_size", 64},          {"max_position_embeddings", 256}};
}

TEST(ModelConfig, TransformersLoadsWhatWeWrite) {
  test::TempDir dir("config-to-hf");
  std::vector<ModelConfig> configs;
  json llama = tiny("llama");
  llama["attention_bias"] = true;
  llama["mlp_bias"] = true;
  llama["rope_scaling"] = {{"rope_type", "llama3"},        {"factor", 8.0}, {"low_freq_factor", 1.0},
                           {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 64}};
  llama["rope_theta"] = 500000.0;
  configs.push_back(parse_model_config(llama, "llama"));
  json llama_linear = tiny("llama");
  llama_linear["head_dim"] = 16;
  llama_linear["tie_word_embeddings"] = true;
  llama_linear["rope_scaling"] = {{"type", "linear"}, {"factor", 4.0}};
  configs.push_back(parse_model_config(llama_linear, "llama_linear"));
  json mistral = tiny("mistral");
  mistral["sliding_window"] = 128;
  configs.push_back(parse_model_config(mistral, "mistral"));
  json qwen2 = tiny("qwen2");
  qwen2["tie_word_embeddings"] = true;
  qwen2["rope_theta"] = 1e6;
  configs.push_back(parse_model_config(qwen2, "qwen2"));
  json qwen3 = tiny("qwen3");
  qwen3["head_dim"] = 16;
  qwen3["dtype"] = "bfloat16";
  configs.push_back(parse_model_config(qwen3, "qwen3"));
  // Qwen3.5 hybrid: linear-attention and gated full-attention layers, partial RoPE.
  json qwen3_5 = tiny("qwen3_5_text");
  qwen3_5["num_hidden_layers"] = 4;
  qwen3_5["head_dim"] = 16;
  qwen3_5["layer_types"] = {"linear_attention", "full_attention", "linear_attention", "linear_attention"};
  qwen3_5["linear_num_key_heads"] = 2;
  qwen3_5["linear_num_value_heads"] = 4;
  qwen3_5["linear_key_head_dim"] = 8;
  qwen3_5["linear_value_head_dim"] = 12;
  qwen3_5["linear_conv_kernel_dim"] = 3;
  qwen3_5["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e6}, {"partial_rotary_factor", 0.5}};
  configs.push_back(parse_model_config(qwen3_5, "qwen3_5_text"));

  std::string args;
  for (size_t i = 0; i < configs.size(); ++i) {
    const fs::path d = dir.path() / (configs[i].model_type + std::to_string(i));
    write_model_dir(configs[i], d);
    args += " '" + d.string() + "'";
    // And our own parser reads our output back to the same config.
    const ModelConfig back = load_model_config(d.string());
    EXPECT_EQ(model_config_to_json(back), model_config_to_json(configs[i])) << d;
  }
  auto r = test::run_reference_script("config_check_transformers.py", args);
  ASSERT_PYTHON_OK(r);
}

// --- transformers 4.x spelling of real configs ------------------------------------------

TEST(ModelConfig, ReadsTransformers4SpellingLlama32) {
  // meta-llama/Llama-3.2-1B config.json (abridged to the fields that matter).
  const json j = json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "attention_bias": false, "head_dim": 64,
    "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 8192,
    "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "vocab_size": 128256})");
  const ModelConfig c = parse_model_config(j, "llama-3.2-1b");
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::Llama3);
  EXPECT_EQ(c.rope_scaling.factor, 32.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_TRUE(c.tie_word_embeddings);
  // 1,235,814,400: the published count. Embedding 128256*2048, 16 layers of
  // (2*2048*2048 + 2*512*2048 + 3*2048*8192 + 2*2048), final norm 2048, tied head.
  EXPECT_EQ(c.num_params(), 1235814400);
}

TEST(ModelConfig, ReadsTransformers4SpellingQwen25) {
  // Qwen/Qwen2.5-0.5B config.json (abridged): full attention despite a sliding_window value.
  const json j = json::parse(R"({
    "architectures": ["Qwen2ForCausalLM"], "hidden_act": "silu", "hidden_size": 896,
    "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 24,
    "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24,
    "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
    "sliding_window": 32768, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "use_sliding_window": false, "vocab_size": 151936, "rope_scaling": null})");
  const ModelConfig c = parse_model_config(j, "qwen2.5-0.5b");
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::None);
  EXPECT_EQ(c.rope_theta, 1e6);
  // Also checked against transformers' own count in ParsesConfigsSavedByTransformers.
  EXPECT_EQ(c.num_params(), 494032768);
}

TEST(ModelConfig, FamilyDefaults) {
  json j = tiny("llama");
  j.erase("num_key_value_heads");
  j.erase("max_position_embeddings");
  ModelConfig c = parse_model_config(j, "t");
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.max_position_embeddings, 2048);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.torch_dtype, "float32");
  // Qwen3Config's head_dim defaults to 128, not hidden/heads.
  EXPECT_EQ(parse_model_config(tiny("qwen3"), "t").head_dim, 128);
  // MistralConfig's window defaults to 4096; an explicit null means none.
  EXPECT_EQ(parse_model_config(tiny("mistral"), "t").sliding_window, 4096);
  json m = tiny("mistral");
  m["sliding_window"] = nullptr;
  EXPECT_EQ(parse_model_config(m, "t").sliding_window, 0);
}

// --- errors name the file, the field and the problem -------------------------------------

// Writes `j` as config.json and expects load_model_config to fail with a message that
// names the file and contains every one of `parts`.
void expect_config_error(const json& j, std::initializer_list<std::string> parts) {
  test::TempDir dir("config-error");
  const std::string path = dir.str() + "/config.json";
  write_file_atomic(path, j.dump());
  try {
    load_model_config(dir.str());
    FAIL() << "no error for " << j.dump();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "missing '" << p << "' in: " << msg;
  }
}

TEST(ModelConfigErrors, UnknownModelTypeListsSupported) {
  json j = tiny("gpt2");
  expect_config_error(j, {"\"gpt2\" is not supported", "llama, mistral, qwen2, qwen3"});
}

TEST(ModelConfigErrors, UnsupportedRopeScaling) {
  json j = tiny("llama");
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  expect_config_error(j, {"rope_scaling", "\"yarn\" is not supported", "default, linear and llama3"});
  j.erase("rope_scaling");
  j["rope_parameters"] = {{"rope_type", "dynamic"}, {"factor", 2.0}, {"rope_theta", 1e4}};
  expect_config_error(j, {"rope_parameters", "\"dynamic\" is not supported"});
}

TEST(ModelConfigErrors, Llama3RopeNeedsItsFactors) {
  json j = tiny("llama");
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  expect_config_error(j, {"low_freq_factor", "missing"});
}

TEST(ModelConfigErrors, QwenSlidingWindow) {
  json j = tiny("qwen2");
  j["use_sliding_window"] = true;
  j["sliding_window"] = 4096;
  j["max_window_layers"] = 1;
  expect_config_error(j, {"use_sliding_window", "window 4096", "not implemented"});
  json q3 = tiny("qwen3");
  q3["layer_types"] = {"full_attention", "sliding_attention"};
  expect_config_error(q3, {"layer_types", "\"sliding_attention\" is not supported"});
}

TEST(ModelConfigErrors, HiddenActOtherThanSilu) {
  json j = tiny("llama");
  j["hidden_act"] = "gelu";
  expect_config_error(j, {"hidden_act", "\"gelu\" is not supported"});
}

TEST(ModelConfigErrors, HeadsNotDivisibleByKvHeads) {
  json j = tiny("llama");
  j["num_key_value_heads"] = 3;
  expect_config_error(j, {"num_key_value_heads", "not a multiple"});
}

// Issue 14: hidden 88 over 8 heads (head_dim 11) used to reach an assertion in RoPE.
TEST(ModelConfigErrors, OddHeadDim) {
  json j = tiny("qwen2");
  j["hidden_size"] = 88;
  j["num_attention_heads"] = 8;
  j["num_key_value_heads"] = 8;
  expect_config_error(j, {"head_dim 11 is odd", "hidden_size / num_attention_heads", "even"});
  j = tiny("llama");
  j["head_dim"] = 7;
  expect_config_error(j, {"\"head_dim\"", "head_dim 7 is odd"});
}

TEST(ModelConfigErrors, MissingRequiredField) {
  json j = tiny("qwen2");
  j.erase("intermediate_size");
  expect_config_error(j, {"\"intermediate_size\" is missing"});
}

TEST(ModelConfigErrors, WrongJsonType) {
  json j = tiny("llama");
  j["hidden_size"] = "32";
  expect_config_error(j, {"\"hidden_size\"", "must be an integer"});
  j = tiny("llama");
  j["tie_word_embeddings"] = 1;
  expect_config_error(j, {"\"tie_word_embeddings\"", "must be true or false"});
}

TEST(ModelConfigErrors, PartialRotary) {
  json j = tiny("llama");
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e4}, {"partial_rotary_factor", 0.5}};
  expect_config_error(j, {"partial_rotary_factor", "not supported"});
}

TEST(ModelConfigErrors, NotJson) {
  test::TempDir dir("config-notjson");
  const std::string path = dir.str() + "/config.json";
  write_file_atomic(path, "{\"model_type\": ");
  try {
    load_model_config(path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("not valid JSON"), std::string::npos) << e.what();
  }
}

TEST(ModelConfigErrors, WriterRejectsLayoutsTheFamilyCannotExpress) {
  ModelConfig c = parse_model_config(tiny("mistral"), "t");
  c.qkv_bias = true;
  EXPECT_THROW(model_config_to_json(c), Error);
  ModelConfig q = parse_model_config(tiny("qwen2"), "t");
  q.o_bias = true;
  EXPECT_THROW(model_config_to_json(q), Error);
}

}  // namespace
}  // namespace lt
