#include "io/checkpoint_dir.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/safetensors_writer.h"

namespace fs = std::filesystem;

namespace lt {

namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

CheckpointDir::CheckpointDir(const std::string& path) : path_(path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const fs::path single = fs::path(path) / kSafetensorsSingleName;
    const fs::path index = fs::path(path) / kSafetensorsIndexName;
    if (fs::exists(single, ec)) {
      open_single(single.string());
    } else if (fs::exists(index, ec)) {
      open_index(index.string());
    } else {
      throw Error(std::string("no ") + kSafetensorsSingleName + " or " + kSafetensorsIndexName + " found", path,
                  "lazytrain reads safetensors checkpoints only; convert .bin/.pt weights with transformers "
                  "(save_pretrained(..., safe_serialization=True))");
    }
  } else if (ends_with(path, ".json")) {
    open_index(path);
  } else {
    open_single(path);  // MappedFile reports a missing path
  }
}

void CheckpointDir::open_single(const std::string& file) {
  files_.push_back(std::make_unique<SafetensorsFile>(file));
  for (const auto& name : files_.back()->names()) where_[name] = files_.back().get();
}

void CheckpointDir::open_index(const std::string& index_path) {
  const std::string fix = "the index is damaged; re-download the checkpoint or re-save it";
  nlohmann::json index;
  try {
    index = nlohmann::json::parse(read_text_file(index_path));
  } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for a number like 1e400
    throw Error(std::string("index is not valid JSON: ") + e.what(), index_path, fix);
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    throw Error("index has no \"weight_map\" object", index_path, fix);

  const fs::path dir = fs::path(index_path).parent_path();
  std::map<std::string, const SafetensorsFile*> opened;  // shard file name -> file
  for (const auto& [name, file] : index["weight_map"].items()) {
    if (!file.is_string())
      throw Error("weight_map entry for '" + name + "' is not a file name", index_path, fix);
    const std::string shard = file.get<std::string>();
    if (shard.find('/') != std::string::npos)
      throw Error("weight_map entry for '" + name + "' names a path outside the directory: " + shard,
                  index_path, fix);
    auto it = opened.find(shard);
    if (it == opened.end()) {
      const fs::path shard_path = dir / shard;
      std::error_code ec;  // (the throwing overload threw filesystem_error, e.g. for a name too long)
      if (!fs::exists(shard_path, ec))
        throw Error("shard '" + shard + "' (holding '" + name + "') is missing" + (ec ? ": " + ec.message() : ""),
                    index_path, "download every file the index lists into the same directory");
      files_.push_back(std::make_unique<SafetensorsFile>(shard_path.string()));
      it = opened.emplace(shard, files_.back().get()).first;
    }
    if (!it->second->contains(name))
      throw Error("tensor '" + name + "' is mapped to shard '" + shard + "' but is not in it", index_path,
                  fix);
    where_[name] = it->second;
  }
}

const SafetensorsFile& CheckpointDir::file_of(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end())
    throw Error("no tensor named '" + name + "' in the checkpoint (" + std::to_string(where_.size()) +
                    " tensors)",
                path_, "check that the checkpoint matches the model config");
  return *it->second;
}

const SafetensorsEntry& CheckpointDir::entry(const std::string& name) const { return file_of(name).entry(name); }

TensorView CheckpointDir::tensor(const std::string& name) const { return file_of(name).tensor(name); }

std::vector<std::string> CheckpointDir::names() const {
  std::vector<std::string> out;
  out.reserve(where_.size());
  for (const auto& [name, f] : where_) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace lt
