// The Backend defaults for a compute tier in host memory (exec/backend.h).
#include "exec/backend.h"

#include <cstdlib>
#include <cstring>

namespace lt {

Backend::ComputeMemory Backend::alloc_compute(size_t bytes, size_t alignment) {
  const size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  void* p = rounded > 0 ? std::aligned_alloc(alignment, rounded) : nullptr;
  return {static_cast<std::byte*>(p), [](std::byte* q) { std::free(q); }};
}

void Backend::fill_compute(void* dst, int byte, size_t bytes) {
  if (bytes) std::memset(dst, byte, bytes);
}

void Backend::copy_within_compute(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}

}  // namespace lt
