// The Backend defaults for a compute tier in host memory (exec/backend.h).
#include "exec/backend.h"

#include <cstring>

namespace lt {

void Backend::fill_compute(void* dst, int byte, size_t bytes) {
  if (bytes) std::memset(dst, byte, bytes);
}

void Backend::copy_within_compute(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}

}  // namespace lt
