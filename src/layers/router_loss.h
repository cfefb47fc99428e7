// The routers' load-balancing loss of a MoE model's step, as transformers adds it to the
// loss when the config sets output_router_logits: loss = cross-entropy +
// router_aux_loss_coef * aux, aux = load_balancing_loss_func over every sparse layer's
// router logits (layers/moe_mlp.h: moe_aux_*). aux couples the layers (its expert counts
// and probability sums run over all of them before their product), so a step first adds
// each sparse layer's forward into one total and only then, in backward, gives each layer
// its share of the gradient through the block's context (BlockContext::router_loss).
// Recomputed forwards are not added again: they reproduce the same bits.
//
// No attention mask: lazytrain's rows are packed without padding, and transformers' loss
// counts every token when the mask is absent. With gradient accumulation the term is
// weighted like the micro-batch's cross-entropy: grad_scale * predicted tokens (1 when the
// micro-batch is the whole batch).
#pragma once

#include <optional>

#include "layers/decoder_block.h"

namespace lt {

class RouterLoss {
 public:
  explicit RouterLoss(const ModelConfig& c);
  // Whether the model adds the term (a MoE config with output_router_logits).
  bool active() const { return stats_.has_value(); }

  // Before a step's forward.
  void begin_step();
  // After layer `layer`'s forward (not a recompute), with what it saved.
  void add_layer(const ModelConfig& c, int64_t layer, const BlockSaved& saved, const BlockShape& shape);
  // After the forward: coef * aux, the step's term of the loss (0 when not active), and the
  // gradient every sparse layer's backward reads, weighted by grad_scale * predicted.
  double finish_forward(float grad_scale, int64_t predicted);
  // For a layer's backward context: null when not active.
  const RouterLossGrad* grad() const { return active() ? &grad_ : nullptr; }

 private:
  double coef_ = 0;
  std::optional<MoeAuxStats> stats_;
  RouterLossGrad grad_;
};

}  // namespace lt
