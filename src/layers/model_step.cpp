#include "layers/model_step.h"

#include "core/error.h"
#include "model/rope_frequencies.h"

namespace lt {

ModelStep::ModelStep(const ModelConfig& c, int64_t batch, int64_t seq, Precision precision)
    : config_(c),
      batch_(batch),
      seq_(seq),
      tokens_(batch * seq),
      precision_(precision),
      compute_copy_(precision),
      workspace_(c, batch, seq, cpu_kernel_table()),
      router_loss_(c) {
  if (batch <= 0 || seq <= 0)
    throw Error("batch and seq must be positive (got batch " + std::to_string(batch) + ", seq " +
                    std::to_string(seq) + ")",
                "model step", "pass a positive batch size and sequence length");
  if (seq > c.max_position_embeddings && c.max_position_embeddings > 0)
    throw Error("sequence length " + std::to_string(seq) + " exceeds max_position_embeddings " +
                    std::to_string(c.max_position_embeddings),
                "model config", "use a shorter sequence");
  workspace_.allocate();
  ctx_.shape = block_shape(c, batch, seq);
  set_rope_tables(ctx_, rope_cos_, rope_sin_, c, seq);
  ctx_.precision = precision;

  const int64_t TC = tokens_ * c.hidden_size;
  boundaries_.resize((c.num_layers + 1) * TC);
  saved_.resize(c.num_layers);
  final_norm_out_.resize(TC);
  final_norm_rstd_.resize(tokens_);
  d_hidden_.resize(TC);
  d_boundary_[0].resize(TC);
  d_boundary_[1].resize(TC);
}

int64_t count_predicted_tokens(const int32_t* labels, int64_t batch, int64_t seq) {
  int64_t n = 0;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = 1; s < seq; ++s) n += labels[b * seq + s] != kIgnoreIndex;
  return n;
}

int64_t ModelStep::activation_bytes() const {
  size_t n = boundaries_.size() + recompute_saved_.size() + final_norm_out_.size() +
             final_norm_rstd_.size() + d_hidden_.size() + d_boundary_[0].size() + d_boundary_[1].size();
  for (const auto& s : saved_) n += s.size();
  return static_cast<int64_t>(n * sizeof(float) + workspace_.bytes());
}

bf16* ModelStep::compute_copy(const ModelParameters& params) { return compute_copy_.data(params); }

void ModelStep::refresh_compute_copy(const ModelParameters& params) { compute_copy_.refresh(params); }

BlockTensorsBf16 ModelStep::block_bf16(const ModelParameters& params, int64_t layer) const {
  const BlockTensors w = const_cast<ModelParameters&>(params).block(layer);
  BlockTensorsBf16 b;
  for (const BlockField& f : block_fields(config_, layer))
    if (f.matrix) b.*bf16_member(f.member) = compute_copy_.of(params, w.*f.member);
  return b;
}

void ModelStep::forward_blocks(ModelParameters& params, const int32_t* input_ids,
                               const std::vector<RecomputeOption>& recompute) {
  const ModelConfig& c = config_;
  if (!recompute.empty() && static_cast<int64_t>(recompute.size()) != c.num_layers)
    throw Error("recompute options for " + std::to_string(recompute.size()) + " layers, model has " +
                    std::to_string(c.num_layers),
                "model step", "give one option per layer");
  weights_needed(ModelPart::Kind::Embedding);
  embed_forward(*ctx_.kernels, boundary(0), input_ids, params.embedding(), tokens_, c);
  router_loss_.begin_step();
  const size_t scratch_numel = static_cast<size_t>(max_block_saved_numel(c, batch_, seq_));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const bool keep = recompute.empty() || recompute[l] == RecomputeOption::KeepInternals;
    // A kept layer owns its saved tensors until backward; a recomputed one writes them
    // into the shared scratch (sized for the largest layer), where backward's rerun will
    // write them again.
    if (!keep) saved_[l] = AlignedBuffer<float>();
    AlignedBuffer<float>& store = keep ? saved_[l] : recompute_saved_;
    const size_t numel = keep ? static_cast<size_t>(block_saved_numel(c, l, batch_, seq_)) : scratch_numel;
    if (store.size() != numel) store.resize(numel);
    BlockSaved sv = bind_block_saved(c, l, batch_, seq_, store.data());
    weights_needed(ModelPart::Kind::Layer, l);
    block_forward(boundary(l + 1), sv, workspace_, boundary(l), params.block(l), block_bf16(params, l),
                  layer_context(ctx_, c, l));
    router_loss_.add_layer(c, l, sv, ctx_.shape);
  }
}

StepResult ModelStep::forward_backward(ModelParameters& params, ModelParameters& grads,
                                       const int32_t* input_ids, const int32_t* labels,
                                       const std::vector<RecomputeOption>& recompute,
                                       float grad_scale_override, const int32_t* doc_start) {
  const ModelConfig& c = config_;
  const int64_t T = tokens_, C = c.hidden_size, V = c.vocab_size, L = c.num_layers;
  documents_.bind(ctx_, doc_start, batch_, seq_);
  forward_blocks(params, input_ids, recompute);

  const StepTargets batch = step_targets(labels, batch_, seq_, V, grad_scale_override);
  StepResult result;
  result.predicted_tokens = batch.predicted;

  const KernelTable& k = *ctx_.kernels;
  const float eps = static_cast<float>(c.rms_norm_eps), norm_offset = static_cast<float>(c.norm_weight_offset);
  weights_needed(ModelPart::Kind::Head);
  k.rmsnorm_forward(final_norm_out_.data(), final_norm_rstd_.data(), boundary(L), params.final_norm(), T, C, eps,
                    norm_offset);
  const double loss_sum =
      k.head_cross_entropy(d_hidden_.data(), grads.lm_head(), final_norm_out_.data(), params.lm_head(),
                           compute_copy_.of(params, params.lm_head()), batch.targets.data(), T, C, V,
                           batch.grad_scale, precision_, k.head_options, /*workspace: its own*/ nullptr);
  result.loss = batch.predicted > 0 ? loss_sum / static_cast<double>(batch.predicted) : 0.0;
  result.router_loss = router_loss_.finish_forward(batch.grad_scale, batch.predicted);
  result.loss += result.router_loss;

  float* d_out = d_boundary_[0].data();
  float* d_in = d_boundary_[1].data();
  k.rmsnorm_backward(d_out, grads.final_norm(), d_hidden_.data(), boundary(L), params.final_norm(),
                     final_norm_rstd_.data(), T, C, norm_offset);
  gradient_finished(ModelPart::Kind::Head);
  for (int64_t l = L - 1; l >= 0; --l) {
    const bool keep = recompute.empty() || recompute[l] == RecomputeOption::KeepInternals;
    BlockTensors w = params.block(l);
    BlockTensorsBf16 wb = block_bf16(params, l);
    BlockContext ctx = layer_context(ctx_, c, l);
    ctx.router_loss = router_loss_.grad();
    BlockSaved sv;
    if (keep) {
      sv = bind_block_saved(c, l, batch_, seq_, saved_[l].data());
    } else {
      // Rerun the block from its input boundary; its output is discarded (boundary l+1
      // already holds it), so write it into the spare gradient buffer.
      sv = bind_block_saved(c, l, batch_, seq_, recompute_saved_.data());
      block_forward(d_in, sv, workspace_, boundary(l), w, wb, ctx);
    }
    BlockTensors gw = grads.block(l);
    block_backward(d_in, gw, workspace_, d_out, boundary(l), w, wb, sv, ctx);
    gradient_finished(ModelPart::Kind::Layer, l);
    std::swap(d_in, d_out);
  }
  embed_backward(k, grads.embedding(), input_ids, d_out, T, c);
  gradient_finished(ModelPart::Kind::Embedding);
  return result;
}

void ModelStep::forward_logits(float* logits, ModelParameters& params, const int32_t* input_ids,
                               const int32_t* doc_start) {
  const ModelConfig& c = config_;
  documents_.bind(ctx_, doc_start, batch_, seq_);
  forward_blocks(params, input_ids, std::vector<RecomputeOption>(c.num_layers, RecomputeOption::RecomputeFromInput));
  const KernelTable& k = *ctx_.kernels;
  weights_needed(ModelPart::Kind::Head);
  k.rmsnorm_forward(final_norm_out_.data(), final_norm_rstd_.data(), boundary(c.num_layers), params.final_norm(),
                    tokens_, c.hidden_size, static_cast<float>(c.rms_norm_eps),
                    static_cast<float>(c.norm_weight_offset));
  k.linear_forward(logits, final_norm_out_.data(), params.lm_head(), compute_copy_.of(params, params.lm_head()),
                   nullptr, tokens_, c.hidden_size, c.vocab_size, precision_);
}

}  // namespace lt
