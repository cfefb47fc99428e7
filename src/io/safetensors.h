// Reads a .safetensors file: 8-byte little-endian header length N, N bytes of JSON header
// ({name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {str: str}}), then
// the data section. The file is memory-mapped; tensors are zero-copy views into it.
//
// The constructor validates the whole header, so a view handed out later is always in
// bounds: a malformed file throws lt::Error at open, naming the file, the tensor and field,
// what was wrong and what to do.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/tensor_view.h"
#include "io/mapped_file.h"

namespace lt {

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  size_t begin = 0;  // byte offsets within the data section (after the header)
  size_t end = 0;
};

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);

  const std::string& path() const { return file_.path(); }
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  // Throws lt::Error naming the file and tensor when `name` is absent.
  const SafetensorsEntry& entry(const std::string& name) const;
  // A view of the mapped bytes. They are read-only: writing through it faults. The view
  // lives as long as this object. Data may be unaligned for its dtype (the format only
  // guarantees 8-byte alignment when the writer sorted by dtype size, as ours does).
  TensorView tensor(const std::string& name) const;
  std::vector<std::string> names() const;  // sorted
  size_t size() const { return entries_.size(); }
  // The "__metadata__" object (empty when absent).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Byte offset of the data section within the file (8 + header length).
  size_t data_offset() const { return data_offset_; }

 private:
  MappedFile file_;
  size_t data_offset_ = 0;
  std::unordered_map<std::string, SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace lt
