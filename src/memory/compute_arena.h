// The compute tier's arena: one block of a fixed byte budget, carved at the offsets the
// plan chose. Memory is planned, not discovered (shared/DESIGN.md): the arena never picks
// an offset itself; it hands out the planned range for a name.
//
// Lifetimes are in plan windows: an allocation is live from the start of window
// `first_window` through the end of window `last_window` (inclusive), which matches the
// plan's "alloc at window start, free at window end" barrier semantics.
//
// Two error tiers:
//  - at setup, a plan that does not fit the budget, has overlapping live ranges, or is
//    malformed is an lt::Error (plans are files a user can pass in);
//  - at run time, acquiring something the plan did not foresee (unknown name, outside its
//    lifetime, twice) or keeping something past its lifetime is an executor bug: LT_ASSERT.
//
// Thread-safe: acquire/release may come from compute and copy threads.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/tensor_view.h"
#include "memory/buffer_type.h"

namespace lt {

struct ArenaAllocation {
  std::string name;
  size_t offset = 0;
  size_t bytes = 0;
  int first_window = 0;  // live from the start of this window ...
  int last_window = 0;   // ... through the end of this one
  // Placed right after another allocation, to read as one tensor with it (ArenaRequest::
  // follows): at that one's end, which need not be aligned.
  bool follows = false;
};

class ComputeArena {
 public:
  // 256: what cudaMalloc guarantees, and a multiple of every vector width on the CPU.
  static constexpr size_t kDefaultAlignment = 256;

  // Owns budget_bytes of host memory (memory/buffer_type.h: host_memory()). The block is
  // 4096-aligned, so a range whose offset is a multiple of 4096 can go straight to the
  // NVMe store.
  ComputeArena(std::string tier, size_t budget_bytes, std::vector<ArenaAllocation> plan,
               size_t alignment = kDefaultAlignment);
  // Does not own `base` (the streaming executor: a block of its backend's compute memory).
  ComputeArena(std::string tier, std::byte* base, size_t budget_bytes,
               std::vector<ArenaAllocation> plan, size_t alignment = kDefaultAlignment);
  ~ComputeArena();
  ComputeArena(const ComputeArena&) = delete;
  ComputeArena& operator=(const ComputeArena&) = delete;

  // Enters window w (non-decreasing). Asserts nothing live has outlived its lifetime.
  void begin_window(int w);
  int current_window() const;
  // Back to before window 0, nothing live: the next pass over the plan (the executor's
  // next step, also after a step that failed half-way). The peak measured so far stays.
  void reset();

  // The planned range of `name` for the current window. Asserts it is planned for this
  // window and not already live.
  std::span<std::byte> acquire(const std::string& name);
  // The same by the allocation's index in the plan (the executor's hot path: no name
  // lookup). Asserts the current window is within its lifetime and it is not live.
  std::span<std::byte> acquire(size_t index);
  void release(size_t index);  // asserts allocation `index` is live
  // The same range as a typed view; asserts the shape fits the planned bytes.
  TensorView acquire_view(const std::string& name, DType dtype, const Shape& shape);
  // Asserts `name` is live.
  void release(const std::string& name);
  bool is_live(const std::string& name) const;

  const std::string& tier() const { return tier_; }
  std::byte* base() const { return base_; }
  size_t budget_bytes() const { return budget_; }
  // From the plan: the largest sum of bytes live in any window, and the highest byte used.
  size_t planned_peak_bytes() const { return planned_peak_; }
  size_t planned_extent_bytes() const { return planned_extent_; }
  // Measured: bytes acquired and not yet released, now and at most.
  size_t live_bytes() const;
  size_t peak_live_bytes() const;

 private:
  void validate_and_index(size_t alignment);
  // The index of `name`'s allocation planned for `window`, or -1.
  long find_planned(const std::string& name, int window) const;
  long find_live(const std::string& name) const;  // under mu_; -1 when not live
  std::span<std::byte> acquire_locked(size_t index);
  void release_locked(size_t index);

  std::string tier_;
  size_t budget_ = 0;
  std::vector<ArenaAllocation> plan_;
  std::unordered_map<std::string, std::vector<size_t>> by_name_;  // indices into plan_
  Buffer owned_;
  std::byte* base_ = nullptr;
  size_t planned_peak_ = 0, planned_extent_ = 0;

  mutable std::mutex mu_;
  int window_ = -1;
  std::vector<size_t> live_;   // indices into plan_, in acquisition order
  std::vector<char> is_live_;  // per allocation of plan_
  size_t live_bytes_ = 0, peak_live_bytes_ = 0;
};

// "12345 bytes (12.1 KiB)": sizes in messages, readable and exact.
std::string format_bytes(size_t bytes);

}  // namespace lt
