#include "io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace lt {

namespace {

constexpr const char* kRewriteFix = "the file is damaged or was not written as safetensors; re-download or re-export it";

std::string tensor_where(const std::string& path, const std::string& name) {
  return path + ", tensor '" + name + "'";
}

// Reads a non-negative integer field; throws naming the field otherwise.
uint64_t to_u64(const nlohmann::json& v, const std::string& where, const std::string& field) {
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
    throw Error(field + " must hold non-negative integers, got " + v.dump(), where, kRewriteFix);
  return v.get<uint64_t>();
}

SafetensorsEntry parse_entry(const std::string& name, const nlohmann::json& v, const std::string& path,
                             size_t data_size) {
  const std::string where = tensor_where(path, name);
  if (!v.is_object())
    throw Error("header entry is not a JSON object: " + v.dump(), where, kRewriteFix);
  SafetensorsEntry e;
  e.name = name;

  auto dt = v.find("dtype");
  if (dt == v.end() || !dt->is_string())
    throw Error("missing or non-string \"dtype\"", where, kRewriteFix);
  if (!dtype_from_name(dt->get<std::string>(), &e.dtype))
    throw Error("unknown dtype \"" + dt->get<std::string>() + "\"", where,
                "lazytrain reads F64, F32, F16, BF16, I64, I32, I16, I8, U8 and BOOL; convert the tensor");

  auto sh = v.find("shape");
  if (sh == v.end() || !sh->is_array()) throw Error("missing or non-array \"shape\"", where, kRewriteFix);
  uint64_t numel = 1;
  for (const auto& d : *sh) {
    uint64_t dim = to_u64(d, where, "\"shape\"");
    // Each dimension on its own too: after a 0 the product stays 0, and a dimension past
    // int64 would become a negative one in Shape.
    if (dim > (uint64_t{1} << 60) || __builtin_mul_overflow(numel, dim, &numel) || numel > (uint64_t{1} << 60))
      throw Error("shape " + sh->dump() + " has too many elements", where, kRewriteFix);
    e.shape.push_back(static_cast<int64_t>(dim));
  }

  auto off = v.find("data_offsets");
  if (off == v.end() || !off->is_array() || off->size() != 2)
    throw Error("missing \"data_offsets\" or it is not a [begin, end] pair", where, kRewriteFix);
  e.begin = to_u64((*off)[0], where, "\"data_offsets\"");
  e.end = to_u64((*off)[1], where, "\"data_offsets\"");
  if (e.begin > e.end)
    throw Error("data_offsets " + off->dump() + " begin after they end", where, kRewriteFix);
  if (e.end > data_size)
    throw Error("data_offsets " + off->dump() + " run past the end of the data section (" +
                    std::to_string(data_size) + " bytes; the file may be truncated)",
                where, kRewriteFix);
  const uint64_t want = numel * dtype_size(e.dtype);
  if (e.end - e.begin != want)
    throw Error("data_offsets " + off->dump() + " span " + std::to_string(e.end - e.begin) +
                    " bytes but shape " + shape_str(e.shape) + " of " + std::string(dtype_name(e.dtype)) +
                    " needs " + std::to_string(want),
                where, kRewriteFix);
  return e;
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : file_(path) {
  const size_t size = file_.size();
  if (size < 8)
    throw Error("file is " + std::to_string(size) + " bytes, shorter than the 8-byte header length",
                path, "the file is truncated or not safetensors; re-download or re-export it");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | file_.data()[i];  // little-endian
  if (header_len > size - 8)
    throw Error("header length " + std::to_string(header_len) + " runs past the end of the file (" +
                    std::to_string(size) + " bytes)",
                path, "the file is truncated or not safetensors; re-download or re-export it");
  data_offset_ = 8 + header_len;
  const size_t data_size = size - data_offset_;

  const char* hb = reinterpret_cast<const char*>(file_.data() + 8);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(hb, hb + header_len);
  } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for a number like 1e400
    throw Error(std::string("header is not valid JSON: ") + e.what(), path, kRewriteFix);
  }
  if (!header.is_object()) throw Error("header is not a JSON object", path, kRewriteFix);

  std::vector<const SafetensorsEntry*> by_offset;
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      if (!v.is_object()) throw Error("\"__metadata__\" is not a JSON object", path, kRewriteFix);
      for (const auto& [k, s] : v.items()) {
        if (!s.is_string())
          throw Error("\"__metadata__\" value for \"" + k + "\" is not a string", path, kRewriteFix);
        metadata_[k] = s.get<std::string>();
      }
      continue;
    }
    auto [it, fresh] = entries_.emplace(name, parse_entry(name, v, path, data_size));
    LT_ASSERT(fresh, "nlohmann::json objects have unique keys");
    by_offset.push_back(&it->second);
  }

  // Two tensors must never share bytes: a write through one would corrupt the other.
  std::sort(by_offset.begin(), by_offset.end(), [](const SafetensorsEntry* a, const SafetensorsEntry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  const SafetensorsEntry* prev = nullptr;
  for (const SafetensorsEntry* e : by_offset) {
    if (e->begin == e->end) continue;  // empty tensors occupy no bytes
    if (prev && e->begin < prev->end)
      throw Error("tensor bytes [" + std::to_string(e->begin) + ", " + std::to_string(e->end) +
                      ") overlap tensor '" + prev->name + "' [" + std::to_string(prev->begin) + ", " +
                      std::to_string(prev->end) + ")",
                  tensor_where(path, e->name), kRewriteFix);
    prev = e;
  }
}

const SafetensorsEntry& SafetensorsFile::entry(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end())
    throw Error("no tensor named '" + name + "' (the file has " + std::to_string(entries_.size()) + ")",
                path(), "check the tensor name and that this checkpoint is the model you expect");
  return it->second;
}

TensorView SafetensorsFile::tensor(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  TensorView v;
  // const_cast: TensorView has no const flavour; the mapping itself is PROT_READ.
  v.data = const_cast<uint8_t*>(file_.data() + data_offset_ + e.begin);
  v.dtype = e.dtype;
  v.shape = e.shape;
  return v;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& [name, e] : entries_) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace lt
