// Where a block of memory comes from, after ggml-backend's buffer types: a named kind of
// memory with its alignment, which says whether the host may touch its bytes, and which
// hands out and takes back blocks of it. A backend has two (exec/backend.h): the compute
// tier's (host RAM on cpu and emu, device memory on a GPU) and the host tier's (plain
// host RAM, or pinned host RAM on a GPU, so that copies from it run asynchronously).
// The compute arena and the host pool take their memory from these, never from the
// allocator directly.
//
// Thread-safe: blocks may be freed from copy threads.
#pragma once

#include <cstddef>
#include <utility>

namespace lt {

class BufferType {
 public:
  virtual ~BufferType() = default;
  virtual const char* name() const = 0;
  // Every block starts at a multiple of this.
  virtual size_t alignment() const = 0;
  // True when the host may read and write the bytes directly (memset, memcpy, O_DIRECT
  // I/O); false for device memory, which only the backend's copies and kernels reach.
  virtual bool is_host() const = 0;
  // `bytes` > 0 and a multiple of alignment(); null when the memory is not there, or an
  // lt::Error when the reason is worth telling (a driver that refuses to pin more).
  // Contents are unspecified.
  virtual std::byte* allocate(size_t bytes) = 0;
  // Gives back a block of `bytes` that allocate() returned.
  virtual void deallocate(std::byte* block, size_t bytes) noexcept = 0;

  size_t round_up(size_t bytes) const { return (bytes + alignment() - 1) / alignment() * alignment(); }
};

// One block of a buffer type, owned (RAII, move-only). Empty when nothing was asked for
// or the memory was not there.
class Buffer {
 public:
  Buffer() = default;
  // `bytes` rounded up to the type's alignment; 0 gives an empty buffer.
  Buffer(BufferType& type, size_t bytes);
  Buffer(Buffer&& o) noexcept
      : type_(std::exchange(o.type_, nullptr)), data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { reset(); }

  std::byte* data() const { return data_; }
  size_t bytes() const { return bytes_; }  // as allocated: rounded up to the alignment
  explicit operator bool() const { return data_ != nullptr; }
  void reset() noexcept;

 private:
  BufferType* type_ = nullptr;
  std::byte* data_ = nullptr;
  size_t bytes_ = 0;
};

// Plain host RAM, 4096-aligned (so any block can go to O_DIRECT I/O and to
// cudaHostRegister, which pins whole pages). One for the process; stateless.
BufferType& host_memory();

}  // namespace lt
