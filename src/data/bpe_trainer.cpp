#include "data/bpe_trainer.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "core/error.h"
#include "data/byte_level.h"
#include "data/pre_tokenizer.h"
#include "data/utf8.h"

namespace lt::data {

const char* const kQwen2SplitPattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const kLlama3SplitPattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

using nlohmann::json;

namespace {

json pre_tokenizer_json(const std::string& pattern) {
  return {{"type", "Sequence"},
          {"pretokenizers",
           json::array({json{{"type", "Split"},
                             {"pattern", {{"Regex", pattern}}},
                             {"behavior", "Isolated"},
                             {"invert", false}},
                        json{{"type", "ByteLevel"},
                             {"add_prefix_space", false},
                             {"trim_offsets", false},
                             {"use_regex", false}}})}};
}

}  // namespace

json train_byte_level_bpe(const std::vector<std::string>& corpus, const BpeTrainerOptions& options) {
  const json pre_json = pre_tokenizer_json(options.split_pattern);
  PreTokenizer pre = PreTokenizer::from_json(pre_json, "built-in BPE trainer");

  // Vocabulary: specials, then the byte alphabet in byte order.
  std::vector<std::string> tokens = options.special_tokens;
  std::unordered_map<std::string, int32_t> ids;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (!ids.emplace(tokens[i], static_cast<int32_t>(i)).second)
      throw Error("special token \"" + tokens[i] + "\" is listed twice", "BpeTrainerOptions", "");
  }
  for (int b = 0; b < 256; ++b) {
    std::string ch = byte_level_encode(std::string(1, static_cast<char>(b)));
    ids.emplace(ch, static_cast<int32_t>(tokens.size()));
    tokens.push_back(ch);
  }

  // Distinct words with their counts; std::map keeps the order deterministic.
  std::map<std::string, size_t> counts;
  std::vector<std::string> words;
  for (const std::string& text : corpus) {
    words.clear();
    pre.split(text, words);
    for (auto& w : words) ++counts[w];
  }
  struct Word {
    std::vector<int32_t> sym;
    size_t count;
  };
  std::vector<Word> ws;
  for (const auto& [w, c] : counts) {
    Word word{{}, c};
    size_t pos = 0;
    while (pos < w.size()) {
      size_t start = pos;
      next_code_point(w, pos);
      word.sym.push_back(ids.at(w.substr(start, pos - start)));
    }
    ws.push_back(std::move(word));
  }

  // Greedy BPE: merge the most frequent adjacent pair, ties to the smaller id pair.
  // Recounting every round is fine at the corpus sizes this is meant for.
  json merges = json::array();
  while (tokens.size() < options.vocab_size) {
    std::map<std::pair<int32_t, int32_t>, size_t> pairs;
    for (const Word& w : ws)
      for (size_t i = 0; i + 1 < w.sym.size(); ++i) pairs[{w.sym[i], w.sym[i + 1]}] += w.count;
    auto best = pairs.end();
    for (auto it = pairs.begin(); it != pairs.end(); ++it)
      if (best == pairs.end() || it->second > best->second) best = it;
    if (best == pairs.end() || best->second < options.min_frequency) break;
    auto [a, b] = best->first;
    std::string merged = tokens[a] + tokens[b];
    int32_t id;
    auto found = ids.find(merged);
    if (found != ids.end()) {
      id = found->second;  // e.g. a special token spelled the same; keep its id
    } else {
      id = static_cast<int32_t>(tokens.size());
      ids.emplace(merged, id);
      tokens.push_back(merged);
    }
    merges.push_back(json::array({tokens[a], tokens[b]}));
    for (Word& w : ws) {
      std::vector<int32_t> out;
      out.reserve(w.sym.size());
      for (size_t i = 0; i < w.sym.size(); ++i) {
        if (i + 1 < w.sym.size() && w.sym[i] == a && w.sym[i + 1] == b) {
          out.push_back(id);
          ++i;
        } else {
          out.push_back(w.sym[i]);
        }
      }
      w.sym.swap(out);
    }
  }

  json vocab = json::object();
  for (size_t i = 0; i < tokens.size(); ++i) vocab[tokens[i]] = i;
  json added = json::array();
  for (size_t i = 0; i < options.special_tokens.size(); ++i)
    added.push_back({{"id", i},
                     {"content", options.special_tokens[i]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", added},
          {"normalizer", nullptr},
          {"pre_tokenizer", pre_json},
          {"post_processor",
           {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}},
          {"decoder",
           {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"ignore_merges", false},
            {"vocab", vocab},
            {"merges", merges}}}};
}

}  // namespace lt::data
