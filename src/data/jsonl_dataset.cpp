#include "data/jsonl_dataset.h"

#include <fstream>

#include "core/error.h"

namespace lt::data {

using nlohmann::json;

int32_t resolve_eos_id(const Tokenizer& tok, const std::string& eos_token) {
  if (!eos_token.empty()) {
    auto id = tok.token_to_id(eos_token);
    if (!id) throw Error("eos token \"" + eos_token + "\" is not in the tokenizer", "dataset options",
                         "name a token of tokenizer.json");
    return *id;
  }
  for (const char* name : {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"})
    if (auto id = tok.token_to_id(name)) return *id;
  throw Error("the tokenizer has none of <|endoftext|>, <|end_of_text|>, </s>, <eos>", "dataset options",
              "set eos_token to the tokenizer's end-of-document token");
}

// Tokenizes records one at a time into the dataset's flat arrays.
class Dataset::Builder {
 public:
  Builder(Dataset& d, const Tokenizer& tok, const DatasetOptions& opt) : d_(d), tok_(tok), opt_(opt) {
    d_.eos_id_ = resolve_eos_id(tok, opt.eos_token);
    d_.stats_.format = opt.format;
  }

  // `where` is file:line. Throws or counts per skip_bad_lines.
  void add_line(const std::string& line, const std::string& where) {
    ++d_.stats_.lines;
    try {
      json r;
      try {
        r = json::parse(line);
      } catch (const json::exception& e) {
        throw Error(std::string("invalid JSON: ") + e.what());
      }
      add_record(r);
    } catch (const Error& e) {
      if (!opt_.skip_bad_lines)
        throw Error(std::string("bad dataset line: ") + e.what(), where,
                    "fix the line, or skip bad lines (skip_bad_lines)");
      ++d_.stats_.skipped;
      if (d_.stats_.skipped_examples.size() < 10)
        d_.stats_.skipped_examples.push_back(where + ": " + e.what());
    }
  }

  void add_record(const json& r) {
    if (d_.stats_.format == DatasetFormat::kAuto) d_.stats_.format = detect_format(r);
    RenderedRecord rec = render_record(r, d_.stats_.format, opt_.chat_template);
    if (d_.stats_.format == DatasetFormat::kMessages) check_chat_tokens();
    std::vector<int32_t> ids, labels;
    if (!rec.has_bos)
      for (int32_t id : tok_.prefix_ids()) append(ids, labels, id, false);
    bool last_trained = false;
    for (const Segment& s : rec.segments) {
      const bool trained = s.trained || opt_.train_on_prompt;
      for (int32_t id : tok_.encode(s.text, /*add_special_tokens=*/false)) append(ids, labels, id, trained);
      last_trained = trained;
    }
    if (!rec.has_eos) append(ids, labels, d_.eos_id_, last_trained);
    // The document's first token has nothing before it in the document to be predicted from.
    labels[0] = kIgnoreLabel;
    size_t trained = 0;
    for (int32_t l : labels) trained += l != kIgnoreLabel;
    if (trained == 0) throw Error("the record has no tokens to train on (empty response?)");
    d_.ids_.insert(d_.ids_.end(), ids.begin(), ids.end());
    d_.labels_.insert(d_.labels_.end(), labels.begin(), labels.end());
    d_.offsets_.push_back(d_.ids_.size());
    ++d_.stats_.documents;
    d_.stats_.tokens += ids.size();
    d_.stats_.trained_tokens += trained;
  }

 private:
  static void append(std::vector<int32_t>& ids, std::vector<int32_t>& labels, int32_t id, bool trained) {
    ids.push_back(id);
    labels.push_back(trained ? id : kIgnoreLabel);
  }
  void check_chat_tokens() {
    if (chat_checked_) return;
    for (const std::string& t : chat_template_tokens(opt_.chat_template))
      if (!tok_.token_to_id(t))
        throw Error("the " + chat_template_name(opt_.chat_template) + " chat template needs token \"" + t +
                        "\", which the tokenizer does not have",
                    "dataset options", "pick the chat template that matches the tokenizer");
    chat_checked_ = true;
  }

  Dataset& d_;
  const Tokenizer& tok_;
  const DatasetOptions& opt_;
  bool chat_checked_ = false;
};

Dataset Dataset::load_jsonl(const std::string& path, const Tokenizer& tok, const DatasetOptions& opt) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open dataset file", path, "check the path");
  Dataset d;
  Builder b(d, tok, opt);
  std::string line;
  size_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;  // blank lines are fine
    b.add_line(line, path + ":" + std::to_string(lineno));
  }
  if (d.size() == 0)
    throw Error("the dataset has no usable records" +
                    (d.stats_.skipped ? " (" + std::to_string(d.stats_.skipped) + " bad lines skipped)" : ""),
                path, "check the file's format");
  return d;
}

Dataset Dataset::from_records(const std::vector<json>& records, const std::string& source, const Tokenizer& tok,
                              const DatasetOptions& opt) {
  Dataset d;
  Builder b(d, tok, opt);
  for (size_t i = 0; i < records.size(); ++i) {
    ++d.stats_.lines;
    try {
      b.add_record(records[i]);
    } catch (const Error& e) {
      if (!opt.skip_bad_lines) throw Error(std::string("bad record: ") + e.what(), source + ":" + std::to_string(i), "");
      ++d.stats_.skipped;
    }
  }
  if (d.size() == 0) throw Error("no usable records", source, "");
  return d;
}

std::span<const int32_t> Dataset::ids(size_t doc) const {
  return std::span<const int32_t>(ids_).subspan(offsets_[doc], offsets_[doc + 1] - offsets_[doc]);
}

std::span<const int32_t> Dataset::labels(size_t doc) const {
  return std::span<const int32_t>(labels_).subspan(offsets_[doc], offsets_[doc + 1] - offsets_[doc]);
}

}  // namespace lt::data
