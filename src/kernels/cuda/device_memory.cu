#include "kernels/cuda/device_memory.h"

#include <stdexcept>
#include <string>
#include <utility>

#include "kernels/cuda/cuda_check.cuh"

namespace lt::cuda {

void throw_cuda_error(cudaError_t e, const char* call, const char* file, int line) {
  throw std::runtime_error(std::string("CUDA error in ") + call + " (" + file + ":" + std::to_string(line) +
                           "): " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

std::string device_description() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return std::string("no CUDA device: ") + cudaGetErrorString(e);
  }
  if (n == 0) return "no CUDA device: the driver reports none";
  int device = 0;
  LT_CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp p{};
  LT_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  char gib[32];
  std::snprintf(gib, sizeof gib, "%.1f", static_cast<double>(p.totalGlobalMem) / (1ull << 30));
  return std::string(p.name) + " (sm_" + std::to_string(p.major) + std::to_string(p.minor) + ", " + gib + " GiB)";
}

void device_synchronize() { LT_CUDA_CHECK(cudaDeviceSynchronize()); }

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes > 0) LT_CUDA_CHECK(cudaMalloc(&ptr_, bytes));
}
DeviceBuffer::~DeviceBuffer() { cudaFree(ptr_); }
DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    cudaFree(ptr_);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

static void check_range(size_t offset, size_t bytes, size_t have, const char* what) {
  if (offset + bytes > have)
    throw std::runtime_error(std::string("DeviceBuffer::") + what + ": " + std::to_string(bytes) + " bytes at " +
                             std::to_string(offset) + " past the buffer's " + std::to_string(have));
}

void DeviceBuffer::upload(const void* src, size_t bytes, size_t offset) {
  check_range(offset, bytes, bytes_, "upload");
  if (bytes) LT_CUDA_CHECK(cudaMemcpy(static_cast<char*>(ptr_) + offset, src, bytes, cudaMemcpyHostToDevice));
}
void DeviceBuffer::download(void* dst, size_t bytes, size_t offset) const {
  check_range(offset, bytes, bytes_, "download");
  if (bytes) LT_CUDA_CHECK(cudaMemcpy(dst, static_cast<char*>(ptr_) + offset, bytes, cudaMemcpyDeviceToHost));
}
void DeviceBuffer::zero() {
  if (bytes_) LT_CUDA_CHECK(cudaMemset(ptr_, 0, bytes_));
}

}  // namespace lt::cuda
