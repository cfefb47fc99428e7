// A tokenizer loaded from a Hugging Face tokenizer.json, BPE model. Two families of files:
//  - byte-level BPE (GPT-2, Llama 3, Qwen2): ByteLevel pre-tokenizer (after a Split regex)
//    and decoder;
//  - SentencePiece-style BPE (Llama 2, Mistral / Mixtral, Gemma): "▁" for spaces, either
//    from a Metaspace pre-tokenizer (prepend_scheme always / first / never, split or not)
//    or from a normalizer (Llama 2 legacy: Prepend "▁" + Replace " "; Gemma: Replace " "),
//    the 256 byte tokens <0xNN> as byte_fallback for characters outside the vocabulary,
//    <unk> with fuse_unk, and a decoder such as Sequence[Replace, ByteFallback, Fuse, Strip].
// The parts each section supports are listed in normalizer.h, pre_tokenizer.h,
// bpe_model.h and decoder.h; anything else is an lt::Error naming the field. Not
// supported: WordPiece, Unigram and WordLevel models, BPE dropout, the Precompiled
// normalizer.
//
// encode(text): cut out added/special tokens -> normalize each remaining piece -> cut out
// normalized added tokens -> pre-tokenize into words -> BPE each word -> post-processor
// (e.g. Llama 3's <|begin_of_text|>, Llama 2's <s>) when add_special_tokens.
// decode(ids): tokens (added tokens included, special ones unless skipped) -> decoder
// steps -> UTF-8 (invalid bytes become U+FFFD).
// The result matches HF tokenizers' Tokenizer.encode(...).ids and .decode(...); the parity
// tests in tests/data check that on a varied corpus, for both families.
//
// Thread-safe for concurrent encode/decode on one instance.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "data/added_tokens.h"

namespace lt::data {

class Tokenizer {
 public:
  // Throws lt::Error naming the file and what is wrong for a missing, unparsable or
  // unsupported tokenizer.json.
  static Tokenizer from_file(const std::string& path);
  // `where` names the source in error messages.
  static Tokenizer from_json_text(const std::string& json_text, const std::string& where);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  // Added tokens first, then the model vocabulary (as HF's token_to_id).
  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The token's string form; empty for an id the tokenizer does not know.
  std::string id_to_token(int32_t id) const;
  bool is_special(int32_t id) const;

  // One past the largest id (model vocabulary and added tokens): the smallest embedding
  // row count that covers every id.
  int32_t vocab_size() const;

  // Ids the post-processor puts before / after a single sequence (empty when none), so
  // callers that tokenize pieces separately can add them once per document.
  const std::vector<int32_t>& prefix_ids() const;
  const std::vector<int32_t>& suffix_ids() const;

  const std::vector<AddedToken>& added_tokens() const;

  struct Impl;  // opaque; declared public only so the loader's helpers can fill it

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace lt::data
