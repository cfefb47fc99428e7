// The BPE "model" section of tokenizer.json: vocabulary, ranked merges, and the encoding
// of one pre-tokenized word into token ids.
//
// Options of the model object: unk_token, fuse_unk, byte_fallback (a character missing from
// the vocabulary becomes its <0xNN> byte tokens when all exist, else unk), ignore_merges
// (a word that is a token is emitted whole), continuing_subword_prefix and
// end_of_word_suffix; dropout must be null or 0 (lt::Error otherwise: encoding would be
// random).
//
// Encoding a word: start from its characters (each looked up in the vocabulary), then
// repeatedly apply the lowest-ranked merge among adjacent pairs, leftmost first. A
// min-heap of (rank, position) candidates makes that O(n log n) per word; stale heap
// entries are detected when popped. Results are cached per word, because natural text
// repeats words heavily (the cache is bounded and thread-safe).
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

namespace lt::data {

class BpeModel {
 public:
  // Parses the "model" object. Throws lt::Error naming `where` on a malformed model:
  // a merge naming an unknown token, a merge result missing from the vocabulary, etc.
  static BpeModel from_json(const nlohmann::json& j, const std::string& where);

  BpeModel() = default;
  BpeModel(BpeModel&& o) noexcept;
  BpeModel& operator=(BpeModel&& o) noexcept;

  // Appends the ids of one word (already in the model's alphabet: byte-level or "▁" form).
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // Empty string when `id` is not in the vocabulary.
  const std::string& id_to_token(int32_t id) const;
  // One past the largest id in the vocabulary.
  int32_t id_limit() const { return static_cast<int32_t>(id_to_token_.size()); }
  // Entries in the vocabulary (HF's get_vocab_size; below id_limit() when ids have gaps).
  int32_t vocab_count() const { return static_cast<int32_t>(vocab_.size()); }
  size_t num_merges() const { return merges_.size(); }

 private:
  struct PairHash {
    size_t operator()(uint64_t k) const { return std::hash<uint64_t>()(k * 0x9E3779B97F4A7C15ull); }
  };
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::unordered_map<uint64_t, Merge, PairHash> merges_;
  std::optional<int32_t> unk_id_;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;

  static constexpr size_t kMaxCachedWordBytes = 256;
  static constexpr size_t kMaxCacheEntries = 1 << 18;
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace lt::data
