// The optimizer step of the trainer: global-norm clipping from the summed squared
// gradient norm, the non-finite guard, and the update itself (hybrid 8-bit AdamW, fp32
// AdamW, or plain SGD), writing the bf16 compute copy in the same pass.
//
// Non-finite policy (shared/REFERENCE.md 1): a step whose gradients hold a NaN or Inf is
// skipped whole (no parameter or state changes), reported, and the run aborts with an
// lt::Error after kMaxNonFiniteInARow such steps in a row.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "model/parameters.h"
#include "optim/adamw.h"
#include "optim/lr_schedule.h"
#include "train/train_config.h"

namespace lt {

inline constexpr int kMaxNonFiniteInARow = 3;

struct UpdateResult {
  bool applied = false;     // false: skipped for non-finite gradients
  double grad_norm = 0;     // before clipping
  double lr = 0;
  float clip_factor = 1.0f;
};

class Updater {
 public:
  Updater(const TrainConfig& cfg, const ModelParameters& params);

  // grad_sq_sum: the sum of squares of all gradients (float64). compute_copy: the bf16
  // mirror of the parameter block to refresh (null for fp32 compute). step is 1-based.
  UpdateResult apply(ModelParameters& params, const ModelParameters& grads, double grad_sq_sum,
                     bf16* compute_copy, int64_t step);

  int64_t optimizer_steps() const { return optimizer_steps_; }
  int non_finite_in_a_row() const { return non_finite_in_a_row_; }
  int64_t non_finite_total() const { return non_finite_total_; }
  size_t state_bytes() const { return adamw_ ? adamw_->state_bytes() : 0; }

  // Optimizer state and counters, bit-exact (optimizer.bin + the counters in JSON).
  void save(const std::string& dir) const;
  void load(const std::string& dir);

 private:
  TrainConfig cfg_;
  LrSchedule schedule_;
  std::unique_ptr<AdamW> adamw_;  // null for sgd
  std::vector<std::string> names_;
  int64_t optimizer_steps_ = 0;
  int non_finite_in_a_row_ = 0;
  int64_t non_finite_total_ = 0;
};

// Sum of squares of n floats in float64, threaded in fixed chunks (deterministic).
double sum_of_squares(const float* x, int64_t n);

}  // namespace lt
