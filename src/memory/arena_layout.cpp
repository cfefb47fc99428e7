#include "memory/arena_layout.h"

#include <algorithm>
#include <cstdint>

#include "core/error.h"

namespace lt {
namespace {

// A request and those that follow it (transitively), placed as one unit: each member at
// its offset relative to the group's, a request's followers right after its bytes.
struct Group {
  std::vector<std::pair<size_t, size_t>> members;  // (request index, relative offset)
  size_t extent = 0;                               // the largest relative end
  int first_window = 0;
  std::string name;  // the head's, for a deterministic order
};

std::vector<Group> group_requests(const std::vector<ArenaRequest>& requests) {
  const size_t n = requests.size();
  std::vector<std::vector<size_t>> followers(n);
  for (size_t i = 0; i < n; ++i) {
    const int f = requests[i].follows;
    LT_ASSERT(f < static_cast<int>(n) && f != static_cast<int>(i), "request '" + requests[i].name + "' follows a bad index");
    if (f >= 0) followers[static_cast<size_t>(f)].push_back(i);
  }
  std::vector<Group> groups;
  std::vector<bool> seen(n, false);
  for (size_t head = 0; head < n; ++head) {
    if (requests[head].follows >= 0) continue;
    Group g;
    g.first_window = requests[head].first_window;
    g.name = requests[head].name;
    std::vector<std::pair<size_t, size_t>> todo{{head, 0}};
    while (!todo.empty()) {
      const auto [i, rel] = todo.back();
      todo.pop_back();
      seen[i] = true;
      g.members.emplace_back(i, rel);
      g.extent = std::max(g.extent, rel + requests[i].bytes);
      g.first_window = std::min(g.first_window, requests[i].first_window);
      for (size_t f : followers[i]) todo.emplace_back(f, rel + requests[i].bytes);
    }
    groups.push_back(std::move(g));
  }
  // Each request follows at most one other, so only a cycle is never reached from a head.
  for (size_t i = 0; i < n; ++i)
    LT_ASSERT(seen[i], "request '" + requests[i].name + "' is in a cycle of follows");
  return groups;
}

}  // namespace

std::vector<ArenaAllocation> lay_out_arena(const std::vector<ArenaRequest>& requests, size_t alignment) {
  LT_ASSERT(alignment > 0 && (alignment & (alignment - 1)) == 0, "alignment must be a power of two");
  for (const ArenaRequest& r : requests)
    LT_ASSERT(r.first_window <= r.last_window, "request '" + r.name + "' has an empty lifetime");
  std::vector<Group> groups = group_requests(requests);
  std::sort(groups.begin(), groups.end(), [](const Group& a, const Group& b) {
    if (a.extent != b.extent) return a.extent > b.extent;
    if (a.first_window != b.first_window) return a.first_window < b.first_window;
    return a.name < b.name;
  });

  std::vector<ArenaAllocation> out(requests.size());
  std::vector<size_t> placed;  // indices into out, in placement order
  // Group offsets that would make a member collide: (lo, hi) open, the member at
  // [base + rel, base + rel + bytes) meeting a placed [offset, offset + bytes).
  std::vector<std::pair<int64_t, int64_t>> busy;
  for (const Group& g : groups) {
    busy.clear();
    for (const auto& [i, rel] : g.members) {
      const ArenaRequest& r = requests[i];
      if (r.bytes == 0) continue;
      for (size_t p : placed) {
        const ArenaAllocation& a = out[p];
        if (a.bytes > 0 && a.first_window <= r.last_window && r.first_window <= a.last_window)
          busy.emplace_back(static_cast<int64_t>(a.offset) - static_cast<int64_t>(rel + r.bytes),
                            static_cast<int64_t>(a.offset + a.bytes) - static_cast<int64_t>(rel));
      }
    }
    for (size_t x = 0; x < g.members.size(); ++x)  // members placed together must not meet
      for (size_t y = x + 1; y < g.members.size(); ++y) {
        const auto [i, ri] = g.members[x];
        const auto [k, rk] = g.members[y];
        const ArenaRequest &a = requests[i], &b = requests[k];
        LT_ASSERT(a.bytes == 0 || b.bytes == 0 || ri + a.bytes <= rk || rk + b.bytes <= ri ||
                      a.last_window < b.first_window || b.last_window < a.first_window,
                  "requests '" + a.name + "' and '" + b.name + "' follow the same one while both are live");
      }
    std::sort(busy.begin(), busy.end());
    // The lowest aligned base that no busy range holds.
    int64_t base = 0;
    for (const auto& [lo, hi] : busy) {
      if (base <= lo) break;
      if (hi > base) base = (hi + static_cast<int64_t>(alignment) - 1) / static_cast<int64_t>(alignment) *
                            static_cast<int64_t>(alignment);
    }
    for (const auto& [i, rel] : g.members) {
      const ArenaRequest& r = requests[i];
      out[i] = {r.name, static_cast<size_t>(base) + rel, r.bytes, r.first_window, r.last_window, r.follows >= 0};
      placed.push_back(i);
    }
  }
  return out;
}

size_t arena_extent(const std::vector<ArenaAllocation>& allocations) {
  size_t end = 0;
  for (const ArenaAllocation& a : allocations) end = std::max(end, a.offset + a.bytes);
  return end;
}

}  // namespace lt
