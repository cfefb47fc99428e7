#include "data/bpe_model.h"

#include <cstdio>
#include <queue>

#include "core/error.h"
#include "data/json_fields.h"
#include "data/utf8.h"

namespace lt::data {

BpeModel::BpeModel(BpeModel&& o) noexcept { *this = std::move(o); }

BpeModel& BpeModel::operator=(BpeModel&& o) noexcept {
  vocab_ = std::move(o.vocab_);
  id_to_token_ = std::move(o.id_to_token_);
  merges_ = std::move(o.merges_);
  unk_id_ = o.unk_id_;
  continuing_subword_prefix_ = std::move(o.continuing_subword_prefix_);
  end_of_word_suffix_ = std::move(o.end_of_word_suffix_);
  fuse_unk_ = o.fuse_unk_;
  byte_fallback_ = o.byte_fallback_;
  ignore_merges_ = o.ignore_merges_;
  cache_.clear();
  return *this;
}

BpeModel BpeModel::from_json(const nlohmann::json& j, const std::string& where) {
  const std::string w = where + ": model";
  BpeModel m;
  if (!j.contains("vocab") || !j["vocab"].is_object())
    throw Error("BPE model has no \"vocab\" object", w, "check the file was written by HF tokenizers");
  for (auto it = j["vocab"].begin(); it != j["vocab"].end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() > (1 << 30))
      throw Error("vocab entry \"" + it.key() + "\" has no valid id", w, "ids are integers >= 0");
    int32_t id = it.value().get<int32_t>();
    m.vocab_[it.key()] = id;
    if (static_cast<size_t>(id) >= m.id_to_token_.size()) m.id_to_token_.resize(id + 1);
    m.id_to_token_[id] = it.key();
  }
  if (j.contains("dropout") && !j["dropout"].is_null()) {
    const auto& d = j["dropout"];
    if (!d.is_number() || d.get<double>() < 0.0 || d.get<double>() > 1.0)
      throw Error("\"dropout\" must be null or a number in [0, 1], not " + d.dump(), w,
                  "set \"dropout\" to null");
    if (d.get<double>() > 0.0)
      throw Error("BPE dropout is set; encoding would be random", w,
                  "set \"dropout\" to null for training and inference");
  }
  const std::string unk = json_string(j, "unk_token", "", w);
  if (!unk.empty()) {
    auto it = m.vocab_.find(unk);
    if (it == m.vocab_.end())
      throw Error("unk_token \"" + unk + "\" is not in the vocabulary", w, "");
    m.unk_id_ = it->second;
  }
  m.continuing_subword_prefix_ = json_string(j, "continuing_subword_prefix", "", w);
  m.end_of_word_suffix_ = json_string(j, "end_of_word_suffix", "", w);
  m.fuse_unk_ = json_bool(j, "fuse_unk", false, w);
  m.byte_fallback_ = json_bool(j, "byte_fallback", false, w);
  m.ignore_merges_ = json_bool(j, "ignore_merges", false, w);

  if (!j.contains("merges") || !j["merges"].is_array())
    throw Error("BPE model has no \"merges\" array", w, "check the file was written by HF tokenizers");
  const auto& merges = j["merges"];
  const size_t prefix_len = m.continuing_subword_prefix_.size();
  for (size_t i = 0; i < merges.size(); ++i) {
    const auto& e = merges[i];
    std::string a, b;
    // Two spellings: "a b" (older files) and ["a", "b"] (tokenizers >= 0.20, which allows
    // tokens containing spaces).
    if (e.is_string()) {
      const std::string s = e;
      size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        throw Error("merge " + std::to_string(i) + " \"" + s + "\" is not two tokens separated by one space",
                    w, "");
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      a = e[0];
      b = e[1];
    } else {
      throw Error("merge " + std::to_string(i) + " is neither \"a b\" nor [\"a\", \"b\"]", w, "");
    }
    auto ia = m.vocab_.find(a), ib = m.vocab_.find(b);
    if (ia == m.vocab_.end() || ib == m.vocab_.end())
      throw Error("merge " + std::to_string(i) + " names token \"" + (ia == m.vocab_.end() ? a : b) +
                      "\", which is not in the vocabulary",
                  w, "the merges and vocab do not belong together");
    std::string merged = a + (prefix_len && b.compare(0, prefix_len, m.continuing_subword_prefix_) == 0
                                  ? b.substr(prefix_len)
                                  : b);
    auto im = m.vocab_.find(merged);
    if (im == m.vocab_.end())
      throw Error("merge " + std::to_string(i) + " produces \"" + merged +
                      "\", which is not in the vocabulary",
                  w, "the merges and vocab do not belong together");
    // As in HF, a repeated pair keeps its last rank.
    m.merges_[pair_key(ia->second, ib->second)] = {static_cast<int32_t>(i), im->second};
  }
  return m;
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(std::string(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string& BpeModel::id_to_token(int32_t id) const {
  static const std::string kEmpty;
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size()) return kEmpty;
  return id_to_token_[id];
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    // Llama 3 style: a word that is itself a token is emitted whole, merges or not.
    auto it = vocab_.find(std::string(word));
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  const bool cacheable = word.size() <= kMaxCachedWordBytes;
  std::string key;
  if (cacheable) {
    key.assign(word);
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  merge_word(word, ids);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() >= kMaxCacheEntries) cache_.clear();  // simple bound; refills fast
    cache_.emplace(std::move(key), std::move(ids));
  }
}

void BpeModel::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  // Symbols in a doubly linked list over a vector; a merged-away symbol gets id -1.
  struct Symbol {
    int32_t id;
    int32_t prev, next;
  };
  std::vector<Symbol> sym;
  sym.reserve(word.size());
  auto push = [&](int32_t id) {
    int32_t n = static_cast<int32_t>(sym.size());
    sym.push_back({id, n - 1, -1});
    if (n > 0) sym[n - 1].next = n;
  };
  // As HF: an unknown character becomes unk_token (or is dropped when there is none). The
  // unk waits until the next known character, so that fuse_unk can fold a run of unknowns
  // into one; byte-fallback tokens do not end the wait (so they can come before it).
  int32_t pending_unk = -1;  // -1: none
  size_t pos = 0;
  while (pos < word.size()) {
    size_t start = pos;
    next_code_point(word, pos);
    std::string piece(word.substr(start, pos - start));
    if (start > 0 && !continuing_subword_prefix_.empty()) piece = continuing_subword_prefix_ + piece;
    if (pos == word.size() && !end_of_word_suffix_.empty()) piece += end_of_word_suffix_;
    auto it = vocab_.find(piece);
    if (it != vocab_.end()) {
      if (pending_unk >= 0) push(pending_unk);
      pending_unk = -1;
      push(it->second);
      continue;
    }
    if (byte_fallback_) {
      // Tokens named <0xAB>, one per byte of the piece (affixes included, as HF), if every
      // byte has one.
      std::vector<int32_t> bytes;
      for (unsigned char c : piece) {
        char name[8];
        std::snprintf(name, sizeof(name), "<0x%02X>", c);
        auto ib = vocab_.find(name);
        if (ib == vocab_.end()) {
          bytes.clear();
          break;
        }
        bytes.push_back(ib->second);
      }
      if (!bytes.empty()) {
        for (int32_t b : bytes) push(b);
        continue;
      }
    }
    if (unk_id_) {
      if (pending_unk >= 0 && !fuse_unk_) push(pending_unk);
      pending_unk = *unk_id_;
    }
  }
  if (pending_unk >= 0) push(pending_unk);

  struct Candidate {
    int32_t rank, pos, new_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  auto consider = [&](int32_t left) {
    int32_t right = sym[left].next;
    if (right < 0) return;
    auto it = merges_.find(pair_key(sym[left].id, sym[right].id));
    if (it != merges_.end()) heap.push({it->second.rank, left, it->second.new_id});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(sym.size()); ++i) consider(i);

  while (!heap.empty()) {
    Candidate c = heap.top();
    heap.pop();
    Symbol& left = sym[c.pos];
    if (left.id < 0 || left.next < 0) continue;
    Symbol& right = sym[left.next];
    // Stale entry: one side has changed since the candidate was pushed.
    auto it = merges_.find(pair_key(left.id, right.id));
    if (it == merges_.end() || it->second.new_id != c.new_id || it->second.rank != c.rank) continue;
    left.id = c.new_id;
    right.id = -1;
    left.next = right.next;
    if (left.next >= 0) sym[left.next].prev = c.pos;
    if (left.prev >= 0) consider(left.prev);
    consider(c.pos);
  }
  for (const Symbol& s : sym)
    if (s.id >= 0) out.push_back(s.id);
}

}  // namespace lt::data
