#include "memory/page_interior.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "core/error.h"

namespace lt {

PageSpan page_interior(void* data, size_t bytes) {
  static const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(data), end = begin + bytes;
  const uintptr_t first = (begin + page - 1) / page * page, last = end / page * page;
  if (last <= first) return {};
  return {reinterpret_cast<std::byte*>(first), static_cast<size_t>(last - first)};
}

PageSpan page_cover(void* data, size_t bytes) {
  static const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  if (bytes == 0) return {};
  const auto begin = reinterpret_cast<uintptr_t>(data), end = begin + bytes;
  const uintptr_t first = begin / page * page, last = (end + page - 1) / page * page;
  return {reinterpret_cast<std::byte*>(first), static_cast<size_t>(last - first)};
}

void release_pages(PageSpan span, const std::string& what) {
  if (span.bytes == 0) return;
  if (madvise(span.begin, span.bytes, MADV_DONTNEED) != 0)
    throw Error("could not give the host pages of " + what + " back to the kernel: " + std::strerror(errno),
                "madvise(MADV_DONTNEED)", "report this with your kernel version");
}

}  // namespace lt
