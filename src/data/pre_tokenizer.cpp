#include "data/pre_tokenizer.h"

#include <algorithm>

#include "core/error.h"
#include "data/byte_level.h"

namespace lt::data {

const char* const kGpt2SplitPattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

namespace {

struct Piece {
  size_t begin, end;
  bool match;
};

// Cuts `s` into the pieces between and at the matches (HF's find_matches).
std::vector<Piece> match_pieces(const Regex& re, const std::string& s, bool invert) {
  std::vector<Piece> out;
  size_t prev = 0;
  for (auto [b, e] : re.find_all(s)) {
    if (b > prev) out.push_back({prev, b, invert});
    out.push_back({b, e, !invert});
    prev = e;
  }
  if (prev < s.size()) out.push_back({prev, s.size(), invert});
  return out;
}

// Applies a split behavior to the pieces: what happens to the delimiters (matches).
std::vector<std::pair<size_t, size_t>> apply_behavior(const std::vector<Piece>& pieces,
                                                      PreTokenizer::Behavior behavior) {
  using B = PreTokenizer::Behavior;
  std::vector<std::pair<size_t, size_t>> out;
  switch (behavior) {
    case B::kRemoved:
      for (const auto& p : pieces)
        if (!p.match) out.emplace_back(p.begin, p.end);
      break;
    case B::kIsolated:
      for (const auto& p : pieces) out.emplace_back(p.begin, p.end);
      break;
    case B::kMergedWithPrevious: {
      bool prev_match = false;
      for (const auto& p : pieces) {
        if (p.match && !prev_match && !out.empty())
          out.back().second = p.end;
        else
          out.emplace_back(p.begin, p.end);
        prev_match = p.match;
      }
      break;
    }
    case B::kMergedWithNext: {
      bool next_match = false;
      for (auto it = pieces.rbegin(); it != pieces.rend(); ++it) {
        if (it->match && !next_match && !out.empty())
          out.back().first = it->begin;
        else
          out.emplace_back(it->begin, it->end);
        next_match = it->match;
      }
      std::reverse(out.begin(), out.end());
      break;
    }
    case B::kContiguous: {
      bool prev_match = false;
      for (const auto& p : pieces) {
        if (p.match && prev_match && !out.empty())
          out.back().second = p.end;
        else
          out.emplace_back(p.begin, p.end);
        prev_match = p.match;
      }
      break;
    }
  }
  return out;
}

PreTokenizer::Behavior parse_behavior(const nlohmann::json& j, const std::string& w) {
  using B = PreTokenizer::Behavior;
  const std::string b = j.value("behavior", "Isolated");
  if (b == "Removed") return B::kRemoved;
  if (b == "Isolated") return B::kIsolated;
  if (b == "MergedWithPrevious") return B::kMergedWithPrevious;
  if (b == "MergedWithNext") return B::kMergedWithNext;
  if (b == "Contiguous") return B::kContiguous;
  throw Error("unknown Split behavior \"" + b + "\"", w,
              "use Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous");
}

}  // namespace

PreTokenizer PreTokenizer::from_json(const nlohmann::json& j, const std::string& where) {
  PreTokenizer p;
  if (!j.is_null()) p.add(j, where);
  return p;
}

void PreTokenizer::add(const nlohmann::json& j, const std::string& where) {
  const std::string w = where + ": pre_tokenizer";
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    throw Error("pre_tokenizer must be an object with a string \"type\"", w,
                "check the file was written by HF tokenizers");
  const std::string type = j["type"];
  if (type == "Sequence") {
    if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array())
      throw Error("Sequence pre_tokenizer without a \"pretokenizers\" array", w, "");
    for (const auto& s : j["pretokenizers"]) add(s, where);
  } else if (type == "Split") {
    const auto& p = j.value("pattern", nlohmann::json());
    std::string re;
    if (p.is_object() && p.contains("Regex") && p["Regex"].is_string())
      re = p["Regex"];
    else if (p.is_object() && p.contains("String") && p["String"].is_string())
      re = Regex::escape(p["String"].get<std::string>());
    else
      throw Error("Split pre_tokenizer needs pattern {\"Regex\": ...} or {\"String\": ...}", w,
                  "");
    Step st{Kind::kSplit, std::make_shared<Regex>(re, w), parse_behavior(j, w),
            j.value("invert", false), false};
    steps_.push_back(std::move(st));
  } else if (type == "ByteLevel") {
    Step st{Kind::kByteLevel, nullptr, Behavior::kIsolated, false,
            j.value("add_prefix_space", true)};
    if (j.value("use_regex", true)) st.pattern = std::make_shared<Regex>(kGpt2SplitPattern, w);
    steps_.push_back(std::move(st));
    byte_level_ = true;
  } else if (type == "Digits") {
    Behavior b = j.value("individual_digits", false) ? Behavior::kIsolated : Behavior::kContiguous;
    // Rust's char::is_numeric is the N category (Nd, Nl, No).
    steps_.push_back({Kind::kDigits, std::make_shared<Regex>("\\p{N}", w), b, false, false});
  } else {
    throw Error("unsupported pre_tokenizer type \"" + type + "\"", w,
                "lazytrain supports byte-level tokenizers: Split, ByteLevel, Digits, Sequence");
  }
}

void PreTokenizer::split(const std::string& text, std::vector<std::string>& words) const {
  if (text.empty()) return;
  std::vector<std::string> cur{text};
  std::vector<std::string> next;
  for (const Step& st : steps_) {
    next.clear();
    for (std::string& w : cur) {
      switch (st.kind) {
        case Kind::kSplit:
        case Kind::kDigits: {
          for (auto [b, e] : apply_behavior(match_pieces(*st.pattern, w, st.invert), st.behavior))
            if (e > b) next.push_back(w.substr(b, e - b));
          break;
        }
        case Kind::kByteLevel: {
          // The prefix space goes on every piece between added tokens, as in HF.
          if (st.add_prefix_space && w[0] != ' ') w.insert(w.begin(), ' ');
          if (st.pattern) {
            for (const Piece& p : match_pieces(*st.pattern, w, false))
              next.push_back(byte_level_encode(std::string_view(w).substr(p.begin, p.end - p.begin)));
          } else {
            next.push_back(byte_level_encode(w));
          }
          break;
        }
      }
    }
    cur.swap(next);
  }
  for (auto& w : cur)
    if (!w.empty()) words.push_back(std::move(w));
}

}  // namespace lt::data
