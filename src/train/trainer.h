// `lazytrain train`: data, model, optimizer, the step loop, evaluation and checkpoints.
//
// A step runs the whole model in memory (layers/model_step.h), or, given a plan, through
// the streaming executor out of core with the lazy optimizer (train/streamed_training.h);
// the optimizer is the hybrid 8-bit AdamW (or fp32 AdamW, or SGD) with global-norm
// clipping and the non-finite guard (train/updater.h).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "train/train_config.h"

namespace lt {

class Communicator;

struct TrainSummary {
  int64_t steps = 0;
  double final_loss = 0;
  double eval_exact_match = -1;  // -1: no evaluation
  double tokens_per_s = 0;
  int64_t peak_compute_bytes = 0, peak_host_bytes = 0, peak_nvme_bytes = 0;
  int64_t peak_rss_bytes = 0;
  std::string checkpoint_dir;
  int world_size = 1;
  double collective_bytes_per_step = 0;  // rank 0's payload to the other ranks (data parallel)
  double collective_hidden_frac = 0;     // the share of rank 0's collective time under its compute
  int64_t optimizer_state_bytes = 0;     // the optimizer states rank 0 holds (its shard when sharded)
  nlohmann::json to_json() const;
};

// comm: the data-parallel world, null for one process. With N > 1 ranks, cfg.batch stays
// the global batch: each rank reads every global batch, runs its contiguous batch / N rows
// of each micro-batch, and the gradients are summed over ranks before every update (to the
// owner of each part when the optimizer is sharded, cfg.shard_optimizer); rank 0 alone
// prints, evaluates and writes metrics and checkpoints.
TrainSummary run_training(const TrainConfig& cfg, Communicator* comm = nullptr);

}  // namespace lt
