#include "train/in_memory_training.h"

#include <algorithm>
#include <cstdio>

#include "dist/communicator.h"
#include "exec/streaming_executor.h"
#include "kernels/kernel_table.h"
#include "memory/compute_arena.h"

namespace lt {

InMemoryTraining::InMemoryTraining(const TrainConfig& cfg, ModelParameters& params, ModelParameters& grads,
                                   Updater& updater, Communicator* comm)
    : cfg_(cfg),
      params_(params),
      grads_(grads),
      updater_(updater),
      comm_(comm && comm->size() > 1 ? comm : nullptr),
      precision_(cfg.precision == "bf16" ? Precision::BF16 : Precision::F32),
      model_step_(std::make_unique<ModelStep>(params.config(), cfg.batch, cfg.seq_len, precision_)) {
  model_step_->refresh_compute_copy(params);
  if (!comm_) return;
  exchange_ = std::make_unique<RankExchange>(*comm_, updater_, params_, grads_, model_step_->compute_copy(params_));
  model_step_->on_weights_needed([this](const ModelPart& p) { exchange_->weights_needed(target_of(p)); });
}

UpdateTarget InMemoryTraining::target_of(const ModelPart& p) {
  switch (p.kind) {
    case ModelPart::Kind::Embedding: return {UpdateTarget::Kind::Embed, -1};
    case ModelPart::Kind::Layer: return {UpdateTarget::Kind::Layer, static_cast<int>(p.layer)};
    case ModelPart::Kind::Head: break;
  }
  return {UpdateTarget::Kind::Head, -1};
}

void InMemoryTraining::flush() {
  if (exchange_) exchange_->all_weights_in();
}

double InMemoryTraining::overlapped_collective_seconds() const {
  return exchange_ ? exchange_->overlapped_seconds() : 0.0;
}

StepEngine::Outcome InMemoryTraining::step(const int32_t* ids, const int32_t* labels, int64_t predicted, int64_t step,
                                           const int32_t* doc_start) {
  const int64_t tokens = cfg_.batch * cfg_.seq_len;  // one micro-batch's
  grads_.zero();
  double loss_sum = 0;
  bool reducing = false;  // the gradient sums run in the background
  for (int64_t a = 0; a < cfg_.grad_accum && predicted > 0; ++a) {
    // The last micro-batch's backward finishes each part's gradient: its sum can start.
    if (exchange_ && exchange_->overlaps() && a == cfg_.grad_accum - 1) {
      model_step_->on_gradient_finished([this](const ModelPart& p) { exchange_->gradient_final(target_of(p)); });
      reducing = true;
    }
    const StepResult r = model_step_->forward_backward(params_, grads_, ids + a * tokens, labels + a * tokens, {},
                                                       1.0f / predicted, doc_start ? doc_start + a * tokens : nullptr);
    loss_sum += r.loss * r.predicted_tokens;
  }
  model_step_->on_gradient_finished({});
  flush();  // the last step's weights are all in (forward waited for each; without one, now)
  Outcome out;
  double sq = 0;
  bf16* compute_copy = model_step_->compute_copy(params_);
  if (exchange_) {
    // Each rank gets the sum of the gradients (sharded: of its part's only), the loss and
    // the squared norm (rank_exchange.h), and applies the update (sharded: to its part).
    const RankSums sums = exchange_->sum(loss_sum, reducing);
    loss_sum = sums.loss_sum;
    sq = sums.grad_sq_sum;
  } else {
    // The streaming executor's summation order, so both engines clip alike to the bit.
    sq = ordered_grad_sq_sum(grads_);
  }
  out.update = updater_.apply(params_, grads_, sq, compute_copy, step);
  // The updated parts to every rank; the next forward (or a flush) waits for each as it
  // gets there.
  if (out.update.applied && updater_.sharded()) exchange_->send_weights();
  out.loss = predicted > 0 ? loss_sum / predicted : 0.0;
  return out;
}

StepEngine::Memory InMemoryTraining::memory() const {
  const int64_t n = params_.numel();
  Memory m;
  m.compute = model_step_->activation_bytes() + (precision_ == Precision::BF16 ? 2 * n : 0);
  m.host = 8 * n + static_cast<int64_t>(updater_.resident_state_bytes());  // this rank's states
  return m;
}

std::vector<std::string> InMemoryTraining::describe() const {
  const Memory m = memory();
  char plan[256], mem[512];
  std::snprintf(plan, sizeof plan,
                "plan: cpu backend, whole model in memory, every layer keeps its internals (keep-all); "
                "batch %lld x seq %lld x accumulation %lld; %s matmuls",
                static_cast<long long>(cfg_.batch), static_cast<long long>(cfg_.seq_len),
                static_cast<long long>(cfg_.grad_accum), cfg_.precision.c_str());
  const std::string states =
      format_bytes(updater_.resident_state_bytes()) +
      (updater_.sharded() ? " (this rank's part of " + format_bytes(updater_.state_bytes()) + ")" : "");
  std::snprintf(mem, sizeof mem,
                "memory: compute %s (activations %s%s), host %s (fp32 weights and gradients %s, %s optimizer states "
                "%s), nvme 0",
                format_bytes(m.compute).c_str(), format_bytes(model_step_->activation_bytes()).c_str(),
                precision_ == Precision::BF16 ? ", bf16 weight copy" : "", format_bytes(m.host).c_str(),
                format_bytes(8 * params_.numel()).c_str(), cfg_.optimizer.c_str(), states.c_str());
  return {plan, mem};
}

}  // namespace lt
