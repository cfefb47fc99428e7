// A tokenized dataset from a JSONL file (formats: dataset_format.h).
//
// Each line becomes one document: [tokenizer prefix, e.g. BOS] + segments + [EOS].
// labels[i] == ids[i] where the token is trained and -100 elsewhere (HF convention: the
// model shifts, so labels[i] is predicted from position i-1). Prompts are not trained
// unless train_on_prompt; the BOS never is; the EOS is trained when the response is.
// A bad line (invalid JSON, missing keys, wrong types, nothing to train on) throws an
// lt::Error naming file:line, or is skipped and counted with skip_bad_lines.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/dataset_format.h"
#include "data/tokenizer.h"

namespace lt::data {

inline constexpr int32_t kIgnoreLabel = -100;

struct DatasetOptions {
  DatasetFormat format = DatasetFormat::kAuto;  // auto: detected from the first record
  ChatTemplate chat_template = ChatTemplate::kChatml;
  bool train_on_prompt = false;  // loss on every token, not just responses
  bool skip_bad_lines = false;   // count and skip bad lines instead of failing
  // End-of-document token. Empty: the first of <|endoftext|>, <|end_of_text|>, </s>,
  // <eos> that the tokenizer has.
  std::string eos_token;
};

struct DatasetStats {
  DatasetFormat format = DatasetFormat::kAuto;  // the format in use
  size_t lines = 0;           // non-empty lines read
  size_t documents = 0;
  size_t skipped = 0;         // bad lines skipped (skip_bad_lines)
  std::vector<std::string> skipped_examples;  // the first few reasons, with file:line
  size_t tokens = 0;
  size_t trained_tokens = 0;
};

class Dataset {
 public:
  static Dataset load_jsonl(const std::string& path, const Tokenizer& tokenizer, const DatasetOptions& options);
  // The same from records in memory; `source` names them in errors ("source:index").
  static Dataset from_records(const std::vector<nlohmann::json>& records, const std::string& source,
                              const Tokenizer& tokenizer, const DatasetOptions& options);

  size_t size() const { return offsets_.size() - 1; }
  std::span<const int32_t> ids(size_t doc) const;
  std::span<const int32_t> labels(size_t doc) const;
  const DatasetStats& stats() const { return stats_; }
  int32_t eos_id() const { return eos_id_; }

 private:
  class Builder;
  std::vector<int32_t> ids_, labels_;
  std::vector<size_t> offsets_{0};
  DatasetStats stats_;
  int32_t eos_id_ = -1;
};

// The id of the tokenizer's end-of-document token (see DatasetOptions::eos_token).
int32_t resolve_eos_id(const Tokenizer& tokenizer, const std::string& eos_token);

}  // namespace lt::data
