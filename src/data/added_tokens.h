// Added and special tokens of tokenizer.json ("added_tokens"): strings that are cut out
// of the input before normalization and pre-tokenization and map straight to one id.
//
// As in HF tokenizers, matching is leftmost-longest over all tokens of one set, done in
// two passes: tokens with normalized=false match the raw text; tokens with
// normalized=true match the normalized text of what is left (their content normalized
// too). Flags: single_word (only at word boundaries), lstrip / rstrip (swallow the
// whitespace on that side), special (skipped by decode(skip_special_tokens=true)).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace lt::data {

class Normalizer;

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool special = false;
  // What decode and id_to_token show: the content after the normalizer when
  // normalized=true (recent HF tokenizers decode that form), else the content. Set by build().
  std::string decode_text;
};

// One piece of input text after splitting: an added token (id >= 0) or plain text.
struct TextSplit {
  std::string text;
  int32_t id = -1;
};

class AddedVocabulary {
 public:
  // Tokens must be added before build(); build() prepares the two match sets.
  void add(const AddedToken& token);
  void build(const Normalizer& normalizer);

  // Cuts `text` at the tokens of one set and appends the pieces in order.
  void split(const std::string& text, bool normalized_set, std::vector<TextSplit>& out) const;

  const AddedToken* find_id(int32_t id) const;
  const AddedToken* find_content(const std::string& content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  struct Pattern {
    std::string text;  // what is matched (normalized content for the normalized set)
    size_t token;      // index into tokens_
  };
  struct MatchSet {
    // Patterns bucketed by first byte, longest first, for leftmost-longest scanning.
    std::vector<std::vector<Pattern>> by_first_byte = std::vector<std::vector<Pattern>>(256);
    bool empty = true;
  };
  void split_with(const MatchSet& set, const std::string& text, std::vector<TextSplit>& out) const;

  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> by_id_;
  std::unordered_map<std::string, size_t> by_content_;
  MatchSet raw_, normalized_;
};

}  // namespace lt::data
