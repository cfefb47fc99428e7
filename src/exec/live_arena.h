// The compute-tier tensors live in the current plan window, by their typed ids
// (plan/stream_schedule.h): the streaming executor fills it as it acquires and releases
// arena ranges, and its weight source and gradient sink read their slots from it.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "plan/stream_schedule.h"

namespace lt {

class LiveArena {
 public:
  explicit LiveArena(const StreamSchedule& s) : s_(s), live_(s.arena.size(), nullptr) {}

  // Arena request k (StreamSchedule::arena) is at `p` now, or (null) no longer live.
  void set(int k, float* p) { live_[k] = p; }
  void clear() { std::fill(live_.begin(), live_.end(), nullptr); }

  // The tensor (tensor, index) of the current window; asserts the plan places it and
  // that it is live.
  float* operator()(ArenaTensor tensor, int index = 0) const {
    const int k = s_.arena_index(tensor, index);
    LT_ASSERT(k >= 0, "compute-tier tensor (kind " + std::to_string(static_cast<int>(tensor)) + ", index " +
                          std::to_string(index) + ") is not in the plan");
    LT_ASSERT(live_[k] != nullptr, "compute-tier tensor " + s_.arena[k].name + " used outside its planned lifetime");
    return live_[k];
  }

 private:
  const StreamSchedule& s_;
  std::vector<float*> live_;  // per arena request: its memory while live, else null
};

}  // namespace lt
