#include "memory/arena_layout.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace lt {

std::vector<ArenaAllocation> lay_out_arena(const std::vector<ArenaRequest>& requests, size_t alignment) {
  LT_ASSERT(alignment > 0 && (alignment & (alignment - 1)) == 0, "alignment must be a power of two");
  std::vector<size_t> order(requests.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    const ArenaRequest &a = requests[x], &b = requests[y];
    if (a.bytes != b.bytes) return a.bytes > b.bytes;
    if (a.first_window != b.first_window) return a.first_window < b.first_window;
    return a.name < b.name;
  });

  std::vector<ArenaAllocation> out(requests.size());
  std::vector<size_t> placed;  // indices into out, in placement order
  std::vector<std::pair<size_t, size_t>> busy;  // [begin, end) of colliding ranges
  for (size_t i : order) {
    const ArenaRequest& r = requests[i];
    LT_ASSERT(r.first_window <= r.last_window, "request '" + r.name + "' has an empty lifetime");
    busy.clear();
    for (size_t p : placed) {
      const ArenaAllocation& a = out[p];
      if (a.bytes > 0 && a.first_window <= r.last_window && r.first_window <= a.last_window)
        busy.emplace_back(a.offset, a.offset + a.bytes);
    }
    std::sort(busy.begin(), busy.end());
    // Lowest aligned offset whose [offset, offset + bytes) misses every busy range.
    size_t offset = 0;
    for (const auto& [b, e] : busy) {
      if (offset + r.bytes <= b) break;
      if (e > offset) offset = (e + alignment - 1) / alignment * alignment;
    }
    out[i] = {r.name, offset, r.bytes, r.first_window, r.last_window};
    placed.push_back(i);
  }
  return out;
}

size_t arena_extent(const std::vector<ArenaAllocation>& allocations) {
  size_t end = 0;
  for (const ArenaAllocation& a : allocations) end = std::max(end, a.offset + a.bytes);
  return end;
}

}  // namespace lt
