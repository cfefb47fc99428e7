#include "model/parameters.h"

#include "core/error.h"

namespace lt {

BlockTensors bind_block_tensors(const ModelConfig& c, float* base) {
  BlockTensors t;
  // The order here is block_weight_specs()'s order; block_numel() checks the total.
  auto take = [&](int64_t n) {
    float* p = base;
    base += n;
    return p;
  };
  const int64_t C = c.hidden_size, QD = c.q_dim(), KD = c.kv_dim(), I = c.intermediate_size;
  t.attn_norm = take(C);
  t.wq = take(QD * C);
  if (c.qkv_bias) t.bq = take(QD);
  t.wk = take(KD * C);
  if (c.qkv_bias) t.bk = take(KD);
  t.wv = take(KD * C);
  if (c.qkv_bias) t.bv = take(KD);
  if (c.qk_norm) {
    t.q_norm = take(c.head_dim);
    t.k_norm = take(c.head_dim);
  }
  t.wo = take(C * QD);
  if (c.o_bias) t.bo = take(C);
  t.mlp_norm = take(C);
  t.wg = take(I * C);
  if (c.mlp_bias) t.bg = take(I);
  t.wu = take(I * C);
  if (c.mlp_bias) t.bu = take(I);
  t.wd = take(C * I);
  if (c.mlp_bias) t.bd = take(C);
  return t;
}

int64_t block_numel(const ModelConfig& c) {
  int64_t n = 0;
  for (const auto& s : block_weight_specs(c, 0)) n += s.numel();
  return n;
}

ModelParameters::ModelParameters(const ModelConfig& c) : config_(c), specs_(all_weight_specs(c)) {
  int64_t off = 0;
  for (size_t i = 0; i < specs_.size(); ++i) {
    offsets_.push_back(off);
    index_[specs_[i].hf_name] = i;
    off += specs_[i].numel();
  }
  const int64_t per_block = block_numel(c);
  const int64_t first_block = embedding_weight_spec(c).numel();
  for (int64_t l = 0; l < c.num_layers; ++l) block_offset_.push_back(first_block + l * per_block);
  data_.resize(static_cast<size_t>(off));
  if (c.num_layers > 0) {
    // bind_block_tensors() must cover exactly the specs of block_weight_specs().
    BlockTensors t = block(0);
    const float* end = c.mlp_bias ? t.bd + c.hidden_size : t.wd + c.hidden_size * c.intermediate_size;
    LT_ASSERT(end == block_base(0) + per_block, "block views disagree with block_weight_specs");
    LT_ASSERT(specs_[1].hf_name == "model.layers.0.input_layernorm.weight");
  }
}

float* ModelParameters::tensor(const std::string& hf_name) {
  auto it = index_.find(hf_name);
  if (it == index_.end())
    throw Error("unknown parameter '" + hf_name + "'", "model parameters",
                "check the name against the model's config");
  return data_.data() + offsets_[it->second];
}

const float* ModelParameters::tensor(const std::string& hf_name) const {
  return const_cast<ModelParameters*>(this)->tensor(hf_name);
}

float* ModelParameters::final_norm() { return tensor("model.norm.weight"); }

float* ModelParameters::lm_head() {
  return config_.tie_word_embeddings ? embedding() : tensor("lm_head.weight");
}

}  // namespace lt
