// Learning-rate schedule: linear warmup, then cosine decay to a floor. The trainer asks
// for the rate of each 1-based step and passes it to AdamW::step_tensor.
#pragma once

#include <cstdint>

namespace lt {

struct LrSchedule {
  double peak = 1e-5;        // rate at the end of warmup
  double min_ratio = 0.1;    // floor as a fraction of peak
  int64_t warmup_steps = 0;  // steps 1..warmup rise linearly to peak (step warmup == peak)
  int64_t total_steps = 0;   // cosine reaches the floor at this step; 0 = constant after warmup

  // Throws lt::Error when the fields are inconsistent.
  void validate() const;
  double at(int64_t step) const;
};

}  // namespace lt
