// Qwen3.5/3.6 hybrid decoders (qwen3_5_text) as the planner sees them: each layer is a
// Gated DeltaNet linear-attention layer or a gated full-attention layer, both followed by
// the SwiGLU MLP. Weights follow transformers' Qwen3_5DecoderLayer names; what a layer
// saves for backward and its forward FLOPs follow lazytrain's Gated DeltaNet kernels
// (chunked delta rule, per-chunk recurrent states kept in fp32).
//
// The per-layer functions below serve every family: for a uniform model they return what
// layer_specs.h's block_* functions return for any layer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/layer_specs.h"

namespace lt {

// The chunk length of the chunked delta rule (transformers' and FLA's default).
constexpr int64_t kDeltaRuleChunk = 64;

// The Gated DeltaNet mixer's weights of a linear-attention layer, named under `prefix`
// ("model.layers.<j>."); block_weight_specs puts them where attention's would be.
void append_linear_attention_weights(std::vector<WeightSpec>& w, const ModelConfig& c, const std::string& prefix);

int64_t layer_params(const ModelConfig& c, int64_t layer);
std::vector<ActivationSpec> layer_saved_activations(const ModelConfig& c, int64_t layer, RecomputeOption opt,
                                                    int64_t batch, int64_t seq, int act_bytes);
int64_t layer_saved_bytes(const ModelConfig& c, int64_t layer, RecomputeOption opt, int64_t batch, int64_t seq,
                          int act_bytes);
// Forward FLOPs of one layer (2 per MAC): its matmuls, attention over the causal triangle
// or the chunked delta rule, and the short convolution.
double layer_forward_flops(const ModelConfig& c, int64_t layer, int64_t batch, int64_t seq);

}  // namespace lt
