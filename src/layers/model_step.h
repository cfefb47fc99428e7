// The whole-model training step with everything in memory: embed, decoder blocks,
// final norm, fused head + cross-entropy, and the backward of all of it, giving a
// gradient for every parameter. The streaming executor does the same math with the
// layers and checkpoints moved as a plan says; this is the reference it must match.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/aligned_buffer.h"
#include "kernels/cpu/matmul.h"
#include "layers/compute_copy.h"
#include "layers/decoder_block.h"
#include "layers/step_batch.h"
#include "layers/router_loss.h"
#include "model/config.h"
#include "model/layer_specs.h"
#include "model/parameters.h"

namespace lt {

struct StepResult {
  // Mean cross-entropy over the predicted tokens, plus the routers' load-balancing term
  // where the model adds one (router_loss).
  double loss = 0;
  int64_t predicted_tokens = 0;   // labels that were not -100 after the shift
  double router_loss = 0;         // router_aux_loss_coef * aux (layers/router_loss.h), or 0
};

// Positions that predict a token: labels[b*seq + s + 1] != -100 for s + 1 < seq.
int64_t count_predicted_tokens(const int32_t* labels, int64_t batch, int64_t seq);

// A part of the model, as the step's hooks name it: the embedding (with a tied lm_head),
// decoder layer `layer`, or the head (the final norm, and lm_head when untied).
struct ModelPart {
  enum class Kind { Embedding, Layer, Head } kind = Kind::Layer;
  int64_t layer = -1;
};

class ModelStep {
 public:
  ModelStep(const ModelConfig& c, int64_t batch, int64_t seq, Precision precision);

  // Rounds the matmul weights to the bf16 compute copy. Call after the parameters
  // change (Precision::BF16 only; a no-op for F32).
  void refresh_compute_copy(const ModelParameters& params);

  // input_ids, labels: [batch*seq]. labels are Hugging Face style: unshifted, -100 for
  // "no loss"; position s predicts labels[s+1]. Gradients of the mean loss are
  // accumulated (+=) into grads. `recompute` gives each layer's option (empty: keep all
  // internals); the result does not depend on it, bit for bit.
  // grad_scale > 0 replaces the 1/predicted_tokens factor, so that gradient
  // accumulation can weight every token of all micro-batches equally.
  // doc_start: [batch*seq] or null. Given, each row holds packed documents (where each
  // token's document starts: layers/decoder_block.h document_positions); a token then
  // attends only within its document and RoPE counts positions from the document's
  // start, so each document trains as if it were a row of its own. Null: each row is one
  // sequence at positions 0..seq-1.
  StepResult forward_backward(ModelParameters& params, ModelParameters& grads,
                              const int32_t* input_ids, const int32_t* labels,
                              const std::vector<RecomputeOption>& recompute = {},
                              float grad_scale = 0.0f, const int32_t* doc_start = nullptr);

  // Hooks, called on the calling thread; empty: no calls. weights_needed: before
  // forward_backward or forward_logits first reads a part's weights, in the order
  // embedding, layer 0 ... L-1, head (so a part's weights may still be arriving until
  // then). gradient_finished: as forward_backward finishes a part's gradient, in the order
  // head, layer L-1 ... 0, embedding; from then on the call does not touch that gradient
  // (so it may be summed over ranks meanwhile).
  void on_weights_needed(std::function<void(const ModelPart&)> hook) { weights_needed_ = std::move(hook); }
  void on_gradient_finished(std::function<void(const ModelPart&)> hook) { gradient_finished_ = std::move(hook); }

  // The bf16 compute copy, laid out like the parameter block (numel() elements), so an
  // optimizer can write it in its update pass instead of refresh_compute_copy(). Null
  // for Precision::F32.
  bf16* compute_copy(const ModelParameters& params);

  // Forward only: logits [batch*seq, vocab] (for tests, evaluation and generation);
  // doc_start as in forward_backward.
  void forward_logits(float* logits, ModelParameters& params, const int32_t* input_ids,
                      const int32_t* doc_start = nullptr);

  // Bytes this step holds for activations: boundaries, saved tensors, scratch.
  int64_t activation_bytes() const;

  int64_t batch() const { return batch_; }
  int64_t seq() const { return seq_; }

 private:
  // Runs embed + all blocks, leaving boundary l in boundary(l). Layers whose option is
  // KeepInternals keep their saved tensors in saved_[l].
  void forward_blocks(ModelParameters& params, const int32_t* input_ids,
                      const std::vector<RecomputeOption>& recompute);
  float* boundary(int64_t l) { return boundaries_.data() + l * tokens_ * config_.hidden_size; }
  BlockTensorsBf16 block_bf16(const ModelParameters& params, int64_t layer) const;

  ModelConfig config_;
  int64_t batch_, seq_, tokens_;
  Precision precision_;
  BlockContext ctx_;
  AlignedBuffer<float> rope_cos_, rope_sin_;
  StepDocuments documents_;  // this call's, when given (ctx_ points into them)
  ComputeCopy compute_copy_;
  AlignedBuffer<float> boundaries_;         // [L+1, T, C]
  std::vector<AlignedBuffer<float>> saved_; // per layer; empty when recomputed
  AlignedBuffer<float> recompute_saved_;    // one block's saved tensors, rebuilt in backward
  AlignedBuffer<float> final_norm_out_, final_norm_rstd_, d_hidden_, d_boundary_[2];
  BlockWorkspace workspace_;
  RouterLoss router_loss_;
  std::function<void(const ModelPart&)> weights_needed_, gradient_finished_;
  void weights_needed(ModelPart::Kind kind, int64_t layer = -1) {
    if (weights_needed_) weights_needed_({kind, layer});
  }
  void gradient_finished(ModelPart::Kind kind, int64_t layer = -1) {
    if (gradient_finished_) gradient_finished_({kind, layer});
  }
};

}  // namespace lt
