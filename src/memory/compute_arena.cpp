#include "memory/compute_arena.h"

#include <algorithm>
#include <cstdio>
#include <new>

#include "core/error.h"

namespace lt {

std::string format_bytes(size_t bytes) {
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  std::string s = std::to_string(bytes) + " bytes";
  if (bytes < 1024) return s;
  double v = static_cast<double>(bytes);
  int u = -1;
  while (v >= 1024 && u < 3) v /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, " (%.1f %s)", v, units[u]);
  return s + buf;
}

namespace {

std::string describe(const ArenaAllocation& a) {
  return "'" + a.name + "' [" + std::to_string(a.offset) + ", " + std::to_string(a.offset + a.bytes) +
         ") in windows " + std::to_string(a.first_window) + ".." + std::to_string(a.last_window);
}

bool lifetimes_overlap(const ArenaAllocation& a, const ArenaAllocation& b) {
  return a.first_window <= b.last_window && b.first_window <= a.last_window;
}

}  // namespace

ComputeArena::ComputeArena(std::string tier, size_t budget_bytes, std::vector<ArenaAllocation> plan,
                           size_t alignment)
    : tier_(std::move(tier)), budget_(budget_bytes), plan_(std::move(plan)) {
  validate_and_index(alignment);  // before allocating: a bad plan should not cost memory
  if (budget_ > 0) {
    owned_ = Buffer(host_memory(), budget_);
    if (!owned_)
      throw Error("cannot allocate the compute arena of " + format_bytes(budget_), tier_,
                  "lower the compute budget or free host memory");
    base_ = owned_.data();
  }
}

ComputeArena::ComputeArena(std::string tier, std::byte* base, size_t budget_bytes,
                           std::vector<ArenaAllocation> plan, size_t alignment)
    : tier_(std::move(tier)), budget_(budget_bytes), plan_(std::move(plan)), base_(base) {
  LT_ASSERT(base_ != nullptr || budget_ == 0, "an external arena needs its memory");
  LT_ASSERT(alignment > 0 && (alignment & (alignment - 1)) == 0, "alignment must be a power of two");
  LT_ASSERT(reinterpret_cast<uintptr_t>(base_) % alignment == 0, "external arena base is misaligned");
  validate_and_index(alignment);
}

ComputeArena::~ComputeArena() = default;

void ComputeArena::validate_and_index(size_t alignment) {
  LT_ASSERT(alignment > 0 && (alignment & (alignment - 1)) == 0, "alignment must be a power of two");
  is_live_.assign(plan_.size(), 0);
  const std::string where = "compute arena '" + tier_ + "'";
  const std::string replan = "re-plan for this budget, or raise the compute budget";
  int min_w = 0, max_w = -1;
  for (size_t i = 0; i < plan_.size(); ++i) {
    const ArenaAllocation& a = plan_[i];
    if (a.first_window < 0 || a.first_window > a.last_window)
      throw Error("tensor '" + a.name + "' has an empty or negative lifetime (windows " +
                      std::to_string(a.first_window) + ".." + std::to_string(a.last_window) + ")",
                  where, "the plan is malformed; re-plan");
    if (!a.follows && a.offset % alignment != 0)
      throw Error("tensor '" + a.name + "' has offset " + std::to_string(a.offset) +
                      ", not a multiple of " + std::to_string(alignment),
                  where, "the plan is malformed; re-plan");
    if (a.offset > budget_ || a.bytes > budget_ - a.offset) {
      const size_t end = a.offset + a.bytes;
      throw Error("tensor " + describe(a) + " does not fit the budget of " + format_bytes(budget_) +
                      ": short by " + format_bytes(end - budget_),
                  where, replan);
    }
    by_name_[a.name].push_back(i);
    if (i == 0 || a.first_window < min_w) min_w = a.first_window;
    max_w = std::max(max_w, a.last_window);
    planned_extent_ = std::max(planned_extent_, a.offset + a.bytes);
  }

  // One name may be planned several times (a weight slot refilled later), never twice at once.
  for (auto& [name, idx] : by_name_) {
    std::sort(idx.begin(), idx.end(),
              [&](size_t x, size_t y) { return plan_[x].first_window < plan_[y].first_window; });
    for (size_t k = 1; k < idx.size(); ++k)
      if (lifetimes_overlap(plan_[idx[k - 1]], plan_[idx[k]]))
        throw Error("tensor '" + name + "' is planned twice with overlapping lifetimes: " +
                        describe(plan_[idx[k - 1]]) + " and " + describe(plan_[idx[k]]),
                    where, "the plan is malformed; re-plan");
  }

  // Overlap: sweep by offset; only ranges that start before this one ends can collide.
  std::vector<size_t> order(plan_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return plan_[x].offset < plan_[y].offset; });
  for (size_t i = 0; i < order.size(); ++i) {
    const ArenaAllocation& a = plan_[order[i]];
    if (a.bytes == 0) continue;
    for (size_t j = i + 1; j < order.size() && plan_[order[j]].offset < a.offset + a.bytes; ++j) {
      const ArenaAllocation& b = plan_[order[j]];
      if (b.bytes > 0 && lifetimes_overlap(a, b))
        throw Error("planned tensors overlap while both are live: " + describe(a) + " and " + describe(b),
                    where, "the plan is malformed; re-plan");
    }
  }

  // Planned peak: bytes live per window, by a difference array over the windows.
  if (max_w >= min_w) {
    std::vector<long long> delta(static_cast<size_t>(max_w - min_w) + 2, 0);
    for (const ArenaAllocation& a : plan_) {
      delta[a.first_window - min_w] += static_cast<long long>(a.bytes);
      delta[a.last_window - min_w + 1] -= static_cast<long long>(a.bytes);
    }
    long long live = 0;
    for (size_t w = 0; w + 1 < delta.size(); ++w) {
      live += delta[w];
      planned_peak_ = std::max(planned_peak_, static_cast<size_t>(live));
    }
  }
}

long ComputeArena::find_planned(const std::string& name, int window) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return -1;
  for (size_t i : it->second)
    if (plan_[i].first_window <= window && window <= plan_[i].last_window) return static_cast<long>(i);
  return -1;
}

long ComputeArena::find_live(const std::string& name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return -1;
  for (size_t i : it->second)
    if (is_live_[i]) return static_cast<long>(i);
  return -1;
}

void ComputeArena::begin_window(int w) {
  std::lock_guard lock(mu_);
  LT_ASSERT(w >= window_, "windows must not go backwards: " + std::to_string(w) + " after " +
                              std::to_string(window_));
  for (size_t i : live_)
    LT_ASSERT(plan_[i].last_window >= w, "'" + plan_[i].name + "' is still live in window " + std::to_string(w) +
                                             " but the plan frees it after window " +
                                             std::to_string(plan_[i].last_window));
  window_ = w;
}

void ComputeArena::reset() {
  std::lock_guard lock(mu_);
  live_.clear();
  is_live_.assign(plan_.size(), 0);
  live_bytes_ = 0;
  window_ = -1;
}

int ComputeArena::current_window() const {
  std::lock_guard lock(mu_);
  return window_;
}

std::span<std::byte> ComputeArena::acquire_locked(size_t i) {
  const ArenaAllocation& a = plan_[i];
  LT_ASSERT(!is_live_[i], "'" + a.name + "' acquired twice in " + tier_);
  is_live_[i] = 1;
  live_.push_back(i);
  live_bytes_ += a.bytes;
  peak_live_bytes_ = std::max(peak_live_bytes_, live_bytes_);
  return {base_ + a.offset, a.bytes};
}

void ComputeArena::release_locked(size_t i) {
  is_live_[i] = 0;
  live_.erase(std::find(live_.begin(), live_.end(), i));
  live_bytes_ -= plan_[i].bytes;
}

std::span<std::byte> ComputeArena::acquire(const std::string& name) {
  std::lock_guard lock(mu_);
  const long i = find_planned(name, window_);
  LT_ASSERT(i >= 0, "unplanned allocation: '" + name + "' is not in the plan of " + tier_ + " for window " +
                        std::to_string(window_));
  LT_ASSERT(find_live(name) < 0, "'" + name + "' acquired twice in " + tier_);
  return acquire_locked(static_cast<size_t>(i));
}

std::span<std::byte> ComputeArena::acquire(size_t index) {
  std::lock_guard lock(mu_);
  LT_ASSERT(index < plan_.size(), "unplanned allocation: index " + std::to_string(index) + " of " +
                                      std::to_string(plan_.size()) + " in " + tier_);
  const ArenaAllocation& a = plan_[index];
  LT_ASSERT(a.first_window <= window_ && window_ <= a.last_window,
            "unplanned allocation: '" + a.name + "' is not in the plan of " + tier_ + " for window " +
                std::to_string(window_));
  return acquire_locked(index);
}

TensorView ComputeArena::acquire_view(const std::string& name, DType dtype, const Shape& shape) {
  TensorView v{nullptr, dtype, shape};
  std::span<std::byte> s = acquire(name);
  LT_ASSERT(v.bytes() <= s.size(), "'" + name + "' " + shape_str(shape) + " needs " +
                                       std::to_string(v.bytes()) + " bytes, planned " +
                                       std::to_string(s.size()));
  v.data = s.data();
  return v;
}

void ComputeArena::release(const std::string& name) {
  std::lock_guard lock(mu_);
  const long i = find_live(name);
  LT_ASSERT(i >= 0, "release of '" + name + "', which is not live in " + tier_);
  release_locked(static_cast<size_t>(i));
}

void ComputeArena::release(size_t index) {
  std::lock_guard lock(mu_);
  LT_ASSERT(index < plan_.size() && is_live_[index],
            "release of allocation " + std::to_string(index) + ", which is not live in " + tier_);
  release_locked(index);
}

bool ComputeArena::is_live(const std::string& name) const {
  std::lock_guard lock(mu_);
  return find_live(name) >= 0;
}

size_t ComputeArena::live_bytes() const {
  std::lock_guard lock(mu_);
  return live_bytes_;
}

size_t ComputeArena::peak_live_bytes() const {
  std::lock_guard lock(mu_);
  return peak_live_bytes_;
}

}  // namespace lt
