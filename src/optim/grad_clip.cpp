#include "optim/grad_clip.h"

#include <algorithm>
#include <cmath>

namespace lt {

ClipDecision clip_decision(double sum_sq, double max_norm) {
  ClipDecision d;
  d.global_norm = std::sqrt(sum_sq);
  d.finite = std::isfinite(sum_sq) && sum_sq >= 0;
  if (!d.finite) {
    d.clip_factor = 0.f;  // never used: the step is skipped
    return d;
  }
  if (max_norm > 0) d.clip_factor = static_cast<float>(std::min(1.0, max_norm / (d.global_norm + 1e-6)));
  return d;
}

}  // namespace lt
