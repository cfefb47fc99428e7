// An owning, 64-byte aligned, zero-initialised array (RAII). The basic host buffer.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace lt {

template <typename T>
class AlignedBuffer {
 public:
  static constexpr size_t kAlign = 64;
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t n) { resize(n); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  AlignedBuffer(AlignedBuffer&& o) noexcept : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    return *this;
  }
  ~AlignedBuffer() { std::free(data_); }

  // Discards the old contents; the new ones are zero.
  void resize(size_t n) {
    std::free(data_);
    data_ = nullptr;
    size_ = n;
    if (n == 0) return;
    size_t bytes = (n * sizeof(T) + kAlign - 1) / kAlign * kAlign;
    data_ = static_cast<T*>(std::aligned_alloc(kAlign, bytes));
    if (!data_) throw std::bad_alloc();
    std::memset(static_cast<void*>(data_), 0, bytes);
  }
  void zero() {
    if (data_) std::memset(static_cast<void*>(data_), 0, size_ * sizeof(T));
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace lt
