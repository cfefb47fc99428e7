// The "pre_tokenizer" section of tokenizer.json: splits each normalized piece of text
// into words that BPE encodes independently.
// Supported types: Split (regex or string pattern, all five behaviors, invert), ByteLevel
// (prefix space, optional GPT-2 regex, byte-to-unicode mapping), Digits, Metaspace
// (replacement character, prepend_scheme always/first/never or the older
// add_prefix_space, split), WhitespaceSplit, Whitespace, Punctuation, and Sequence.
// Llama 3 and Qwen2 use Sequence[Split(their regex, Isolated), ByteLevel(use_regex=false)];
// Mistral v0.3 and non-legacy Llama use Metaspace(first, split=false); Gemma uses
// Split(" ", MergedWithPrevious) after its Replace normalizer; legacy Llama 2 has none.
//
// Not reproduced: HF decides Metaspace's "first" by the piece's offset in the original
// text. Here a piece counts as first when it starts the input and the pieces above it
// start there too; a normalizer that deletes leading characters (Strip, Replace with "")
// before a Sequence[..., Metaspace(first)] can make the two differ.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/regex.h"
#include "data/split_behavior.h"

namespace lt::data {

// The default GPT-2 split pattern of the ByteLevel pre-tokenizer (use_regex = true).
extern const char* const kGpt2SplitPattern;

// Metaspace's options, shared by the pre-tokenizer and the decoder of that name.
struct MetaspaceOptions {
  enum class Prepend { kAlways, kFirst, kNever };
  std::string replacement = "\xE2\x96\x81";  // one character, UTF-8 ("▁" by default)
  Prepend prepend = Prepend::kAlways;
  bool split = true;
};
// Parses a Metaspace object as HF does: prepend_scheme defaults to "always", split to
// true; the older add_prefix_space=false is accepted only beside prepend_scheme "never".
MetaspaceOptions parse_metaspace(const nlohmann::json& j, const std::string& where);

class PreTokenizer {
 public:
  static PreTokenizer from_json(const nlohmann::json& j, const std::string& where);

  // Splits `text` into words (empty words are dropped, as HF does) and appends them.
  // `at_start`: the text begins the input (Metaspace "first" prepends only there).
  void split(const std::string& text, std::vector<std::string>& words, bool at_start = true) const;

  // True when a ByteLevel step maps words to the byte-level alphabet.
  bool byte_level() const { return byte_level_; }

  enum class Kind { kSplit, kByteLevel, kMetaspace };
  struct Step {
    Kind kind;
    std::shared_ptr<const Regex> pattern;  // kSplit; kByteLevel with use_regex; kMetaspace
    SplitBehavior behavior = SplitBehavior::kIsolated;
    bool invert = false;
    bool add_prefix_space = false;  // kByteLevel
    MetaspaceOptions metaspace;     // kMetaspace
  };

 private:
  struct Word {
    std::string text;
    bool at_start;
  };
  void add(const nlohmann::json& j, const std::string& where);
  void add_split(const std::string& pattern, SplitBehavior behavior, bool invert, const std::string& where);
  static void metaspace(const Step& st, Word& w, std::vector<Word>& out);
  std::vector<Step> steps_;
  bool byte_level_ = false;
};

}  // namespace lt::data
