// A Hugging Face model directory's weights: `model.safetensors`, or
// `model.safetensors.index.json` plus the shards it names. Tensors are looked up by name
// across shards; all shards stay memory-mapped while this object lives.
//
// Like transformers, a single `model.safetensors` wins over an index when both exist.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/tensor_view.h"
#include "io/safetensors.h"

namespace lt {

class CheckpointDir {
 public:
  // `path`: a model directory, or directly a .safetensors file or an index .json file.
  // Throws lt::Error when no safetensors weights are found, the index is malformed, a shard
  // is missing or malformed, or a tensor the index maps is absent from its shard.
  explicit CheckpointDir(const std::string& path);

  const std::string& path() const { return path_; }
  bool contains(const std::string& name) const { return where_.count(name) != 0; }
  // Zero-copy, read-only view; throws lt::Error naming the directory and tensor if absent.
  TensorView tensor(const std::string& name) const;
  const SafetensorsEntry& entry(const std::string& name) const;
  // The file that holds `name` (throws if absent).
  const SafetensorsFile& file_of(const std::string& name) const;
  std::vector<std::string> names() const;  // sorted
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }

 private:
  void open_single(const std::string& file);
  void open_index(const std::string& index_path);

  std::string path_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::unordered_map<std::string, const SafetensorsFile*> where_;
};

}  // namespace lt
