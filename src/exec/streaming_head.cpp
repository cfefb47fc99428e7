// The streaming executor's HEAD window (streaming_executor.h): final norm, the lm_head
// with the cross-entropy, and their backward, with the lm_head held whole or streamed.
//
// Streamed (plan/plan.h, head_chunk_rows > 0) on a separate compute tier: 2n loads of
// chunks through two slots, load i bringing chunk i % n into slot i % 2 (load 0, with the
// final norm, is F{L-1}'s prefetch). Loads 0..n-1 feed the forward pass (every token's
// logsumexp over all rows), loads n..2n-1 the backward pass (each chunk's gradient rows,
// into gradient slot c % 2, drained to the host while the next chunk computes, and dx).
// Load i+1 is queued before load i computes, into the slot load i-1 used, whose compute is
// done; a gradient slot is refilled once the copy out of it two chunks earlier has landed.
// The window's weight prefetches for later windows queue behind the last chunk.
// On the cpu backend the chunks are views of the host's weights and the gradient rows are
// summed in place.
//
// Bits: the streamed and the whole head run the cross-entropy's same token chunks and
// vocabulary sub-chunks in the same order (kernels/cpu/cross_entropy.h), so the loss and
// gradients equal ModelStep's; the head's squared gradient norm is summed over the whole
// host lm_head once every chunk has landed, as ordered_grad_sq_sum sums it.
#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "exec/streaming_executor.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/sum_of_squares.h"

namespace lt {

namespace {

bool tied(ModelParameters& p) { return p.lm_head() == p.embedding(); }

}  // namespace

void StreamingExecutor::load_head_chunk(int64_t i, ModelParameters& params, const bf16* compute_copy) {
  const int64_t n = sched_.head_chunks, R = sched_.head_chunk_rows, V = config_.vocab_size, C = C_;
  LT_ASSERT(i >= 0 && i < 2 * n, "head chunk load " + std::to_string(i));
  const int64_t v0 = (i % n) * R, rows = std::min(R, V - v0);
  void* slot = buf(ArenaTensor::LmHead, static_cast<int>(i % 2));
  if (i == 0) backend_.copy_to_compute(buf(ArenaTensor::NormWeights), params.final_norm(), C * sizeof(float));
  if (bf16_slot_)  // bf16 compute: the chunk of the bf16 compute copy
    backend_.copy_to_compute(slot, compute_copy + (params.lm_head() - params.data()) + v0 * C,
                             static_cast<size_t>(rows * C) * sizeof(bf16));
  else
    backend_.copy_to_compute(slot, params.lm_head() + v0 * C, static_cast<size_t>(rows * C) * sizeof(float));
  head_slot_fence_[i % 2] = backend_.to_compute_fence();
}

double StreamingExecutor::run_head(int w, ModelParameters& params, ModelParameters& grads, const int32_t* targets,
                                   float grad_scale, const StepOptions& o, double& sq) {
  const ModelConfig& c = config_;
  const int64_t T = T_, C = C_, V = c.vocab_size;
  const int L = sched_.L;
  float* x = buf(ArenaTensor::Boundary, L);
  float* norm_out = buf(ArenaTensor::HeadNormOut);
  float* rstd = buf(ArenaTensor::HeadRstd);
  float* d_hidden = buf(ArenaTensor::HeadDHidden);
  const float eps = static_cast<float>(c.rms_norm_eps);
  const float norm_offset = static_cast<float>(c.norm_weight_offset);  // Gemma's (1 + w)
  const bool host = backend_.host_is_compute();
  const float* norm_w = host ? params.final_norm() : buf(ArenaTensor::NormWeights);
  float* norm_g = host ? grads.final_norm() : buf(ArenaTensor::NormGradients);
  const bf16* host_bf16 =  // the lm_head in the step's bf16 compute copy (cpu backend views)
      ctx_.precision == Precision::BF16 && host ? o.compute_copy + (params.lm_head() - params.data()) : nullptr;
  if (!host) std::memset(norm_g, 0, C * sizeof(float));  // gradient slots start at zero
  double loss_sum = 0;

  if (sched_.head_chunk_rows == 0) {
    // The lm_head: host views on the cpu backend, else the slot (bf16 under bf16 compute).
    const float* head_w = host ? params.lm_head() : bf16_slot_ ? nullptr : buf(ArenaTensor::LmHead);
    const bf16* head_bf16 = host ? host_bf16
                            : ctx_.precision == Precision::BF16 ? reinterpret_cast<const bf16*>(buf(ArenaTensor::LmHead))
                                                                : nullptr;
    float* head_g = host ? grads.lm_head() : buf(ArenaTensor::LmHeadGradients);
    if (!host) std::memset(head_g, 0, V * C * sizeof(float));
    norm_forward(norm_out, rstd, x, norm_w, T, C, eps, norm_offset);
    loss_sum = head_cross_entropy(d_hidden, head_g, norm_out, head_w, head_bf16, targets, T, C, V, grad_scale,
                                  ctx_.precision);
    norm_backward(buf(ArenaTensor::Dx, 0), norm_g, d_hidden, x, norm_w, rstd, T, C, norm_offset);
    // Norm order: final norm, then an untied head (a tied one counts as the embedding).
    if (host) {
      sq += sum_of_squares_f64(grads.final_norm(), C);
      if (!tied(params)) sq += sum_of_squares_f64(grads.lm_head(), V * C);
    } else {
      land_gradient(grads.final_norm(), norm_g, C, true, o);
      land_gradient(grads.lm_head(), head_g, V * C, !tied(params), o);
    }
    return loss_sum;
  }

  const int64_t n = sched_.head_chunks, R = sched_.head_chunk_rows;
  if (!host) backend_.wait_to_compute(head_slot_fence_[0]);  // the final norm came with chunk 0
  norm_forward(norm_out, rstd, x, norm_w, T, C, eps, norm_offset);
  StreamedHeadCrossEntropy ce(norm_out, targets, T, C, V, grad_scale, ctx_.precision);
  uint64_t grad_fence[2] = {0, 0};  // the copy out of each gradient slot
  for (int64_t i = 0; i < 2 * n; ++i) {
    const int64_t chunk = i % n, v0 = chunk * R, rows = std::min(R, V - v0);
    const float* w32 = nullptr;
    const bf16* w16 = nullptr;
    if (host) {
      w32 = params.lm_head() + v0 * C;
      w16 = host_bf16 ? host_bf16 + v0 * C : nullptr;
    } else {
      if (i + 1 < 2 * n) load_head_chunk(i + 1, params, o.compute_copy);
      if (i + 2 == 2 * n) load_weights(w, params, o.compute_copy, kPrefetches);  // behind the last chunk
      backend_.wait_to_compute(head_slot_fence_[i % 2]);
      void* slot = buf(ArenaTensor::LmHead, static_cast<int>(i % 2));
      if (bf16_slot_) w16 = static_cast<const bf16*>(slot);
      else w32 = static_cast<const float*>(slot);
    }
    if (i < n) {
      ce.forward(w32, w16, v0, rows);
      continue;
    }
    if (host) {  // the gradient rows are summed in place
      ce.backward(d_hidden, grads.lm_head() + v0 * C, w32, w16, v0, rows);
      continue;
    }
    float* g = buf(ArenaTensor::LmHeadGradients, static_cast<int>(chunk % 2));
    if (chunk >= 2) backend_.wait_to_host(grad_fence[chunk % 2]);  // chunk - 2's copy out of this slot
    std::memset(g, 0, static_cast<size_t>(rows * C) * sizeof(float));
    ce.backward(d_hidden, g, w32, w16, v0, rows);
    land_gradient(grads.lm_head() + v0 * C, g, rows * C, /*count=*/false, o);
    grad_fence[chunk % 2] = landings_.back().fence;
  }
  loss_sum = ce.loss();
  norm_backward(buf(ArenaTensor::Dx, 0), norm_g, d_hidden, x, norm_w, rstd, T, C, norm_offset);
  if (host) {
    sq += sum_of_squares_f64(grads.final_norm(), C);
    if (!tied(params)) sq += sum_of_squares_f64(grads.lm_head(), V * C);
  } else {
    // Norm order as for the whole head: the final norm, then the lm_head over its whole
    // host range once the chunk copies before it have landed.
    land_gradient(grads.final_norm(), norm_g, C, true, o);
    landings_.push_back({grads.lm_head(), V * C, !tied(params), now(), backend_.to_host_fence(), /*copied=*/false});
  }
  return loss_sum;
}

}  // namespace lt
