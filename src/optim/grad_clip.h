// Exact global-norm clipping without a pass of its own.
//
// The caller sums every gradient's squared norm while the gradients are produced (in
// float64, so that no finite gradient overflows the sum), and passes that sum here once per
// step, before any parameter changes. The clip factor then goes into each tensor's fused
// update as a scalar.
//
// Non-finite gradients: any NaN or Inf element makes the sum NaN or Inf, so this check sees
// it without looking at the gradients again. The policy is then to skip the whole step
// for all tensors (no parameter, m or v changes; the step counter is not advanced) and to
// report the event; the trainer aborts after several in a row (REFERENCE.md 1 uses three).
// The fused kernels keep a second, block-local guard (adamw_kernels.h) for callers that
// step a tensor anyway.
#pragma once

namespace lt {

struct ClipDecision {
  bool finite = true;        // false: skip this step for every tensor
  double global_norm = 0.0;  // sqrt(sum of squares); NaN/Inf when !finite
  float clip_factor = 1.0f;  // min(1, max_norm / (global_norm + 1e-6)); 1 when max_norm <= 0
};

// sum_sq: the summed squared gradient norms of all tensors. max_norm <= 0 disables clipping.
ClipDecision clip_decision(double sum_sq, double max_norm);

}  // namespace lt
