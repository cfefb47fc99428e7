// What the trainer (train/trainer.h) drives, one optimizer step at a time, whether the
// model trains whole in memory (train/in_memory_training.h) or streamed through the
// executor under a plan (train/streamed_training.h): the same interface for both, so that
// run_training never asks which, and so that what wraps a step (data parallelism) plugs
// in here.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/parameters.h"
#include "plan/plan.h"
#include "plan/plan_request.h"
#include "train/replanner.h"
#include "train/train_config.h"
#include "train/updater.h"

namespace lt {

class Communicator;

class StepEngine {
 public:
  virtual ~StepEngine() = default;

  struct Outcome {
    double loss = 0;
    UpdateResult update;  // this step's decision (a lazy engine applies it in the next step, or at flush())
    std::vector<ReplanEvent> replans;  // re-plans started or finished at this step
  };
  // One optimizer step over cfg.grad_accum micro-batches (ids and labels hold all of
  // them, batch * seq_len tokens each); predicted: the tokens that carry a loss in all;
  // doc_start: null, or as many entries as ids (per micro-batch, the documents' starts).
  virtual Outcome step(const int32_t* ids, const int32_t* labels, int64_t predicted, int64_t step,
                       const int32_t* doc_start = nullptr) = 0;
  // Applies an update still pending, so that the parameters are the trained ones (before
  // an evaluation or a checkpoint).
  virtual void flush() = 0;
  // The optimizer's state in a checkpoint directory.
  virtual void save_optimizer(const std::string& dir) = 0;
  virtual void load_optimizer(const std::string& dir) = 0;
  // After the last step: a re-plan still in flight, concluded (not switched to).
  virtual std::vector<ReplanEvent> finish(int64_t last_step) = 0;

  // Bytes the run holds in each tier now (they change when a re-plan switches plans).
  struct Memory {
    int64_t compute = 0, host = 0, nvme = 0;
  };
  virtual Memory memory() const = 0;
  // Lines for the run's header: how it trains (its plan) and where its memory goes.
  virtual std::vector<std::string> describe() const = 0;
  // A line comparing the measured time per micro-batch with the plan's prediction; empty
  // when the engine predicts none.
  virtual std::string step_time_note(double measured_s) const = 0;
  // Data parallel: the seconds of collective calls that ran while this rank computed
  // (gradient sums under backward, weights under forward), so far.
  virtual double overlapped_collective_seconds() const { return 0; }
};

// The engine for this run: streamed under `plan` when there is one (`request`: what made
// it, for re-plans), else the whole model in memory. `updater` must have been built with
// the plan's paged layers; params, grads and updater must outlive the engine.
// comm: the data-parallel world (null: one process); with more than one rank, cfg.batch is
// this rank's share of each micro-batch, and the engine sums the ranks' gradients.
std::unique_ptr<StepEngine> make_step_engine(const TrainConfig& cfg, const std::optional<Plan>& plan,
                                             std::optional<PlanRequest> request, ModelParameters& params,
                                             ModelParameters& grads, Updater& updater,
                                             Communicator* comm = nullptr);

}  // namespace lt
