#include "data/normalizer.h"

#include <unicode/bytestream.h>
#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include "core/error.h"
#include "data/json_fields.h"
#include "data/utf8.h"

namespace lt::data {
namespace {

const icu::Normalizer2* icu_instance(Normalizer::Kind form) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* n = nullptr;
  switch (form) {
    case Normalizer::Kind::kNfc: n = icu::Normalizer2::getNFCInstance(status); break;
    case Normalizer::Kind::kNfd: n = icu::Normalizer2::getNFDInstance(status); break;
    case Normalizer::Kind::kNfkc: n = icu::Normalizer2::getNFKCInstance(status); break;
    case Normalizer::Kind::kNfkd: n = icu::Normalizer2::getNFKDInstance(status); break;
    default: break;
  }
  if (U_FAILURE(status) || !n)
    throw Error("ICU could not load its Unicode normalization data", "libicu",
                "reinstall libicu (scripts/setup.sh installs libicu-dev)");
  return n;
}


// HF lower-cases one character at a time (Rust's char::to_lowercase: the full mapping, so
// "İ" becomes "i̇", but without context, so a final "Σ" becomes "σ", not "ς").
std::string lowercase_each_char(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t b = pos;
    const char32_t c = next_code_point(s, pos);
    if (c < 0x80) {
      out += static_cast<char>(c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c);
      continue;
    }
    if (c == 0xFFFD && !(pos - b == 3 && s.compare(b, 3, "\xEF\xBF\xBD") == 0)) {
      out.append(s, b, pos - b);  // an invalid byte stays as it is
      continue;
    }
    icu::UnicodeString u(static_cast<UChar32>(c));
    u.toLower(icu::Locale::getRoot());
    u.toUTF8String(out);
  }
  return out;
}

}  // namespace

std::string unicode_normalize(const std::string& text, Normalizer::Kind form) {
  const icu::Normalizer2* n = icu_instance(form);
  UErrorCode status = U_ZERO_ERROR;
  // Most text is already normalized; checking is cheaper than rebuilding it.
  if (n->isNormalizedUTF8(text, status) && U_SUCCESS(status)) return text;
  status = U_ZERO_ERROR;
  std::string out;
  icu::StringByteSink<std::string> sink(&out, static_cast<int32_t>(text.size()));
  n->normalizeUTF8(0, text, sink, nullptr, status);
  if (U_FAILURE(status))
    throw Error(std::string("Unicode normalization failed: ") + u_errorName(status),
                "tokenizer normalizer", "check that the input text is valid UTF-8");
  return out;
}

Normalizer Normalizer::from_json(const nlohmann::json& j, const std::string& where) {
  Normalizer n;
  if (!j.is_null()) n.add(j, where);
  return n;
}

void Normalizer::add(const nlohmann::json& j, const std::string& where) {
  const std::string w = where + ": normalizer";
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    throw Error("normalizer must be an object with a string \"type\"", w,
                "check the file was written by HF tokenizers");
  const std::string type = j["type"];
  const std::string wt = w + " " + type;
  if (type == "Sequence") {
    if (!j.contains("normalizers") || !j["normalizers"].is_array())
      throw Error("Sequence normalizer without a \"normalizers\" array", w, "");
    for (const auto& s : j["normalizers"]) add(s, where);
  } else if (type == "NFC") {
    steps_.push_back({Kind::kNfc, nullptr, "", false, false});
  } else if (type == "NFD") {
    steps_.push_back({Kind::kNfd, nullptr, "", false, false});
  } else if (type == "NFKC") {
    steps_.push_back({Kind::kNfkc, nullptr, "", false, false});
  } else if (type == "NFKD") {
    steps_.push_back({Kind::kNfkd, nullptr, "", false, false});
  } else if (type == "Lowercase") {
    steps_.push_back({Kind::kLowercase, nullptr, "", false, false});
  } else if (type == "Prepend") {
    if (!j.contains("prepend")) throw Error("Prepend normalizer without \"prepend\"", wt, "");
    steps_.push_back({Kind::kPrepend, nullptr, json_string(j, "prepend", "", wt), false, false});
  } else if (type == "Strip") {
    steps_.push_back({Kind::kStrip, nullptr, "", json_bool(j, "strip_left", false, wt),
                      json_bool(j, "strip_right", false, wt)});
  } else if (type == "Replace") {
    if (!j.contains("content")) throw Error("Replace normalizer without \"content\"", wt, "");
    steps_.push_back({Kind::kReplace, std::make_shared<Regex>(json_pattern(j, wt), wt),
                      json_string(j, "content", "", wt), false, false});
  } else {
    throw Error("unsupported normalizer type \"" + type + "\"", w,
                "lazytrain supports NFC, NFD, NFKC, NFKD, Lowercase, Replace, Prepend, Strip "
                "and Sequence");
  }
}

std::string Normalizer::normalize(const std::string& text) const {
  std::string s = text;
  for (const Step& st : steps_) {
    switch (st.kind) {
      case Kind::kNfc:
      case Kind::kNfd:
      case Kind::kNfkc:
      case Kind::kNfkd:
        s = unicode_normalize(s, st.kind);
        break;
      case Kind::kLowercase:
        s = lowercase_each_char(s);
        break;
      case Kind::kPrepend:
        if (!s.empty()) s = st.content + s;
        break;
      case Kind::kStrip: {
        size_t b = 0, e = s.size();
        if (st.left) {
          size_t pos = 0;
          while (pos < s.size()) {
            size_t p = pos;
            if (!is_white_space(next_code_point(s, p))) break;
            pos = p;
          }
          b = pos;
        }
        if (st.right) {
          // Walk forward, remembering where the trailing run of spaces begins.
          size_t pos = b, run = s.size();
          bool in_run = false;
          while (pos < s.size()) {
            size_t start = pos;
            bool sp = is_white_space(next_code_point(s, pos));
            if (sp && !in_run) run = start;
            in_run = sp;
          }
          e = in_run ? run : s.size();
        }
        s = s.substr(b, e - b);
        break;
      }
      case Kind::kReplace: {
        std::string out;
        size_t prev = 0;
        for (auto [mb, me] : st.pattern->find_all(s)) {
          out.append(s, prev, mb - prev);
          out += st.content;
          prev = me;
        }
        out.append(s, prev, std::string::npos);
        s = std::move(out);
        break;
      }
    }
  }
  return s;
}

}  // namespace lt::data
