#include "io/safetensors_writer.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "core/error.h"
#include "io/atomic_file.h"

namespace fs = std::filesystem;

namespace lt {

namespace {

void check_names(const std::vector<NamedTensor>& tensors, const std::string& where) {
  std::set<std::string> seen;
  for (const auto& t : tensors) {
    if (t.name == "__metadata__")
      throw Error("tensor name \"__metadata__\" is reserved by the format", where, "rename the tensor");
    if (!seen.insert(t.name).second)
      throw Error("tensor '" + t.name + "' is given twice", where, "pass each tensor once");
    LT_ASSERT(t.view.data != nullptr || t.view.bytes() == 0, "tensor '" + t.name + "' has no data");
  }
}

}  // namespace

std::string safetensors_shard_name(int index, int count) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05d-of-%05d.safetensors", index, count);
  return buf;
}

void save_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                      const SafetensorsMetadata& metadata) {
  check_names(tensors, path);
  std::vector<const NamedTensor*> order;
  for (const auto& t : tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const NamedTensor* a, const NamedTensor* b) {
    size_t sa = dtype_size(a->view.dtype), sb = dtype_size(b->view.dtype);
    return sa != sb ? sa > sb : a->name < b->name;
  });

  nlohmann::json header = nlohmann::json::object();
  nlohmann::json meta(metadata);
  if (!meta.contains("format")) meta["format"] = "pt";
  header["__metadata__"] = meta;
  uint64_t offset = 0;
  for (const NamedTensor* t : order) {
    const uint64_t bytes = t->view.bytes();
    header[t->name] = {{"dtype", std::string(dtype_name(t->view.dtype))},
                       {"shape", t->view.shape},
                       {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data section 8-byte aligned

  uint8_t len_le[8];
  for (int i = 0; i < 8; ++i) len_le[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
  AtomicFileWriter w(path);
  w.write(len_le, 8);
  w.write(text.data(), text.size());
  for (const NamedTensor* t : order) w.write(t->view.data, t->view.bytes());
  w.commit();
}

std::vector<std::string> save_safetensors_sharded(const std::string& dir, const std::vector<NamedTensor>& tensors,
                                                  uint64_t max_shard_bytes, const SafetensorsMetadata& metadata) {
  if (max_shard_bytes == 0) throw Error("max shard size is 0", dir, "pass a positive shard size");
  check_names(tensors, dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error("cannot create directory: " + ec.message(), dir, "check permissions and free space");

  // Greedy split in the caller's order, so neighbours (one layer's weights) share a shard.
  std::vector<std::vector<NamedTensor>> shards;
  uint64_t in_shard = 0, total = 0;
  for (const auto& t : tensors) {
    const uint64_t b = t.view.bytes();
    if (shards.empty() || (in_shard > 0 && in_shard + b > max_shard_bytes)) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(t);
    in_shard += b;
    total += b;
  }
  if (shards.empty()) shards.emplace_back();

  const fs::path root(dir);
  std::vector<std::string> written;
  if (shards.size() == 1) {
    save_safetensors((root / kSafetensorsSingleName).string(), shards[0], metadata);
    written.push_back(kSafetensorsSingleName);
  } else {
    nlohmann::json weight_map = nlohmann::json::object();
    const int n = static_cast<int>(shards.size());
    for (int i = 0; i < n; ++i) {
      const std::string name = safetensors_shard_name(i + 1, n);
      save_safetensors((root / name).string(), shards[i], metadata);
      for (const auto& t : shards[i]) weight_map[t.name] = name;
      written.push_back(name);
    }
    nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    write_file_atomic((root / kSafetensorsIndexName).string(), index.dump(2) + "\n");
  }

  // Remove the other form's leftovers only now that the new checkpoint is complete.
  const std::set<std::string> keep(written.begin(), written.end());
  static const std::regex kShardPattern(R"(model-\d{5}-of-\d{5}\.safetensors)");
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    if (keep.count(name)) continue;
    const bool stale = std::regex_match(name, kShardPattern) || name == kSafetensorsSingleName ||
                       (shards.size() == 1 && name == kSafetensorsIndexName);
    if (stale) fs::remove(entry.path(), ec);
  }
  return written;
}

}  // namespace lt
