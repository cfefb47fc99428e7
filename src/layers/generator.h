// Greedy generation with a KV cache, for evaluation and `lazytrain generate`.
// Prefill runs the prompt through each layer at once; each new token then runs one
// position through every layer, attending to the cached keys and values.
// The math is the training forward's (same kernels, same precision), one sequence at a
// time. A Qwen3.5 model's Gated DeltaNet layers carry their recurrent state instead of a
// cache (layers/linear_attention_decode.h), prefill included, one token at a time.
#pragma once

#include <cstdint>
#include <vector>

#include "core/aligned_buffer.h"
#include "kernels/cpu/matmul.h"
#include "kernels/kernel_table.h"
#include "layers/compute_copy.h"
#include "layers/linear_attention_decode.h"
#include "layers/moe_mlp.h"
#include "model/config.h"
#include "model/parameters.h"

namespace lt {

class Generator {
 public:
  // max_len: prompt plus generated tokens, at most max_position_embeddings.
  Generator(const ModelConfig& c, int64_t max_len, Precision precision);

  // Rounds the matmul weights to bf16 (Precision::BF16 only). Call before generating
  // and again whenever the parameters change.
  void refresh_compute_copy(const ModelParameters& params);

  // Greedy decoding: appends up to max_new_tokens argmax tokens to `prompt`, stopping
  // after any token in stop_ids. Returns only the generated tokens.
  std::vector<int32_t> generate(const ModelParameters& params, const std::vector<int32_t>& prompt,
                                int64_t max_new_tokens, const std::vector<int32_t>& stop_ids = {});

  // Logits of the last position after running `tokens` from position 0 (for tests).
  std::vector<float> last_logits(const ModelParameters& params, const std::vector<int32_t>& tokens);

  // Bytes held by the key and value caches: only the softmax-attention layers have one.
  int64_t kv_cache_bytes() const {
    return static_cast<int64_t>((k_cache_.size() + v_cache_.size()) * sizeof(float));
  }
  // How many layers carry a Gated DeltaNet recurrent state (the linear-attention ones).
  int64_t recurrent_state_layers() const { return static_cast<int64_t>(linear_.size()); }

 private:
  // Runs tokens[0..n) at positions pos..pos+n, filling the caches; leaves the final
  // hidden state of the last position in hidden_last_.
  void run(const ModelParameters& params, const int32_t* tokens, int64_t n, int64_t pos);
  void mlp(ModelParameters& params, const BlockTensors& w, int64_t n, int64_t layer);

  ModelConfig config_;
  // The host's kernels: the caches and the scratch below are host memory. (Attention for
  // one decoded token over the cache is this file's own loop, not a table entry.)
  const KernelTable& kernels_ = cpu_kernel_table();
  int64_t max_len_;
  Precision precision_;
  AlignedBuffer<float> rope_cos_, rope_sin_;
  // Layer l's row in k_cache_/v_cache_ (attention layers) or its index in linear_
  // (linear-attention layers): each kind of layer keeps only its own kind of state. A
  // hybrid model is mostly linear layers (48 of the 64 in Qwen3.6-27B), whose KV cache
  // would otherwise be max_len * 2 * Hkv*D floats each, never read.
  std::vector<int64_t> state_slot_;
  AlignedBuffer<float> k_cache_, v_cache_;  // [attention layers, max_len, Hkv*D]
  ComputeCopy compute_copy_;
  // Per-call scratch, sized for max_len positions.
  AlignedBuffer<float> x_, h_, q_pre_, k_pre_, q_, k_, v_, att_, tmp_, gate_, up_, act_;
  AlignedBuffer<float> rstd_, head_rstd_, lse_, scores_, logits_;
  AlignedBuffer<float> q_and_gate_, attn_gate_;  // gated attention (Qwen3.5)
  AlignedBuffer<float> moe_saved_, moe_ws_;      // the MoE block's outputs and scratch (sparse layers)
  AlignedBuffer<float> shared_out_, shared_logit_;  // qwen3_5_moe's shared expert: output, gate logit
  std::vector<LinearAttentionDecoder> linear_;   // one per linear-attention layer
};

}  // namespace lt
