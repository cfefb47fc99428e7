// JSONL record formats and how each becomes text with a loss mask.
//
//   text               {"text": ...}                                 all trained
//   prompt_completion  {"prompt": ..., "completion": ...}            completion trained
//   alpaca             {"instruction": ..., "input"?: ..., "output": ...}   output trained
//   gsm8k              {"question": ..., "answer": ...}              answer trained
//   messages           {"messages": [{"role": ..., "content": ...}, ...]}  assistant turns
//                      trained, rendered with the chatml or llama3 template
//
// A record renders to segments; each segment is tokenized on its own, so the boundary
// between prompt and response is always a token boundary, and the prompt's tokens are
// exactly those a model sees at generation time (where the prompt is encoded alone).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace lt::data {

enum class DatasetFormat { kAuto, kText, kPromptCompletion, kAlpaca, kGsm8k, kMessages };
enum class ChatTemplate { kChatml, kLlama3 };

// "auto", "text", "prompt_completion", "alpaca", "gsm8k", "messages". Throws lt::Error.
DatasetFormat parse_dataset_format(const std::string& name);
std::string dataset_format_name(DatasetFormat f);
// "chatml", "llama3". Throws lt::Error.
ChatTemplate parse_chat_template(const std::string& name);
std::string chat_template_name(ChatTemplate t);

// The format whose keys the record has (messages > alpaca > gsm8k > prompt_completion >
// text). Throws lt::Error (without location; the caller adds file:line) when none fits.
DatasetFormat detect_format(const nlohmann::json& record);

struct Segment {
  std::string text;
  bool trained = false;
};

struct RenderedRecord {
  std::vector<Segment> segments;
  // True when the template already holds the document's start token (llama3 chat), so
  // the tokenizer's own prefix (BOS) must not be added again.
  bool has_bos = false;
  // True when the template ends every assistant turn with its own end token (chat), so
  // no EOS is appended.
  bool has_eos = false;
};

// Renders one record. Throws lt::Error (without location) on missing or mistyped keys.
RenderedRecord render_record(const nlohmann::json& record, DatasetFormat format, ChatTemplate chat);

// The prompt the gsm8k format trains with; evaluation must prompt with the same text.
std::string gsm8k_prompt(const std::string& question);
// The prompt for prompt_completion is the "prompt" field as it is.
// The alpaca prompt (Stanford Alpaca's template), with or without input.
std::string alpaca_prompt(const std::string& instruction, const std::string& input);
// The special tokens a chat template writes; the tokenizer must have each one.
std::vector<std::string> chat_template_tokens(ChatTemplate t);

}  // namespace lt::data
