#include "memory/buffer_type.h"

#include <cstdlib>

namespace lt {

Buffer::Buffer(BufferType& type, size_t bytes) {
  if (bytes == 0) return;
  const size_t rounded = type.round_up(bytes);
  data_ = type.allocate(rounded);
  if (!data_) return;
  type_ = &type;
  bytes_ = rounded;
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    reset();
    type_ = std::exchange(o.type_, nullptr);
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

void Buffer::reset() noexcept {
  if (data_) type_->deallocate(data_, bytes_);
  type_ = nullptr;
  data_ = nullptr;
  bytes_ = 0;
}

namespace {

class HostMemory final : public BufferType {
 public:
  const char* name() const override { return "host"; }
  size_t alignment() const override { return 4096; }
  bool is_host() const override { return true; }
  // aligned_alloc needs a size that is a multiple of the alignment: allocate()'s contract.
  std::byte* allocate(size_t bytes) override { return static_cast<std::byte*>(std::aligned_alloc(4096, bytes)); }
  void deallocate(std::byte* block, size_t) noexcept override { std::free(block); }
};

}  // namespace

BufferType& host_memory() {
  static HostMemory type;
  return type;
}

}  // namespace lt
