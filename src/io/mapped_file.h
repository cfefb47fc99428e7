// A read-only memory map of a whole file (RAII). The OS pages the file in on demand, so
// opening a multi-gigabyte checkpoint costs nothing until its bytes are touched.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace lt {

class MappedFile {
 public:
  // Throws lt::Error naming `path` when the file cannot be opened, stat'ed or mapped.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;

  // The pages are mapped PROT_READ: writing through data() is a segmentation fault.
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;  // nullptr for an empty file (mmap rejects length 0)
  size_t size_ = 0;
};

}  // namespace lt
