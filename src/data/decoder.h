// The "decoder" section of tokenizer.json: turns the string forms of ids back into text.
//
// As in HF tokenizers, every step maps the list of token strings to a new list (ByteLevel
// and Fuse join it into one string), and the final list is concatenated. Supported steps:
//   ByteLevel     byte-level characters back to bytes, then UTF-8 (invalid -> U+FFFD)
//   Metaspace     the replacement character back to a space; in the first token it is
//                 dropped unless prepend_scheme is "never"
//   ByteFallback  runs of <0xNN> tokens back to bytes; a run that is not valid UTF-8
//                 becomes one U+FFFD per byte token
//   Fuse          joins the list into one string
//   Strip         removes up to `start` leading and `stop` trailing `content` characters
//                 from each token
//   Replace       pattern -> content in each token
//   BPEDecoder    the end-of-word suffix -> a space (none after the last token)
//   Sequence      the steps in order
// A null decoder joins the tokens with single spaces, as HF does.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/regex.h"

namespace lt::data {

class Decoder {
 public:
  // `j` is the JSON value of "decoder" (null allowed); `where` names the file.
  static Decoder from_json(const nlohmann::json& j, const std::string& where);

  std::string decode(std::vector<std::string> tokens) const;

  enum class Kind { kByteLevel, kMetaspace, kByteFallback, kFuse, kStrip, kReplace, kBpeSuffix };
  struct Step {
    Kind kind;
    std::string text;                      // Metaspace replacement, Strip content, Replace content, suffix
    bool skip_first = false;               // kMetaspace: prepend_scheme is not "never"
    size_t start = 0, stop = 0;            // kStrip
    std::shared_ptr<const Regex> pattern;  // kReplace
  };

 private:
  void add(const nlohmann::json& j, const std::string& where);
  bool present_ = false;
  std::vector<Step> steps_;
};

}  // namespace lt::data
