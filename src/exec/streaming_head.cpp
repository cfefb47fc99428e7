// The streaming executor's HEAD window (streaming_executor.h): final norm, the lm_head
// with the cross-entropy, and their backward, with the lm_head held whole or streamed.
//
// Streamed (plan/plan.h, head_chunk_rows > 0) on a separate compute tier: 2n loads of
// chunks through two slots, load i bringing chunk i % n into slot i % 2 (load 0, with the
// final norm, is F{L-1}'s prefetch). Loads 0..n-1 feed the forward pass (every token's
// logsumexp over all rows), loads n..2n-1 the backward pass (each chunk's gradient rows,
// into gradient slot c % 2, drained to the host while the next chunk computes, and dx).
// Load i+1 is queued before load i computes, into the slot load i-1 used, whose compute was
// issued before it (a copy starts after that: backend.h); a gradient slot is refilled once
// the copy out of it two chunks earlier has landed.
// The window's weight prefetches for later windows queue behind the last chunk.
// On the cpu backend the chunks are views of the host's weights and the gradient rows are
// summed in place.
//
// Bits: the streamed and the whole head run the cross-entropy's same token chunks and
// vocabulary sub-chunks in the same order (kernels/cpu/cross_entropy.h), so the loss and
// gradients equal ModelStep's; the head's squared gradient norm is summed over the whole
// host lm_head once every chunk has landed, as ordered_grad_sq_sum sums it.
#include <algorithm>
#include <memory>

#include "exec/streaming_executor.h"

namespace lt {

void StreamingExecutor::head(int w) {
  const StepTargets& batch = state_.batch;
  const double loss_sum = run_head(w, state_.targets, batch.grad_scale, state_.sq);
  state_.result.loss = batch.predicted > 0 ? loss_sum / static_cast<double>(batch.predicted) : 0.0;
  state_.result.router_loss = router_loss_.finish_forward(batch.grad_scale, batch.predicted);
  state_.result.loss += state_.result.router_loss;
  state_.d_out = buf(ArenaTensor::Dx, 0);  // the final norm's input gradient, for layer L-1's backward
  state_.d_in = buf(ArenaTensor::Dx, 1);
}

double StreamingExecutor::run_head(int w, const int32_t* targets, float grad_scale, double& sq) {
  const ModelConfig& c = config_;
  const int64_t T = T_, C = C_, V = c.vocab_size;
  float* x = buf(ArenaTensor::Boundary, sched_.L);
  float* norm_out = buf(ArenaTensor::HeadNormOut);
  float* rstd = buf(ArenaTensor::HeadRstd);
  float* d_hidden = buf(ArenaTensor::HeadDHidden);
  const float eps = static_cast<float>(c.rms_norm_eps);
  const float norm_offset = static_cast<float>(c.norm_weight_offset);  // Gemma's (1 + w)
  float* norm_g = grads_->final_norm();
  const float* norm_w = weights_->final_norm();
  const KernelTable& k = *ctx_.kernels;
  float* scratch = buf(ArenaTensor::Workspace, w);  // the cross-entropy's (ws.HEAD)

  if (sched_.head_chunk_rows == 0) {
    const HeadWeights head = weights_->lm_head();
    float* head_g = grads_->lm_head();
    k.rmsnorm_forward(norm_out, rstd, x, norm_w, T, C, eps, norm_offset);
    const double loss_sum = k.head_cross_entropy(d_hidden, head_g, norm_out, head.f32, head.b16, targets, T, C, V,
                                                 grad_scale, ctx_.precision, k.head_options, scratch);
    k.rmsnorm_backward(buf(ArenaTensor::Dx, 0), norm_g, d_hidden, x, norm_w, rstd, T, C, norm_offset);
    grads_->head_done(sq);
    return loss_sum;
  }

  const int64_t n = sched_.head_chunks, R = sched_.head_chunk_rows;
  k.rmsnorm_forward(norm_out, rstd, x, norm_w, T, C, eps, norm_offset);
  const std::unique_ptr<HeadCrossEntropyStream> ce =
      k.head_cross_entropy_stream(norm_out, targets, T, C, V, grad_scale, ctx_.precision, k.head_options, scratch);
  for (int64_t i = 0; i < 2 * n; ++i) {
    const int64_t chunk = i % n, v0 = chunk * R, rows = std::min(R, V - v0);
    if (i + 1 < 2 * n) weights_->load_head_chunk(i + 1);  // into the slot load i - 1 used
    if (i + 2 == 2 * n) load_weights(w, kPrefetches);     // behind the last chunk
    const HeadWeights head = weights_->head_chunk(i);
    if (i < n) {
      ce->forward(head.f32, head.b16, v0, rows);
      continue;
    }
    ce->backward(d_hidden, grads_->head_chunk(chunk), head.f32, head.b16, v0, rows);
    grads_->head_chunk_done(chunk);
  }
  k.rmsnorm_backward(buf(ArenaTensor::Dx, 0), norm_g, d_hidden, x, norm_w, rstd, T, C, norm_offset);
  grads_->head_done(sq);
  return ce->loss();
}

}  // namespace lt
