// The trainer's optimizer steps with the whole model in memory (layers/model_step.h): every
// layer keeps its internals, gradients of all micro-batches accumulate, and the update is
// applied at once after each step. Its squared gradient norm is summed in the streaming
// executor's order (ordered_grad_sq_sum), so that both engines clip alike, to the bit.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "exec/streaming_executor.h"
#include "layers/model_step.h"
#include "train/rank_exchange.h"
#include "train/step_engine.h"

namespace lt {

class InMemoryTraining final : public StepEngine {
 public:
  // comm: null for one process; with more ranks, each runs its rows of every micro-batch
  // (cfg.batch of them) and the gradients and losses are summed over ranks before the
  // update, in rank order (dist/communicator.h), so every rank applies the same update.
  // With a sharded optimizer (the updater's), each rank receives the sum of its part's
  // gradients only, updates that part, and the ranks exchange the updated weights
  // (under the backward and the next forward, where MPI allows a background thread).
  InMemoryTraining(const TrainConfig& cfg, ModelParameters& params, ModelParameters& grads, Updater& updater,
                   Communicator* comm = nullptr);

  Outcome step(const int32_t* ids, const int32_t* labels, int64_t predicted, int64_t step,
               const int32_t* doc_start = nullptr) override;
  // Waits for the updated weights still arriving from other ranks (sharded; else nothing
  // is ever pending).
  void flush() override;
  // Sharded (Updater::sharded), every rank calls it at once; rank 0 writes (dir is not
  // used on the others).
  void save_optimizer(const std::string& dir) override { updater_.save(dir); }
  void load_optimizer(const std::string& dir) override { updater_.load(dir); }
  std::vector<ReplanEvent> finish(int64_t) override { return {}; }
  Memory memory() const override;
  std::vector<std::string> describe() const override;
  std::string step_time_note(double) const override { return {}; }
  double overlapped_collective_seconds() const override;

 private:
  const TrainConfig& cfg_;
  ModelParameters& params_;
  ModelParameters& grads_;
  Updater& updater_;
  Communicator* comm_;
  Precision precision_;
  std::unique_ptr<ModelStep> model_step_;
  std::unique_ptr<RankExchange> exchange_;  // data parallelism: the sums and weights of the ranks
  static UpdateTarget target_of(const ModelPart& p);
};

}  // namespace lt
