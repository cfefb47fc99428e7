// memory/page_interior.h: a range's interior is its whole pages, its cover the pages it
// touches; both agree with a brute-force walk over every byte's page.
#include "memory/page_interior.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>

namespace lt {
namespace {

TEST(PageSpans, InteriorAndCoverMatchEveryBytesPage) {
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t base = 1000 * page;  // spans are arithmetic: nothing is touched
  for (uintptr_t start : {uintptr_t{0}, uintptr_t{1}, page - 4, page, page + 12}) {
    for (size_t bytes : {size_t{0}, size_t{4}, size_t(page - 1), size_t(page), size_t(page + 8), size_t(3 * page + 5)}) {
      auto* data = reinterpret_cast<void*>(base + start);
      uintptr_t lo = UINTPTR_MAX, hi = 0, in_lo = UINTPTR_MAX, in_hi = 0;
      for (uintptr_t a = base + start; a < base + start + bytes; ++a) {
        const uintptr_t p = a / page * page;
        lo = std::min(lo, p);
        hi = std::max(hi, p + page);
        if (p >= base + start && p + page <= base + start + bytes) {
          in_lo = std::min(in_lo, p);
          in_hi = std::max(in_hi, p + page);
        }
      }
      SCOPED_TRACE("start " + std::to_string(start) + ", bytes " + std::to_string(bytes));
      const PageSpan cover = page_cover(data, bytes), inside = page_interior(data, bytes);
      EXPECT_EQ(cover.bytes, bytes == 0 ? 0 : hi - lo);
      if (bytes > 0) {
        EXPECT_EQ(reinterpret_cast<uintptr_t>(cover.begin), lo);
      }
      EXPECT_EQ(inside.bytes, in_hi > in_lo ? in_hi - in_lo : 0);
      if (inside.bytes > 0) {
        EXPECT_EQ(reinterpret_cast<uintptr_t>(inside.begin), in_lo);
      }
    }
  }
}

}  // namespace
}  // namespace lt
