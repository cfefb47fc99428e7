// Device memory and the device itself, for the CUDA kernels' callers and tests. No CUDA types
// here, so plain C++ includes it; the functions throw std::runtime_error on a CUDA error
// (what failed, and CUDA's message).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace lt::cuda {

// Number of CUDA devices (0 when there is no driver or no GPU).
int device_count();
// "NVIDIA H200 (sm_90, 139.8 GiB)" for the current device (the one this thread's kernels
// run on: 0 unless cudaSetDevice chose another), or why there is none.
std::string device_description();
// Waits for all work on the current device.
void device_synchronize();

// One cudaMalloc'd region, freed on destruction. Copies are synchronous (tests, set-up).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }

  void upload(const void* src, size_t bytes, size_t offset = 0);
  void download(void* dst, size_t bytes, size_t offset = 0) const;
  void zero();

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// A device copy of a host vector, and back.
template <typename T>
DeviceBuffer to_device(const std::vector<T>& v) {
  DeviceBuffer b(v.size() * sizeof(T));
  b.upload(v.data(), v.size() * sizeof(T));
  return b;
}
template <typename T>
std::vector<T> to_host(const DeviceBuffer& b, size_t n) {
  std::vector<T> v(n);
  b.download(v.data(), n * sizeof(T));
  return v;
}

}  // namespace lt::cuda
