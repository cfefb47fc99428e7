#include "data/added_tokens.h"

#include <algorithm>
#include <cstring>

#include "data/normalizer.h"
#include "data/regex.h"
#include "data/utf8.h"

namespace lt::data {
namespace {

// Regex \w in Unicode mode, as the Rust regex crate that HF uses for word boundaries.
bool is_word_char(std::string_view ch) {
  static const Regex word("^\\w", "added token word boundary");
  size_t b, e;
  return word.find(ch, 0, b, e);
}

// The last UTF-8 character of s[0, end).
std::string_view last_char(const std::string& s, size_t end) {
  size_t b = end;
  while (b > 0) {
    --b;
    if ((static_cast<unsigned char>(s[b]) & 0xC0) != 0x80) break;
  }
  return std::string_view(s).substr(b, end - b);
}

std::string_view first_char(const std::string& s, size_t begin) {
  size_t n = utf8_sequence_length(static_cast<unsigned char>(s[begin]));
  return std::string_view(s).substr(begin, std::min(n, s.size() - begin));
}

// Start of the run of whitespace that ends at `end`.
size_t whitespace_run_start(const std::string& s, size_t end) {
  size_t pos = end;
  while (pos > 0) {
    std::string_view ch = last_char(s, pos);
    size_t p = 0;
    if (!is_white_space(next_code_point(ch, p))) break;
    pos -= ch.size();
  }
  return pos;
}

// End of the run of whitespace that starts at `begin`.
size_t whitespace_run_end(const std::string& s, size_t begin) {
  size_t pos = begin;
  while (pos < s.size()) {
    size_t p = pos;
    if (!is_white_space(next_code_point(s, p))) break;
    pos = p;
  }
  return pos;
}

}  // namespace

void AddedVocabulary::add(const AddedToken& token) {
  if (token.content.empty()) return;  // HF ignores empty added tokens
  auto it = by_content_.find(token.content);
  if (it != by_content_.end()) {
    tokens_[it->second] = token;  // a repeated entry replaces the earlier one
  } else {
    by_content_[token.content] = tokens_.size();
    tokens_.push_back(token);
  }
  by_id_[token.id] = by_content_[token.content];
}

void AddedVocabulary::build(const Normalizer& normalizer) {
  raw_ = MatchSet{};
  normalized_ = MatchSet{};
  for (size_t i = 0; i < tokens_.size(); ++i) {
    AddedToken& t = tokens_[i];
    MatchSet& set = t.normalized ? normalized_ : raw_;
    std::string text = t.normalized ? normalizer.normalize(t.content) : t.content;
    t.decode_text = text;
    if (text.empty()) continue;
    set.by_first_byte[static_cast<unsigned char>(text[0])].push_back({text, i});
    set.empty = false;
  }
  for (MatchSet* set : {&raw_, &normalized_})
    for (auto& bucket : set->by_first_byte)
      std::stable_sort(bucket.begin(), bucket.end(), [](const Pattern& a, const Pattern& b) {
        return a.text.size() > b.text.size();
      });
}

void AddedVocabulary::split(const std::string& text, bool normalized_set,
                            std::vector<TextSplit>& out) const {
  split_with(normalized_set ? normalized_ : raw_, text, out);
}

void AddedVocabulary::split_with(const MatchSet& set, const std::string& text,
                                 std::vector<TextSplit>& out) const {
  if (set.empty) {
    if (!text.empty()) out.push_back({text, -1});
    return;
  }
  size_t done = 0;  // everything before `done` has been emitted
  size_t pos = 0;
  while (pos < text.size()) {
    const Pattern* hit = nullptr;
    for (const Pattern& p : set.by_first_byte[static_cast<unsigned char>(text[pos])]) {
      if (p.text.size() <= text.size() - pos &&
          std::memcmp(text.data() + pos, p.text.data(), p.text.size()) == 0) {
        hit = &p;  // longest first, so the first hit is the longest at this position
        break;
      }
    }
    if (!hit) {
      ++pos;
      continue;
    }
    size_t start = pos, stop = pos + hit->text.size();
    const AddedToken& tok = tokens_[hit->token];
    pos = stop;  // matches never overlap, even when this one is discarded below
    if (tok.single_word) {
      bool start_ok = start == 0 || !is_word_char(last_char(text, start));
      bool stop_ok = stop == text.size() || !is_word_char(first_char(text, stop));
      if (!start_ok || !stop_ok) continue;
    }
    if (tok.lstrip) start = std::max(whitespace_run_start(text, start), done);
    if (tok.rstrip) stop = whitespace_run_end(text, stop);
    if (start > done) out.push_back({text.substr(done, start - done), -1});
    out.push_back({text.substr(start, stop - start), tok.id});
    done = stop;
    pos = std::max(pos, stop);
  }
  if (done < text.size()) out.push_back({text.substr(done), -1});
}

const AddedToken* AddedVocabulary::find_id(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

const AddedToken* AddedVocabulary::find_content(const std::string& content) const {
  auto it = by_content_.find(content);
  return it == by_content_.end() ? nullptr : &tokens_[it->second];
}

}  // namespace lt::data
