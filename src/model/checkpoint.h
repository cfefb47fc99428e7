// Model weights in and out of a Hugging Face directory (config.json + safetensors).
#pragma once

#include <cstdint>
#include <string>

#include "model/parameters.h"

namespace lt {

// lt::Error unless `dir` is a directory with a config.json: says which of the two is
// missing, so that a mistyped --model does not surface as a missing tokenizer or tensor.
void check_model_dir(const std::string& dir, const std::string& where);

// Fills params from the safetensors weights in `dir` (single file or sharded), converting
// F32/BF16/F16 to fp32. A missing tensor or a shape that disagrees with the config throws
// lt::Error naming the directory and tensor. A tied checkpoint that still carries an
// lm_head.weight is accepted (it is the embedding). A gemma3 (multimodal) checkpoint's
// language model is read from its model.language_model.* (or 4.x language_model.*)
// tensors; its vision tower is ignored, and save_pretrained writes a gemma3_text model.
void load_parameters(ModelParameters& params, const std::string& dir);

// Writes config.json and the weights (fp32, sharded above max_shard_bytes) into `dir`.
void save_pretrained(const ModelParameters& params, const std::string& dir,
                     uint64_t max_shard_bytes = 2ull << 30);

// Random initialisation as transformers does it for training from scratch: normal with
// std `init_std` for matrices and embeddings, zero biases, unit norm weights.
void init_parameters(ModelParameters& params, uint64_t seed, float init_std = 0.02f);

}  // namespace lt
