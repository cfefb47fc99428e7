// Parses Hugging Face config.json for the supported families, mirroring the
// defaults of transformers' config classes (5.x) so a config means the same model here
// and there. Anything that would change the math and is not implemented is an error.
#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/atomic_file.h"
#include "model/config_fields.h"
#include "model/config_moe.h"
#include "model/config_qwen3_5.h"
#include "model/layer_specs.h"

namespace lt {

namespace {

using nlohmann::json;
using namespace config_fields;

// Per-family facts from transformers' modeling_*.py and configuration_*.py.
struct Family {
  const char* model_type;
  const char* architecture;
  int64_t default_max_positions;
  int64_t default_head_dim;  // 0: hidden_size / num_attention_heads
  bool attention_bias_field;  // q/k/v/o bias follow "attention_bias" (llama, qwen3)
  bool fixed_qkv_bias;        // q/k/v always biased, o never (qwen2)
  bool mlp_bias_field;        // gate/up/down bias follow "mlp_bias" (llama)
  bool qk_norm;               // qwen3
};

constexpr Family kFamilies[] = {
    {"llama", "LlamaForCausalLM", 2048, 0, true, false, true, false},
    {"mistral", "MistralForCausalLM", 131072, 0, false, false, false, false},
    {"qwen2", "Qwen2ForCausalLM", 32768, 0, false, true, false, false},
    {"qwen3", "Qwen3ForCausalLM", 32768, 128, true, false, false, true},
    {"gemma3_text", "Gemma3ForCausalLM", 131072, 256, true, false, false, true},
};

const Family* find_family(const std::string& type) {
  for (const auto& f : kFamilies)
    if (type == f.model_type) return &f;
  return nullptr;
}

// One RoPE parameter object ({rope_type, rope_theta, factor, ...}) into theta/scaling.
void parse_rope_object(double& theta, RopeScaling& scaling, const Fields& p, const std::string& where,
                       int64_t max_positions) {
  theta = p.opt_num("rope_theta", theta);
  if (p.has("partial_rotary_factor") && p.opt_num("partial_rotary_factor", 1.0) != 1.0)
    throw Error("partial rotary embeddings are not supported", p.at("partial_rotary_factor"), "");
  const std::string type = p.opt_str("rope_type", p.opt_str("type", "default"));
  if (type == "default") return;
  if (type == "linear") {
    scaling.type = RopeScalingType::Linear;
    scaling.factor = p.req_num("factor");
  } else if (type == "llama3") {
    scaling.type = RopeScalingType::Llama3;
    scaling.factor = p.req_num("factor");
    scaling.low_freq_factor = p.req_num("low_freq_factor");
    scaling.high_freq_factor = p.req_num("high_freq_factor");
    scaling.original_max_position_embeddings = p.opt_int("original_max_position_embeddings", max_positions);
    if (!(scaling.high_freq_factor > scaling.low_freq_factor))
      throw Error("llama3 rope scaling needs high_freq_factor > low_freq_factor", where, kFixConfig);
    require_positive(scaling.original_max_position_embeddings, p, "original_max_position_embeddings");
  } else {
    throw Error("rope scaling type \"" + type + "\" is not supported", where,
                "lazytrain implements rope_type default, linear and llama3");
  }
  if (!(scaling.factor > 0)) throw Error("rope scaling factor must be positive", p.at("factor"), kFixConfig);
}

// rope_theta and scaling: transformers 5 writes "rope_parameters": {rope_type, rope_theta,
// factor, ...}; 4.x wrote top-level "rope_theta" and "rope_scaling": {type|rope_type, ...}.
// As in transformers, "rope_scaling" wins when both are present.
void parse_rope(ModelConfig& c, const Fields& top, const std::string& where) {
  const json* params = top.opt_object("rope_scaling");
  std::string key = "rope_scaling";
  if (!params) {
    params = top.opt_object("rope_parameters");
    key = "rope_parameters";
  }
  c.rope_theta = top.opt_num("rope_theta", 10000.0);
  if (!params) return;
  const std::string at = where + ", field \"" + key + "\"";
  parse_rope_object(c.rope_theta, c.rope_scaling, Fields(*params, at), at, c.max_position_embeddings);
}

// Gemma 3: RoPE per layer type. transformers 5 writes "rope_parameters":
// {"full_attention": {...}, "sliding_attention": {...}}; 4.x wrote "rope_theta" (global,
// default 1e6), "rope_local_base_freq" (sliding layers, default 1e4) and "rope_scaling"
// (global layers only). Gemma3TextConfig.convert_rope_params_to_dict: "rope_scaling"
// updates the full_attention entry, the legacy thetas fill what the entries leave out.
void parse_gemma3_rope(ModelConfig& c, const Fields& f, const std::string& where) {
  c.rope_theta = f.opt_num("rope_theta", 1000000.0);
  c.local_rope = true;
  c.local_rope_theta = f.opt_num("rope_local_base_freq", 10000.0);
  if (const json* params = f.opt_object("rope_parameters")) {
    const std::string at = where + ", field \"rope_parameters\"";
    Fields p(*params, at);
    if (p.has("rope_type") || p.has("rope_theta"))
      throw Error("is one set of RoPE parameters; gemma3_text keys them by layer type", at,
                  "write {\"full_attention\": {...}, \"sliding_attention\": {...}} as transformers 5 does");
    for (const auto& [key, v] : params->items())
      if (key != "full_attention" && key != "sliding_attention")
        throw Error("unknown layer type \"" + key + "\"", at, "use full_attention and sliding_attention");
    if (const json* full = p.opt_object("full_attention")) {
      const std::string fat = at + ", entry \"full_attention\"";
      parse_rope_object(c.rope_theta, c.rope_scaling, Fields(*full, fat), fat, c.max_position_embeddings);
    }
    if (const json* local = p.opt_object("sliding_attention")) {
      const std::string lat = at + ", entry \"sliding_attention\"";
      parse_rope_object(c.local_rope_theta, c.local_rope_scaling, Fields(*local, lat), lat,
                        c.max_position_embeddings);
    }
  }
  if (const json* scaling = f.opt_object("rope_scaling")) {
    const std::string at = where + ", field \"rope_scaling\"";
    c.rope_scaling = RopeScaling{};
    parse_rope_object(c.rope_theta, c.rope_scaling, Fields(*scaling, at), at, c.max_position_embeddings);
  }
}

// Gemma 3's own fields (parse_model_config has read the shared ones).
void parse_gemma3(ModelConfig& c, const Fields& f, const json& j, const std::string& where) {
  const std::string act = f.opt_str("hidden_activation", "gelu_pytorch_tanh");
  if (act != "gelu_pytorch_tanh")
    throw Error("hidden_activation \"" + act + "\" is not supported", f.at("hidden_activation"),
                "lazytrain implements Gemma's GeGLU with gelu_pytorch_tanh (the released models' choice)");
  c.mlp_activation = MlpActivation::GeluTanh;
  c.norm_weight_offset = 1.0;
  c.sandwich_norms = true;
  c.scale_embeddings = true;
  c.padding_idx = j.contains("pad_token_id") ? f.opt_int("pad_token_id", -1) : 0;
  if (c.padding_idx >= c.vocab_size || c.padding_idx < -1)
    throw Error("is outside the vocabulary [0, " + std::to_string(c.vocab_size) + ")", f.at("pad_token_id"),
                kFixConfig);
  c.query_pre_attn_scalar = f.opt_num("query_pre_attn_scalar", 256.0);
  if (!(c.query_pre_attn_scalar > 0)) throw Error("must be positive", f.at("query_pre_attn_scalar"), kFixConfig);
  for (const char* key : {"final_logit_softcapping", "attn_logit_softcapping"})
    if (f.has(key))
      throw Error(std::string(key) + " is set (" + f.raw(key).dump() + "); logit soft-capping is not implemented",
                  f.at(key), "Gemma 3 releases set it to null (soft-capping was Gemma 2's); use such a config");
  if (f.opt_bool("use_bidirectional_attention", false))
    throw Error("bidirectional attention is not supported", f.at("use_bidirectional_attention"),
                "lazytrain trains causal language models; set it to false");
  // Layer types: the list, else every sliding_window_pattern-th layer is global.
  if (f.has("layer_types")) {
    const json& lt = f.raw("layer_types");
    if (!lt.is_array() || static_cast<int64_t>(lt.size()) != c.num_layers)
      throw Error("must be a list of " + std::to_string(c.num_layers) + " layer types (num_hidden_layers)",
                  f.at("layer_types"), kFixConfig);
    for (const auto& t : lt) {
      if (t == "full_attention") c.layer_types.push_back(LayerAttention::Full);
      else if (t == "sliding_attention") c.layer_types.push_back(LayerAttention::Sliding);
      else
        throw Error("layer type " + t.dump() + " is not supported", f.at("layer_types"),
                    "gemma3_text layers are \"full_attention\" or \"sliding_attention\"");
    }
  } else {
    const int64_t pattern = f.opt_int("sliding_window_pattern", 6);
    require_positive(pattern, f, "sliding_window_pattern");
    for (int64_t i = 0; i < c.num_layers; ++i)
      c.layer_types.push_back((i + 1) % pattern ? LayerAttention::Sliding : LayerAttention::Full);
  }
  // An absent key means the class default (4096).
  const bool any_sliding =
      std::find(c.layer_types.begin(), c.layer_types.end(), LayerAttention::Sliding) != c.layer_types.end();
  c.sliding_window = j.contains("sliding_window") ? f.opt_int("sliding_window", 0) : 4096;
  if (any_sliding && c.sliding_window <= 0)
    throw Error("sliding layers need a positive sliding_window, got " +
                    (f.has("sliding_window") ? std::to_string(c.sliding_window) : std::string("null")),
                f.at("sliding_window"), kFixConfig);
  if (!any_sliding) c.sliding_window = std::max<int64_t>(c.sliding_window, 0);
  parse_gemma3_rope(c, f, where);
}

// Qwen2/Qwen3 apply a window to layers >= max_window_layers when use_sliding_window is set
// (or per "layer_types"). Released checkpoints train with full attention everywhere.
void reject_qwen_sliding_window(const Fields& f, int64_t num_layers, const std::string& where) {
  const std::string fix =
      "sliding-window attention is not implemented; set \"use_sliding_window\": false if the model was "
      "trained with full attention (Qwen2/Qwen3 releases were)";
  if (f.has("layer_types")) {
    const json& lt = f.raw("layer_types");
    if (!lt.is_array()) throw Error("must be a list of strings", f.at("layer_types"), kFixConfig);
    for (const auto& t : lt)
      if (t != "full_attention")
        throw Error("layer type " + t.dump() + " is not supported", f.at("layer_types"), fix);
    return;
  }
  if (!f.opt_bool("use_sliding_window", false)) return;
  const int64_t window = f.opt_int("sliding_window", 4096);
  const int64_t from = f.opt_int("max_window_layers", 28);
  // An absent key means the class default (4096); an explicit null means no window.
  const bool has_window = !f.present("sliding_window") || f.has("sliding_window");
  if (has_window && from < num_layers)
    throw Error("use_sliding_window is true (window " + std::to_string(window) + " from layer " +
                    std::to_string(from) + ")",
                f.at("use_sliding_window"), fix);
}

}  // namespace

std::string supported_model_types() {
  std::string out;
  for (const auto& f : kFamilies) out += (out.empty() ? "" : ", ") + std::string(f.model_type);
  return out + ", qwen3_5_text, qwen3_5_moe_text, qwen3_moe, mixtral";
}

ModelConfig parse_model_config(const json& j, const std::string& where) {
  if (!j.is_object()) throw Error("config is not a JSON object", where, kFixConfig);
  // A multimodal Gemma 3 checkpoint: its language model is the text_config.
  if (j.contains("model_type") && j.at("model_type") == "gemma3") {
    Fields top(j, where);
    const json* text = top.opt_object("text_config");
    if (!text) throw Error("gemma3 config without a text_config", where, kFixConfig);
    json t = *text;
    if (!t.contains("model_type")) t["model_type"] = "gemma3_text";
    if (!t.contains("tie_word_embeddings") && j.contains("tie_word_embeddings"))
      t["tie_word_embeddings"] = j.at("tie_word_embeddings");
    if (t.at("model_type") != "gemma3_text")
      throw Error("text_config has model_type " + t.at("model_type").dump(), top.at("text_config"),
                  "a gemma3 text_config is a gemma3_text config");
    return parse_model_config(t, where + ", text_config");
  }
  Fields f(j, where);
  ModelConfig c;
  if (!f.has("model_type"))
    throw Error("required field \"model_type\" is missing", where, "supported: " + supported_model_types());
  c.model_type = f.opt_str("model_type", "");
  if (is_qwen3_5_type(c.model_type)) return parse_qwen3_5_config(j, where);
  if (is_moe_type(c.model_type)) return parse_moe_config(j, where);
  const Family* fam = find_family(c.model_type);
  if (!fam)
    throw Error("model_type \"" + c.model_type + "\" is not supported", f.at("model_type"),
                "lazytrain supports " + supported_model_types());

  c.hidden_size = f.req_int("hidden_size");
  c.num_layers = f.req_int("num_hidden_layers");
  c.num_heads = f.req_int("num_attention_heads");
  c.intermediate_size = f.req_int("intermediate_size");
  c.vocab_size = f.req_int("vocab_size");
  require_positive(c.hidden_size, f, "hidden_size");
  require_positive(c.num_layers, f, "num_hidden_layers");
  require_positive(c.num_heads, f, "num_attention_heads");
  require_positive(c.intermediate_size, f, "intermediate_size");
  require_positive(c.vocab_size, f, "vocab_size");
  require_at_most(c.hidden_size, kMaxWidth, f, "hidden_size");
  require_at_most(c.num_layers, kMaxCount, f, "num_hidden_layers");
  require_at_most(c.num_heads, kMaxCount, f, "num_attention_heads");
  require_at_most(c.intermediate_size, kMaxIntermediate, f, "intermediate_size");
  require_at_most(c.vocab_size, kMaxTokens, f, "vocab_size");
  const bool gemma3 = c.model_type == "gemma3_text";
  c.num_kv_heads = f.opt_int("num_key_value_heads", gemma3 ? 4 : c.num_heads);  // Gemma3TextConfig's default
  require_positive(c.num_kv_heads, f, "num_key_value_heads");
  require_at_most(c.num_kv_heads, kMaxCount, f, "num_key_value_heads");
  if (c.num_heads % c.num_kv_heads != 0)
    throw Error("num_attention_heads " + std::to_string(c.num_heads) + " is not a multiple of num_key_value_heads " +
                    std::to_string(c.num_kv_heads),
                f.at("num_key_value_heads"), "grouped-query attention needs whole groups; " + std::string(kFixConfig));
  // transformers reads head_dim with `or`: null and 0 fall back to the default.
  c.head_dim = f.opt_int("head_dim", 0);
  if (c.head_dim == 0) c.head_dim = fam->default_head_dim;
  if (c.head_dim == 0) {
    if (c.hidden_size % c.num_heads != 0)
      throw Error("hidden_size is not a multiple of num_attention_heads and head_dim is not given",
                  f.at("head_dim"), "state head_dim in config.json");
    c.head_dim = c.hidden_size / c.num_heads;
  }
  require_positive(c.head_dim, f, "head_dim");
  require_at_most(c.head_dim, kMaxCount, f, "head_dim");
  // Rotary embeddings rotate pairs of channels (as transformers does, which fails the same
  // config later with a shape error).
  if (c.head_dim % 2 != 0)
    throw Error("head_dim " + std::to_string(c.head_dim) + " is odd" +
                    (f.has("head_dim") ? "" : " (hidden_size / num_attention_heads)") +
                    "; rotary position embeddings need an even head_dim",
                f.at("head_dim"), "use a config whose head_dim (or hidden_size / num_attention_heads) is even");
  c.max_position_embeddings = f.opt_int("max_position_embeddings", fam->default_max_positions);
  require_positive(c.max_position_embeddings, f, "max_position_embeddings");
  require_at_most(c.max_position_embeddings, kMaxTokens, f, "max_position_embeddings");
  {
    // Each factor is bounded above, so this double is exact enough to bound the int64 sums.
    const double h = static_cast<double>(c.hidden_size), q = static_cast<double>(c.q_dim()),
                 kv = static_cast<double>(c.kv_dim()), inter = static_cast<double>(c.intermediate_size);
    const double params = static_cast<double>(c.num_layers) * (h * (2 * q + 2 * kv) + 3 * h * inter + 2 * (q + kv) + 2 * h) +
                          2 * static_cast<double>(c.vocab_size) * h + h;
    if (params > kMaxParams)
      throw Error("the model would have " + std::to_string(params) + " parameters, more than lazytrain supports (1e15)",
                  where, kFixConfig);
  }
  c.rms_norm_eps = f.opt_num("rms_norm_eps", 1e-6);
  if (!(c.rms_norm_eps > 0)) throw Error("must be positive", f.at("rms_norm_eps"), kFixConfig);

  if (!gemma3) {  // Gemma reads hidden_activation (parse_gemma3)
    const std::string act = f.opt_str("hidden_act", "silu");
    if (act != "silu" && act != "swish")  // transformers maps both names to SiLU
      throw Error("hidden_act \"" + act + "\" is not supported", f.at("hidden_act"),
                  "lazytrain implements the SwiGLU MLP (hidden_act \"silu\") only");
    parse_rope(c, f, where);
  }
  // False in the llama, mistral and qwen classes, true in Gemma3TextConfig.
  c.tie_word_embeddings = f.opt_bool("tie_word_embeddings", gemma3);

  if (fam->attention_bias_field) c.qkv_bias = c.o_bias = f.opt_bool("attention_bias", false);
  if (fam->fixed_qkv_bias) {
    c.qkv_bias = true;
    c.o_bias = false;
  }
  if (fam->mlp_bias_field) c.mlp_bias = f.opt_bool("mlp_bias", false);
  c.qk_norm = fam->qk_norm;

  // transformers 5 writes "dtype", 4.x wrote "torch_dtype".
  c.torch_dtype = f.opt_str("dtype", f.opt_str("torch_dtype", "float32"));

  if (c.model_type == "mistral") {
    // MistralConfig's default window is 4096 when the key is absent; null means none.
    const bool absent = !j.contains("sliding_window");
    const int64_t window = absent ? 4096 : f.opt_int("sliding_window", 0);
    if (window < 0) throw Error("must be positive or null", f.at("sliding_window"), kFixConfig);
    c.sliding_window = window;
  } else if (c.model_type == "qwen2" || c.model_type == "qwen3") {
    reject_qwen_sliding_window(f, c.num_layers, where);
  } else if (gemma3) {
    parse_gemma3(c, f, j, where);
  }
  return c;
}

ModelConfig load_model_config(const std::string& path) {
  std::string file = path;
  if (std::filesystem::is_directory(path)) file = (std::filesystem::path(path) / "config.json").string();
  json j;
  try {
    j = json::parse(read_text_file(file));
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number like 1e400
    throw Error(std::string("config is not valid JSON: ") + e.what(), file, kFixConfig);
  }
  return parse_model_config(j, file);
}

json model_config_to_json(const ModelConfig& c) {
  if (c.model_type == "qwen3_5_text" || c.model_type == "qwen3_5_moe_text") {  // its shared fields, written as its qwen3 twin's
    ModelConfig twin = c;
    twin.model_type = "qwen3";
    twin.moe = MoeConfig{};  // written by qwen3_5_config_to_json
    twin.layer_kinds.clear();
    twin.norm_weight_offset = 0;  // Qwen3.5's (1 + w) norms are its own, not a qwen3 field
    twin.padding_idx = -1;        // written by qwen3_5_config_to_json
    return qwen3_5_config_to_json(c, model_config_to_json(twin));
  }
  if (is_moe_type(c.model_type)) {  // its shared fields, written as its dense twin's
    ModelConfig twin = c;
    twin.model_type = moe_dense_twin(c.model_type);
    twin.moe = MoeConfig{};
    if (c.model_type == "qwen3_moe") twin.sliding_window = 0;  // written by moe_config_to_json
    return moe_config_to_json(c, model_config_to_json(twin));
  }
  const Family* fam = find_family(c.model_type);
  const std::string where = "model config (" + c.model_type + ")";
  if (!fam)
    throw Error("model_type \"" + c.model_type + "\" is not supported", where,
                "lazytrain supports " + supported_model_types());
  auto unrepresentable = [&](const std::string& what) {
    throw Error(what + " cannot be expressed in a " + c.model_type + " config.json", where,
                "use a model_type whose architecture has this layout");
  };
  if (fam->attention_bias_field && c.qkv_bias != c.o_bias) unrepresentable("q/k/v bias without o bias (or back)");
  if (fam->fixed_qkv_bias && !(c.qkv_bias && !c.o_bias)) unrepresentable("attention biases other than q/k/v");
  if (!fam->attention_bias_field && !fam->fixed_qkv_bias && (c.qkv_bias || c.o_bias)) unrepresentable("attention bias");
  if (!fam->mlp_bias_field && c.mlp_bias) unrepresentable("MLP bias");
  if (c.qk_norm != fam->qk_norm) unrepresentable(c.qk_norm ? "q/k norm" : "no q/k norm");
  if (c.has_moe()) unrepresentable("a mixture-of-experts MLP");
  const bool gemma3 = c.model_type == "gemma3_text";
  if (c.sliding_window > 0 && c.model_type != "mistral" && !gemma3) unrepresentable("a sliding window");
  if (!gemma3 && (c.mlp_activation != MlpActivation::Silu || c.norm_weight_offset != 0 || c.sandwich_norms ||
                  c.scale_embeddings || c.query_pre_attn_scalar != 0 || c.local_rope || !c.layer_types.empty()))
    unrepresentable("a Gemma 3 feature");
  if (gemma3 && !(c.mlp_activation == MlpActivation::GeluTanh && c.norm_weight_offset == 1.0 && c.sandwich_norms &&
                  c.scale_embeddings && c.local_rope && static_cast<int64_t>(c.layer_types.size()) == c.num_layers))
    unrepresentable("a block other than Gemma 3's");

  auto rope_json = [](double theta, const RopeScaling& sc) {
    json rope = {{"rope_type", "default"}, {"rope_theta", theta}};
    if (sc.type == RopeScalingType::Linear) {
      rope["rope_type"] = "linear";
      rope["factor"] = sc.factor;
    } else if (sc.type == RopeScalingType::Llama3) {
      rope["rope_type"] = "llama3";
      rope["factor"] = sc.factor;
      rope["low_freq_factor"] = sc.low_freq_factor;
      rope["high_freq_factor"] = sc.high_freq_factor;
      rope["original_max_position_embeddings"] = sc.original_max_position_embeddings;
    }
    return rope;
  };
  const json rope = rope_json(c.rope_theta, c.rope_scaling);

  json j = {
      {"architectures", {fam->architecture}},
      {"model_type", c.model_type},
      {"hidden_size", c.hidden_size},
      {"intermediate_size", c.intermediate_size},
      {"num_hidden_layers", c.num_layers},
      {"num_attention_heads", c.num_heads},
      {"num_key_value_heads", c.num_kv_heads},
      {"head_dim", c.head_dim},
      {"vocab_size", c.vocab_size},
      {"max_position_embeddings", c.max_position_embeddings},
      {"rms_norm_eps", c.rms_norm_eps},
      {"hidden_act", "silu"},
      // Both spellings: transformers 5 reads rope_parameters, 4.x the top-level rope_theta.
      {"rope_theta", c.rope_theta},
      {"rope_parameters", rope},
      {"tie_word_embeddings", c.tie_word_embeddings},
      {"dtype", c.torch_dtype},
  };
  if (fam->attention_bias_field) j["attention_bias"] = c.qkv_bias;
  if (fam->mlp_bias_field) j["mlp_bias"] = c.mlp_bias;
  if (c.model_type == "qwen2" || c.model_type == "qwen3") j["use_sliding_window"] = false;
  if (c.model_type == "mistral") j["sliding_window"] = c.sliding_window > 0 ? json(c.sliding_window) : json(nullptr);
  if (gemma3) {
    j.erase("hidden_act");
    j.erase("rope_theta");
    j["hidden_activation"] = "gelu_pytorch_tanh";
    j["rope_parameters"] = {{"full_attention", rope},
                            {"sliding_attention", rope_json(c.local_rope_theta, c.local_rope_scaling)}};
    j["query_pre_attn_scalar"] = c.query_pre_attn_scalar > 0 ? c.query_pre_attn_scalar : double(c.head_dim);
    j["sliding_window"] = c.sliding_window > 0 ? json(c.sliding_window) : json(nullptr);
    json types = json::array();
    for (LayerAttention t : c.layer_types) types.push_back(t == LayerAttention::Sliding ? "sliding_attention" : "full_attention");
    j["layer_types"] = types;
    j["final_logit_softcapping"] = nullptr;
    j["attn_logit_softcapping"] = nullptr;
    j["use_bidirectional_attention"] = false;
    j["pad_token_id"] = c.padding_idx >= 0 ? json(c.padding_idx) : json(nullptr);
  }
  return j;
}

float ModelConfig::attention_scale() const {
  // The other families' expression exactly as the block computed it before Gemma.
  if (query_pre_attn_scalar <= 0) return 1.0f / std::sqrt(static_cast<float>(head_dim));
  return static_cast<float>(1.0 / std::sqrt(query_pre_attn_scalar));
}

int64_t ModelConfig::num_params() const {
  int64_t n = 0;
  for (const auto& w : all_weight_specs(*this)) n += w.numel();
  return n;
}

}  // namespace lt
