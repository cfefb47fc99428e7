// The host tier's buffers: 4096-aligned (so any of them can go to O_DIRECT I/O, and to
// cudaHostRegister, which pins whole pages), with the bytes in use and their peak counted
// per pool, so that the measured host peak can be set beside the plan's.
//
// Policy, stated here as PyTorch's caching allocator does at its top:
//  - every buffer is its own block of the pool's memory, rounded up to its alignment; there
//    is no caching: the executor allocates its host buffers once at setup (memory is
//    planned), so reuse would buy nothing and would hide leaks from the accounting;
//  - contents start zeroed, for deterministic files and bitwise-reproducible runs; the
//    rounded-up tail too, since it is what an O_DIRECT write of an unaligned tail sends;
//  - a pool may have a capacity (the plan's host budget); going over it is an lt::Error
//    naming the pool, the request and the shortfall. 0 means unlimited.
//  - accounting counts capacity (the rounded size), the memory actually held.
//
// Where the bytes come from: a host buffer type (memory/buffer_type.h), plain host RAM
// by default. A GPU's backend gives its pinned host memory (cudaHostAlloc, or
// aligned_alloc then cudaHostRegister), so that cudaMemcpyAsync from these buffers is
// truly asynchronous. No CUDA is used here.
//
// Thread-safe: buffers may be freed from copy threads. The pool must outlive its buffers
// (asserted).
#pragma once

#include <cstddef>
#include <mutex>
#include <span>
#include <string>

#include "memory/buffer_type.h"

namespace lt {

class HostPool;

// An owning host buffer from a HostPool (RAII, move-only).
class HostBuffer {
 public:
  HostBuffer() = default;
  HostBuffer(HostBuffer&& o) noexcept;
  HostBuffer& operator=(HostBuffer&& o) noexcept;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  ~HostBuffer();

  std::byte* data() const { return data_; }
  size_t size() const { return size_; }          // what was asked for
  size_t capacity() const { return capacity_; }  // size rounded up to the pool memory's alignment
  std::span<std::byte> span() const { return {data_, size_}; }
  template <typename T>
  T* as() const { return reinterpret_cast<T*>(data_); }
  explicit operator bool() const { return data_ != nullptr; }
  void reset();

 private:
  friend class HostPool;
  HostBuffer(HostPool* pool, std::byte* data, size_t size, size_t capacity)
      : pool_(pool), data_(data), size_(size), capacity_(capacity) {}
  HostPool* pool_ = nullptr;
  std::byte* data_ = nullptr;
  size_t size_ = 0, capacity_ = 0;
};

class HostPool {
 public:
  static constexpr size_t kAlignment = 4096;

  // `memory` must be host memory whose alignment is a multiple of kAlignment (asserted).
  explicit HostPool(std::string name, size_t capacity_bytes = 0, BufferType& memory = host_memory());
  ~HostPool();
  HostPool(const HostPool&) = delete;
  HostPool& operator=(const HostPool&) = delete;

  // `tag` names the request in errors (e.g. "a.12.cpu"). bytes == 0 gives an empty buffer.
  HostBuffer allocate(size_t bytes, const std::string& tag);

  const std::string& name() const { return name_; }
  size_t capacity_bytes() const { return capacity_; }
  size_t bytes_in_use() const;
  size_t peak_bytes() const;
  size_t buffers_in_use() const;

 private:
  friend class HostBuffer;
  void give_back(std::byte* data, size_t capacity) noexcept;

  std::string name_;
  size_t capacity_ = 0;
  BufferType& memory_;
  mutable std::mutex mu_;
  size_t in_use_ = 0, peak_ = 0, buffers_ = 0;
};

}  // namespace lt
