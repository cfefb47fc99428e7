#include "layers/router_loss.h"

namespace lt {

RouterLoss::RouterLoss(const ModelConfig& c) {
  if (!c.has_moe() || !c.moe.output_router_logits) return;
  coef_ = c.moe.router_aux_loss_coef;
  stats_.emplace(c.moe.num_experts);
}

void RouterLoss::begin_step() {
  if (active()) stats_.emplace(static_cast<int64_t>(stats_->choices.size()));
}

void RouterLoss::add_layer(const ModelConfig& c, int64_t layer, const BlockSaved& saved, const BlockShape& shape) {
  if (!active() || !c.layer_is_sparse(layer)) return;
  moe_aux_accumulate(*stats_, block_moe_saved(saved), /*mask=*/nullptr, shape.moe);
}

double RouterLoss::finish_forward(float grad_scale, int64_t predicted) {
  if (!active()) return 0;
  grad_.totals = &*stats_;
  grad_.scale = static_cast<float>(coef_ * static_cast<double>(grad_scale) * static_cast<double>(predicted));
  return coef_ * moe_aux_loss(*stats_);
}

}  // namespace lt
