// What a checkpoint tells the other tools a user loads it with (transformers, vLLM,
// llama.cpp's converters): the special tokens and the chat template the run trained with.
//
//   config.json             gains bos_token_id / eos_token_id
//   generation_config.json  bos/eos/pad ids, so that generate() stops at the end-of-document
//                           token as `lazytrain generate` does
//   tokenizer_config.json   tokenizer class, bos/eos/pad token strings, model_max_length and,
//                           when the run trained on chat messages, the chat template (Jinja)
//                           that renders exactly the text the trainer tokenized
//
// A fine-tuned model's own generation_config.json and tokenizer_config.json are carried
// over (their sampling defaults, added-token tables and other keys survive); only the
// keys above are set, so what the files say is what lazytrain trained with.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/dataset_format.h"
#include "data/tokenizer.h"

namespace lt {

struct HfMetadata {
  std::string bos_token, eos_token;  // empty bos: the tokenizer has none
  int32_t bos_id = -1, eos_id = -1;
  // Where generation stops: eos, and the chat template's end-of-turn token when the run
  // trained on messages (its assistant turns end there, not at eos).
  std::vector<int32_t> stop_ids;
  int64_t model_max_length = 0;
  std::optional<std::string> chat_template;  // Jinja; set when the run trained on messages
  nlohmann::json generation_config = nlohmann::json::object();  // the source's, or {}
  nlohmann::json tokenizer_config = nlohmann::json::object();   // the source's, or {}
};

// The metadata of a run: special tokens from the tokenizer (eos as the trainer resolves
// it), the source model directory's two files when it has them (empty: none), and the chat
// template when `chat` is set.
HfMetadata make_hf_metadata(const data::Tokenizer& tokenizer, const std::string& source_model_dir,
                            std::optional<data::ChatTemplate> chat, int64_t model_max_length);

// Writes the three files into a checkpoint directory that already holds config.json.
void write_hf_metadata(const HfMetadata& meta, const std::string& dir);

// The Jinja chat template that renders `messages` as lazytrain's `t` does (with the
// tokenizer's BOS in front when its post-processor adds one, as the trainer's documents
// have): apply_chat_template(messages, tokenize=True) gives the trainer's token ids.
std::string chat_template_jinja(data::ChatTemplate t, bool tokenizer_adds_bos);

}  // namespace lt
