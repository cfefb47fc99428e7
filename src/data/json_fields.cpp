#include "data/json_fields.h"

#include "core/error.h"
#include "data/regex.h"
#include "data/utf8.h"

namespace lt::data {
namespace {

const nlohmann::json* field(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

}  // namespace

bool json_bool(const nlohmann::json& j, const char* key, bool fallback, const std::string& where) {
  const nlohmann::json* v = field(j, key);
  if (!v) return fallback;
  if (!v->is_boolean())
    throw Error(std::string("\"") + key + "\" must be true or false, not " + v->dump(), where,
                "fix the field or re-save the tokenizer with HF tokenizers");
  return v->get<bool>();
}

std::string json_string(const nlohmann::json& j, const char* key, const std::string& fallback,
                        const std::string& where) {
  const nlohmann::json* v = field(j, key);
  if (!v) return fallback;
  if (!v->is_string())
    throw Error(std::string("\"") + key + "\" must be a string, not " + v->dump(), where,
                "fix the field or re-save the tokenizer with HF tokenizers");
  return v->get<std::string>();
}

size_t json_count(const nlohmann::json& j, const char* key, size_t fallback, const std::string& where) {
  const nlohmann::json* v = field(j, key);
  if (!v) return fallback;
  if (!v->is_number_unsigned() && !(v->is_number_integer() && v->get<int64_t>() >= 0))
    throw Error(std::string("\"") + key + "\" must be a whole number >= 0, not " + v->dump(), where,
                "fix the field or re-save the tokenizer with HF tokenizers");
  return v->get<size_t>();
}

std::string json_char(const nlohmann::json& j, const char* key, const std::string& fallback,
                      const std::string& where) {
  const std::string s = json_string(j, key, fallback, where);
  size_t pos = 0;
  const bool one = !s.empty() && next_code_point(s, pos) != 0xFFFD && pos == s.size();
  if (!one && s != "\xEF\xBF\xBD")  // U+FFFD itself is a valid single character
    throw Error(std::string("\"") + key + "\" must be exactly one character, not \"" + s + "\"", where,
                "HF tokenizers stores it as a one-character string such as \"\xE2\x96\x81\"");
  return s;
}

std::string json_pattern(const nlohmann::json& j, const std::string& where) {
  const nlohmann::json* p = field(j, "pattern");
  if (p && p->is_object() && p->size() == 1) {
    if (p->contains("String") && (*p)["String"].is_string())
      return Regex::escape((*p)["String"].get<std::string>());
    if (p->contains("Regex") && (*p)["Regex"].is_string()) return (*p)["Regex"].get<std::string>();
  }
  throw Error("\"pattern\" must be {\"String\": \"...\"} or {\"Regex\": \"...\"}", where,
              "re-save the tokenizer with HF tokenizers");
}

}  // namespace lt::data
