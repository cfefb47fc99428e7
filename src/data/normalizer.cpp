#include "data/normalizer.h"

#include <unicode/bytestream.h>
#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include "core/error.h"
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
    steps_.push_back({Kind::kPrepend, nullptr, j.value("prepend", ""), false, false});
  } else if (type == "Strip") {
    steps_.push_back({Kind::kStrip, nullptr, "", j.value("strip_left", false),
                      j.value("strip_right", false)});
  } else if (type == "Replace") {
    const auto& p = j.value("pattern", nlohmann::json());
    std::string re;
    if (p.is_object() && p.contains("String") && p["String"].is_string())
      re = Regex::escape(p["String"].get<std::string>());
    else if (p.is_object() && p.contains("Regex") && p["Regex"].is_string())
      re = p["Regex"];
    else
      throw Error("Replace normalizer needs pattern {\"String\": ...} or {\"Regex\": ...}", w,
                  "");
    steps_.push_back({Kind::kReplace, std::make_shared<Regex>(re, w),
                      j.value("content", ""), false, false});
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
      case Kind::kLowercase: {
        // Full Unicode lower-casing with the root locale (final sigma included), as
        // Rust's str::to_lowercase.
        icu::UnicodeString u = icu::UnicodeString::fromUTF8(s);
        u.toLower(icu::Locale::getRoot());
        s.clear();
        u.toUTF8String(s);
        break;
      }
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
