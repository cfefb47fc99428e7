// The trainer's optimizer steps through the streaming executor (exec/streaming_executor.h)
// under a plan from `lazytrain plan`: the compute tier holds only what the plan keeps,
// checkpoints go to host memory or NVMe or are recomputed, and the optimizer is lazy.
//
// Lazy optimizer: step N's update is decided when step N's gradients (and their norm)
// are known, and applied target by target inside step N+1, just before the executor
// reads each target's weights; flush() applies a pending update at once, before an
// evaluation or a checkpoint, so both see updated weights and a resumed run has nothing
// pending. The result is bitwise that of the in-memory trainer, in fp32 and in bf16 (the
// cpu backend reads the bf16 compute copy, which the update keeps current).
//
// Paged optimizer states (the plan's nvme_state_layers) live in the executor's NVMe
// slots; saving or loading the optimizer pages them through one layer's staging buffer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "exec/backend.h"
#include "exec/compute_copy.h"
#include "exec/streaming_executor.h"
#include "model/parameters.h"
#include "plan/plan.h"
#include "train/train_config.h"
#include "train/updater.h"

namespace lt {

// The directory of the NVMe tier: cfg.offload_dir, or the system temporary directory.
std::string offload_dir_of(const TrainConfig& cfg);

// lt::Error unless the plan is feasible, made for this model, batch and seq_len, and its
// NVMe bytes fit in the offload directory's free space.
void check_plan_fits(const Plan& plan, const ModelConfig& model, const TrainConfig& cfg, const std::string& where);

// The MILP plan of this run for cfg.compute_budget_gb on the cfg.hardware profile, counted
// in the cpu and emu executors' fp32 element sizes and timed at the profile's bf16 rate
// for bf16 runs (when it has one); written to output_dir/plan.json.
// lt::Error when no plan fits, with the short budget and the largest batch that fits.
Plan plan_this_run(const TrainConfig& cfg, const ModelConfig& model);

class StreamedTraining {
 public:
  // `updater` must have been built with the plan's nvme_state_layers as its paged layers.
  StreamedTraining(const TrainConfig& cfg, const Plan& plan, ModelParameters& params, ModelParameters& grads,
                   Updater& updater);

  struct Outcome {
    double loss = 0;
    UpdateResult update;  // this step's decision (applied in the next step, or by flush())
  };
  // One optimizer step over cfg.grad_accum micro-batches (ids and labels hold all of
  // them, batch * seq_len tokens each); predicted: the tokens that carry a loss in all;
  // doc_start: null, or as many entries as ids (StepOptions::doc_start per micro-batch).
  Outcome step(const int32_t* ids, const int32_t* labels, int64_t predicted, int64_t step,
               const int32_t* doc_start = nullptr);
  void flush();

  void save_optimizer(const std::string& dir);
  void load_optimizer(const std::string& dir);

  size_t compute_bytes() const { return executor_->arena_bytes(); }
  size_t host_activation_bytes() const { return executor_->host_peak_bytes(); }
  size_t nvme_bytes() const { return executor_->nvme_bytes(); }
  const Plan& plan() const { return executor_->plan(); }

 private:
  void update_target(const UpdateTarget& t, std::span<std::byte> paged);

  const TrainConfig& cfg_;
  ModelParameters& params_;
  ModelParameters& grads_;
  Updater& updater_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<StreamingExecutor> executor_;
  ComputeCopy copy_;  // bf16 mirror of the parameters (empty under fp32)
  UpdateResult pending_;
  bool has_pending_ = false;
};

}  // namespace lt
