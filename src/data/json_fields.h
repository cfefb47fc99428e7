// Checked reads of the optional fields of tokenizer.json sections (model, normalizer,
// pre_tokenizer, decoder). A field of the wrong type gets an lt::Error that names the
// section (`where`, e.g. "tokenizer.json: decoder"), the field and the type it needs,
// instead of nlohmann's generic type_error.
#pragma once

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

namespace lt::data {

// `key` of object `j`: its value, or `fallback` when absent or null.
bool json_bool(const nlohmann::json& j, const char* key, bool fallback, const std::string& where);
std::string json_string(const nlohmann::json& j, const char* key, const std::string& fallback,
                        const std::string& where);
// A whole number >= 0.
size_t json_count(const nlohmann::json& j, const char* key, size_t fallback, const std::string& where);

// A string field that must hold exactly one Unicode character (Metaspace's "replacement",
// Strip's "content"); returns its UTF-8 form. `fallback` is used when absent.
std::string json_char(const nlohmann::json& j, const char* key, const std::string& fallback,
                      const std::string& where);

// The "pattern" of Replace / Split: {"String": s} (matched literally) or {"Regex": r}.
// Returns a PCRE2 pattern.
std::string json_pattern(const nlohmann::json& j, const std::string& where);

}  // namespace lt::data
