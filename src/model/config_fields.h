// Typed reading of a config.json object, with errors that name the source and field,
// and the size bounds every family's parser applies (model/config.cpp and the families
// it hands off, model/config_qwen3_5.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace lt::config_fields {

using nlohmann::json;

constexpr const char* kFixConfig = "fix config.json or use the model's original one";

// Typed access to one JSON object, with errors that name the source and field.
class Fields {
 public:
  Fields(const json& j, std::string where) : j_(j), where_(std::move(where)) {}

  bool has(const std::string& key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  bool present(const std::string& key) const { return j_.contains(key); }  // even if null
  std::string at(const std::string& key) const { return where_ + ", field \"" + key + "\""; }

  int64_t req_int(const std::string& key) const {
    if (!has(key)) throw Error("required field \"" + key + "\" is missing", where_, kFixConfig);
    return to_int(key, j_.at(key));
  }
  int64_t opt_int(const std::string& key, int64_t def) const { return has(key) ? to_int(key, j_.at(key)) : def; }
  double opt_num(const std::string& key, double def) const {
    if (!has(key)) return def;
    const json& v = j_.at(key);
    if (!v.is_number()) throw Error("must be a number, got " + v.dump(), at(key), kFixConfig);
    return v.get<double>();
  }
  double req_num(const std::string& key) const {
    if (!has(key)) throw Error("required field \"" + key + "\" is missing", where_, kFixConfig);
    return opt_num(key, 0.0);
  }
  bool opt_bool(const std::string& key, bool def) const {
    if (!has(key)) return def;
    const json& v = j_.at(key);
    if (!v.is_boolean()) throw Error("must be true or false, got " + v.dump(), at(key), kFixConfig);
    return v.get<bool>();
  }
  std::string opt_str(const std::string& key, const std::string& def) const {
    if (!has(key)) return def;
    const json& v = j_.at(key);
    if (!v.is_string()) throw Error("must be a string, got " + v.dump(), at(key), kFixConfig);
    return v.get<std::string>();
  }
  // An object or null/absent (returns nullptr).
  const json* opt_object(const std::string& key) const {
    if (!has(key)) return nullptr;
    const json& v = j_.at(key);
    if (!v.is_object()) throw Error("must be an object or null, got " + v.dump(), at(key), kFixConfig);
    return &v;
  }
  const json& raw(const std::string& key) const { return j_.at(key); }

 private:
  int64_t to_int(const std::string& key, const json& v) const {
    if (!v.is_number_integer()) throw Error("must be an integer, got " + v.dump(), at(key), kFixConfig);
    return v.get<int64_t>();
  }
  const json& j_;
  std::string where_;
};

inline void require_positive(int64_t v, const Fields& f, const std::string& key) {
  if (v <= 0) throw Error("must be positive, got " + std::to_string(v), f.at(key), kFixConfig);
}

// Upper bounds, far above any released model, that keep every size product (parameter
// counts, byte sizes) inside int64 and token ids and positions inside int32.
constexpr int64_t kMaxWidth = int64_t{1} << 20;        // hidden_size
constexpr int64_t kMaxIntermediate = int64_t{1} << 22;  // intermediate_size
constexpr int64_t kMaxCount = int64_t{1} << 14;         // layers, heads, head_dim
constexpr int64_t kMaxTokens = (int64_t{1} << 31) - 1;  // vocab_size, positions (int32 ids)
constexpr double kMaxParams = 1e15;

inline void require_at_most(int64_t v, int64_t max, const Fields& f, const std::string& key) {
  if (v > max)
    throw Error("is " + std::to_string(v) + ", more than lazytrain supports (" + std::to_string(max) + ")", f.at(key),
                kFixConfig);
}

}  // namespace lt::config_fields
