#include "data/pre_tokenizer.h"

#include "core/error.h"
#include "data/byte_level.h"
#include "data/json_fields.h"

namespace lt::data {

const char* const kGpt2SplitPattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

namespace {

// The character classes of the Rust side, spelled out so that PCRE2's own \s and \w (which
// differ at the edges) do not decide. White_Space is Rust's char::is_whitespace and regex
// \s; the word class is the regex crate's Unicode \w (UTS #18: Alphabetic, marks, decimal
// digits, connector punctuation, joiners).
#define LT_WHITE_SPACE "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
#define LT_WORD "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}"
// Whitespace keeps the runs of word characters and the runs of other non-space characters.
const char* const kWhitespaceWords = "[" LT_WORD "]+|[^" LT_WORD LT_WHITE_SPACE "]+";
const char* const kWhiteSpaceChar = "[" LT_WHITE_SPACE "]";
// Punctuation: char::is_ascii_punctuation (which counts $+<=>^`|~) or a Unicode P* category.
const char* const kPunctuationChar = "[\\p{P}\\x{21}-\\x{2F}\\x{3A}-\\x{40}\\x{5B}-\\x{60}\\x{7B}-\\x{7E}]";
#undef LT_WHITE_SPACE
#undef LT_WORD

const char* const kSupported =
    "lazytrain supports Split, ByteLevel, Digits, Metaspace, WhitespaceSplit, Whitespace, "
    "Punctuation and Sequence";

}  // namespace

MetaspaceOptions parse_metaspace(const nlohmann::json& j, const std::string& where) {
  using P = MetaspaceOptions::Prepend;
  MetaspaceOptions m;
  m.replacement = json_char(j, "replacement", m.replacement, where);
  m.split = json_bool(j, "split", true, where);
  const std::string scheme = json_string(j, "prepend_scheme", "always", where);
  if (scheme == "always")
    m.prepend = P::kAlways;
  else if (scheme == "first")
    m.prepend = P::kFirst;
  else if (scheme == "never")
    m.prepend = P::kNever;
  else
    throw Error("unknown Metaspace prepend_scheme \"" + scheme + "\"", where,
                "use \"always\", \"first\" or \"never\"");
  // Older files say add_prefix_space. HF takes false only beside prepend_scheme "never"
  // (whose default is "always"), and so does lazytrain.
  if (!json_bool(j, "add_prefix_space", true, where) && m.prepend != P::kNever)
    throw Error("Metaspace has add_prefix_space false but prepend_scheme \"" + scheme + "\"", where,
                "set \"prepend_scheme\": \"never\" (HF tokenizers rejects this file too)");
  return m;
}

PreTokenizer PreTokenizer::from_json(const nlohmann::json& j, const std::string& where) {
  PreTokenizer p;
  if (!j.is_null()) p.add(j, where);
  return p;
}

void PreTokenizer::add_split(const std::string& pattern, SplitBehavior behavior, bool invert,
                             const std::string& where) {
  Step st{Kind::kSplit, std::make_shared<Regex>(pattern, where), behavior, invert, false, {}};
  steps_.push_back(std::move(st));
}

void PreTokenizer::add(const nlohmann::json& j, const std::string& where) {
  const std::string w = where + ": pre_tokenizer";
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    throw Error("pre_tokenizer must be an object with a string \"type\"", w,
                "check the file was written by HF tokenizers");
  const std::string type = j["type"];
  const std::string wt = w + " " + type;
  if (type == "Sequence") {
    if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array())
      throw Error("Sequence pre_tokenizer without a \"pretokenizers\" array", w, "");
    for (const auto& s : j["pretokenizers"]) add(s, where);
  } else if (type == "Split") {
    add_split(json_pattern(j, wt), parse_split_behavior(j, SplitBehavior::kIsolated, wt),
              json_bool(j, "invert", false, wt), wt);
  } else if (type == "ByteLevel") {
    Step st{Kind::kByteLevel, nullptr, SplitBehavior::kIsolated, false,
            json_bool(j, "add_prefix_space", true, wt), {}};
    if (json_bool(j, "use_regex", true, wt)) st.pattern = std::make_shared<Regex>(kGpt2SplitPattern, wt);
    steps_.push_back(std::move(st));
    byte_level_ = true;
  } else if (type == "Digits") {
    // Rust's char::is_numeric is the N category (Nd, Nl, No).
    add_split("\\p{N}",
              json_bool(j, "individual_digits", false, wt) ? SplitBehavior::kIsolated : SplitBehavior::kContiguous,
              false, wt);
  } else if (type == "Metaspace") {
    Step st{Kind::kMetaspace, nullptr, SplitBehavior::kMergedWithNext, false, false, parse_metaspace(j, wt)};
    st.pattern = std::make_shared<Regex>(Regex::escape(st.metaspace.replacement), wt);
    steps_.push_back(std::move(st));
  } else if (type == "WhitespaceSplit") {
    add_split(kWhiteSpaceChar, SplitBehavior::kRemoved, false, wt);
  } else if (type == "Whitespace") {
    add_split(kWhitespaceWords, SplitBehavior::kRemoved, /*invert=*/true, wt);
  } else if (type == "Punctuation") {
    add_split(kPunctuationChar, parse_split_behavior(j, SplitBehavior::kIsolated, wt), false, wt);
  } else {
    throw Error("unsupported pre_tokenizer type \"" + type + "\"", w, kSupported);
  }
}

// Replaces spaces by the replacement character, prepends one where the scheme says, and
// cuts before each replacement character (HF: MergedWithNext).
void PreTokenizer::metaspace(const Step& st, Word& w, std::vector<Word>& out) {
  using P = MetaspaceOptions::Prepend;
  const std::string& rep = st.metaspace.replacement;
  std::string s;
  s.reserve(w.text.size() + rep.size());
  for (char c : w.text) {
    if (c == ' ')
      s += rep;
    else
      s += c;
  }
  const bool prepend = st.metaspace.prepend == P::kAlways || (st.metaspace.prepend == P::kFirst && w.at_start);
  if (prepend && !s.empty() && s.compare(0, rep.size(), rep) != 0) s.insert(0, rep);
  if (!st.metaspace.split) {
    out.push_back({std::move(s), w.at_start});
    return;
  }
  for (auto [b, e] : split_ranges(*st.pattern, s, SplitBehavior::kMergedWithNext, false))
    out.push_back({s.substr(b, e - b), w.at_start && b == 0});
}

void PreTokenizer::split(const std::string& text, std::vector<std::string>& words, bool at_start) const {
  if (text.empty()) return;
  std::vector<Word> cur{{text, at_start}};
  std::vector<Word> next;
  for (const Step& st : steps_) {
    next.clear();
    for (Word& w : cur) {
      switch (st.kind) {
        case Kind::kSplit:
          for (auto [b, e] : split_ranges(*st.pattern, w.text, st.behavior, st.invert))
            next.push_back({w.text.substr(b, e - b), w.at_start && b == 0});
          break;
        case Kind::kByteLevel: {
          // The prefix space goes on every piece between added tokens, as in HF.
          if (st.add_prefix_space && w.text[0] != ' ') w.text.insert(w.text.begin(), ' ');
          if (st.pattern) {
            for (auto [b, e] : split_ranges(*st.pattern, w.text, SplitBehavior::kIsolated, false))
              next.push_back({byte_level_encode(std::string_view(w.text).substr(b, e - b)), w.at_start && b == 0});
          } else {
            next.push_back({byte_level_encode(w.text), w.at_start});
          }
          break;
        }
        case Kind::kMetaspace:
          metaspace(st, w, next);
          break;
      }
    }
    // Pieces are never empty (split_ranges drops empty ones; Metaspace only grows text).
    cur.swap(next);
  }
  for (auto& w : cur)
    if (!w.text.empty()) words.push_back(std::move(w.text));
}

}  // namespace lt::data
