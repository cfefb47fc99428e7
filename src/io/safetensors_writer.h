// Writes .safetensors files, single or sharded the way Hugging Face does it.
//
// Layout: tensors sorted by dtype size (largest first), then by name, as the reference
// implementation does, so every tensor starts aligned to its element size; the JSON header
// is padded with spaces to a multiple of 8 bytes. The output depends only on the inputs.
// "__metadata__" always carries "format": "pt" unless the caller sets "format":
// transformers refuses safetensors files whose format it does not know.
//
// Every file goes through AtomicFileWriter: a crash leaves either the old file or the new
// one under the final name, never a partial one. (A sharded save is atomic per file, not
// as a set; write a whole checkpoint into a fresh directory for set-level atomicity.)
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/tensor_view.h"

namespace lt {

struct NamedTensor {
  std::string name;
  TensorView view;  // contiguous bytes; only read
};

using SafetensorsMetadata = std::map<std::string, std::string>;

// Throws lt::Error for a duplicate or reserved name, or any write failure (with the path).
void save_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                      const SafetensorsMetadata& metadata = {});

constexpr const char* kSafetensorsSingleName = "model.safetensors";
constexpr const char* kSafetensorsIndexName = "model.safetensors.index.json";

// Saves into directory `dir` (created if missing), splitting `tensors` in the given order
// into shards of at most `max_shard_bytes` of tensor data each (a larger tensor gets a shard
// of its own). One shard: `model.safetensors`, no index (as transformers does). Several:
// `model-00001-of-0000N.safetensors` ... plus `model.safetensors.index.json`
// ({"metadata": {"total_size": bytes}, "weight_map": {name: file}}), written last.
// Leftovers of an earlier save in the other form (a stale single file, index or shards
// named model-*-of-*.safetensors) are removed after the new files are in place, so a
// reader never picks up old weights. Returns the file names written, in order.
std::vector<std::string> save_safetensors_sharded(const std::string& dir, const std::vector<NamedTensor>& tensors,
                                                  uint64_t max_shard_bytes, const SafetensorsMetadata& metadata = {});

// "model-00002-of-00005.safetensors" (1-based index).
std::string safetensors_shard_name(int index, int count);

}  // namespace lt
