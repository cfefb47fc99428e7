#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"

namespace lt {

void LrSchedule::validate() const {
  if (!(peak >= 0) || !std::isfinite(peak)) throw Error("peak learning rate must be finite and >= 0", "lr schedule", "");
  if (!(min_ratio >= 0 && min_ratio <= 1)) throw Error("min_ratio must lie in [0, 1]", "lr schedule", "");
  if (warmup_steps < 0 || total_steps < 0) throw Error("step counts must be >= 0", "lr schedule", "");
}

double LrSchedule::at(int64_t step) const {
  if (warmup_steps > 0 && step <= warmup_steps) return peak * double(std::max<int64_t>(step, 0)) / warmup_steps;
  if (total_steps == 0) return peak;
  // The cosine starts at the last step that trains at the peak: the end of warmup, or step
  // 1 without warmup (so a run's first step uses the peak, as transformers' schedules do).
  const int64_t peak_step = std::max<int64_t>(warmup_steps, 1);
  const int64_t span = total_steps - peak_step;
  if (span <= 0) return step <= peak_step ? peak : peak * min_ratio;
  const double t = std::clamp(double(step - peak_step) / span, 0.0, 1.0);
  const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * t));
  return peak * (min_ratio + (1.0 - min_ratio) * cosine);
}

}  // namespace lt
