// Builds a small byte-level BPE tokenizer.json from a corpus, for models trained from
// scratch (the embedded default run uses it on the synthetic arithmetic task).
//
// The file has the Qwen2 structure: Split with the Qwen2 pattern (digits stay single
// tokens, which keeps arithmetic learnable), ByteLevel mapping, ByteLevel decoder, the
// special tokens first (ids 0..k-1), then the 256 byte characters, then one token per
// merge. Both lt::data::Tokenizer and HF tokenizers load it (tested). Deterministic: the
// same corpus and options give the same bytes.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace lt::data {

// The pre-tokenizer pattern of Qwen2's tokenizer.json.
extern const char* const kQwen2SplitPattern;
// The pre-tokenizer pattern of Llama 3's tokenizer.json.
extern const char* const kLlama3SplitPattern;

struct BpeTrainerOptions {
  // Total vocabulary (specials + 256 bytes + merges). At most 256 + specials means no
  // merges: a pure byte-level tokenizer.
  size_t vocab_size = 512;
  // A pair must occur this often to be merged.
  size_t min_frequency = 2;
  std::vector<std::string> special_tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  // The pre-tokenizer's split pattern (kQwen2SplitPattern: digits one by one;
  // kLlama3SplitPattern: runs of up to 3 digits, which merges can turn into number tokens).
  std::string split_pattern = kQwen2SplitPattern;
};

nlohmann::json train_byte_level_bpe(const std::vector<std::string>& corpus,
                                    const BpeTrainerOptions& options);

}  // namespace lt::data
