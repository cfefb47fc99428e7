// The "pre_tokenizer" section of tokenizer.json: splits each normalized piece of text
// into words that BPE encodes independently.
// Supported types: Split (regex or string pattern, all five behaviors, invert), ByteLevel
// (prefix space, optional GPT-2 regex, byte-to-unicode mapping), Digits, and Sequence.
// Llama 3 and Qwen2 use Sequence[Split(their regex, Isolated), ByteLevel(use_regex=false)].
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/regex.h"

namespace lt::data {

// The default GPT-2 split pattern of the ByteLevel pre-tokenizer (use_regex = true).
extern const char* const kGpt2SplitPattern;

class PreTokenizer {
 public:
  static PreTokenizer from_json(const nlohmann::json& j, const std::string& where);

  // Splits `text` into words (empty words are dropped, as HF does) and appends them.
  void split(const std::string& text, std::vector<std::string>& words) const;

  // True when a ByteLevel step maps words to the byte-level alphabet.
  bool byte_level() const { return byte_level_; }

  enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
  enum class Kind { kSplit, kByteLevel, kDigits };
  struct Step {
    Kind kind;
    std::shared_ptr<const Regex> pattern;  // kSplit; kByteLevel with use_regex
    Behavior behavior = Behavior::kIsolated;
    bool invert = false;
    bool add_prefix_space = false;  // kByteLevel
  };

 private:
  void add(const nlohmann::json& j, const std::string& where);
  std::vector<Step> steps_;
  bool byte_level_ = false;
};

}  // namespace lt::data
