// The "normalizer" section of tokenizer.json: a list of steps applied to each piece of
// input text (between added tokens) before pre-tokenization.
// Supported types: NFC, NFD, NFKC, NFKD (ICU), Lowercase, Replace, Prepend, Strip, and
// Sequence of these. Qwen2 uses NFC; Llama 3 has none (null); Llama 2 (legacy) uses
// Sequence[Prepend "▁", Replace " " -> "▁"]; Gemma uses Replace " " -> "▁". Lowercase
// maps one character at a time, as HF (so a final "Σ" becomes "σ").
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/regex.h"

namespace lt::data {

class Normalizer {
 public:
  // `j` is the JSON value of "normalizer" (null allowed); `where` names the file.
  static Normalizer from_json(const nlohmann::json& j, const std::string& where);

  std::string normalize(const std::string& text) const;
  bool empty() const { return steps_.empty(); }

  enum class Kind { kNfc, kNfd, kNfkc, kNfkd, kLowercase, kReplace, kPrepend, kStrip };
  struct Step {
    Kind kind;
    std::shared_ptr<const Regex> pattern;  // kReplace
    std::string content;                   // kReplace, kPrepend
    bool left = false, right = false;      // kStrip
  };

 private:
  void add(const nlohmann::json& j, const std::string& where);
  std::vector<Step> steps_;
};

// Unicode normalization of UTF-8 text by ICU. form: "NFC", "NFD", "NFKC" or "NFKD".
std::string unicode_normalize(const std::string& text, Normalizer::Kind form);

}  // namespace lt::data
