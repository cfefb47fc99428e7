// Learning-rate schedule: linear warmup, then cosine decay to a floor. The trainer asks
// for the rate of each 1-based step and passes it to AdamW::step_tensor.
//
// Steps 1..W rise linearly to the peak at step W (step 1 is peak/W, not 0 as in
// transformers' get_cosine_schedule_with_warmup, whose first step does not train); the
// cosine then falls from the peak at step max(W, 1) to the floor at the last step. Without
// warmup the first step trains at the peak. A warmup longer than the run rises for the
// whole run (a short trial run with the default warmup), never reaching the peak.
#pragma once

#include <cstdint>

namespace lt {

struct LrSchedule {
  double peak = 1e-5;        // rate at the end of warmup
  double min_ratio = 0.1;    // floor as a fraction of peak
  int64_t warmup_steps = 0;  // steps 1..warmup rise linearly to peak (step warmup == peak)
  int64_t total_steps = 0;   // the cosine reaches the floor at this step; 0 = constant after warmup

  // Throws lt::Error when the fields are inconsistent.
  void validate() const;
  double at(int64_t step) const;
};

}  // namespace lt
