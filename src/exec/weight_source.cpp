#include "exec/weight_source.h"

#include <algorithm>
#include <optional>

#include "core/error.h"
#include "exec/bf16_weight_slot.h"

namespace lt {

namespace {

// The compute tier is host memory: every weight is read where it lies.
class HostViews final : public WeightSource {
 public:
  HostViews(const ModelConfig& c, const StreamSchedule& s, Precision p) : c_(c), s_(s), precision_(p) {}

  void embed(float* x0, const int32_t* ids) override {
    embed_forward(host_kernels_, x0, ids, params_->embedding(), s_.tokens, c_);
  }
  void load_layer(ArenaTensor, int) override {}
  void load_head() override {}
  void load_head_chunk(int64_t) override {}

  std::pair<BlockTensors, BlockTensorsBf16> layer(ArenaTensor, int j) override {
    const BlockTensors w = params_->block(j);
    BlockTensorsBf16 b;
    if (precision_ == Precision::BF16)  // views of the step's bf16 compute copy
      for (const BlockField& f : block_fields(c_, j))
        if (f.matrix) b.*bf16_member(f.member) = layer_copy(j) + (w.*f.member - params_->block_base(j));
    return {w, b};
  }
  const float* final_norm() override { return params_->final_norm(); }
  HeadWeights lm_head() override { return rows(0); }
  HeadWeights head_chunk(int64_t i) override { return rows((i % s_.head_chunks) * s_.head_chunk_rows); }

 private:
  // The lm_head from row v0 on: fp32, and under bf16 also the compute copy's rows.
  HeadWeights rows(int64_t v0) const {
    const int64_t offset = params_->lm_head() - params_->data() + v0 * c_.hidden_size;
    return {params_->data() + offset, precision_ == Precision::BF16 ? copy_ + offset : nullptr};
  }

  const ModelConfig& c_;
  const StreamSchedule& s_;
  Precision precision_;
};

// A separate compute tier: weights are copied into their planned arena slots, fp32 or
// (bf16 compute) the bf16 matrices with fp32 norms and biases.
class ComputeSlots final : public WeightSource {
 public:
  ComputeSlots(const ModelConfig& c, const StreamSchedule& s, Backend& backend, const LiveArena& arena, HostPool& host,
               Precision p)
      : c_(c), s_(s), backend_(backend), arena_(arena) {
    if (p == Precision::BF16) bf16_slot_.emplace(c);
    in0_ = host.allocate(static_cast<size_t>(s.tokens * s.hidden) * sizeof(float), "in.0");
  }

  void embed(float* x0, const int32_t* ids) override {  // on the host, then over the link (the plan's in.0)
    embed_forward(host_kernels_, in0_.as<float>(), ids, params_->embedding(), s_.tokens, c_);
    backend_.copy_to_compute(x0, in0_.data(), static_cast<size_t>(s_.tokens * s_.hidden) * sizeof(float));
    backend_.wait(Backend::Stream::Compute, backend_.record(Backend::Stream::H2D));
  }

  void load_layer(ArenaTensor slot, int j) override {
    if (bf16_slot_)
      bf16_slot_->copy_in(backend_, reinterpret_cast<std::byte*>(arena_(slot, j)), *params_, layer_copy(j), j);
    else
      backend_.copy_to_compute(arena_(slot, j), params_->block_base(j),
                               static_cast<size_t>(block_numel(c_, j)) * sizeof(float));
  }

  void load_head() override {
    const int64_t C = c_.hidden_size, V = c_.vocab_size;
    backend_.copy_to_compute(arena_(ArenaTensor::NormWeights), params_->final_norm(), C * sizeof(float));
    if (bf16_slot_)
      backend_.copy_to_compute(arena_(ArenaTensor::LmHead), copy_ + (params_->lm_head() - params_->data()),
                               V * C * sizeof(bf16));
    else
      backend_.copy_to_compute(arena_(ArenaTensor::LmHead), params_->lm_head(), V * C * sizeof(float));
  }

  void load_head_chunk(int64_t i) override {
    const int64_t n = s_.head_chunks, R = s_.head_chunk_rows, V = c_.vocab_size, C = c_.hidden_size;
    LT_ASSERT(i >= 0 && i < 2 * n, "head chunk load " + std::to_string(i));
    const int64_t v0 = (i % n) * R, rows = std::min(R, V - v0);
    void* slot = arena_(ArenaTensor::LmHead, static_cast<int>(i % 2));
    if (i == 0) backend_.copy_to_compute(arena_(ArenaTensor::NormWeights), params_->final_norm(), C * sizeof(float));
    if (bf16_slot_)  // bf16 compute: the chunk of the bf16 compute copy
      backend_.copy_to_compute(slot, copy_ + (params_->lm_head() - params_->data()) + v0 * C,
                               static_cast<size_t>(rows * C) * sizeof(bf16));
    else
      backend_.copy_to_compute(slot, params_->lm_head() + v0 * C, static_cast<size_t>(rows * C) * sizeof(float));
    chunk_loaded_[i % 2] = backend_.record(Backend::Stream::H2D);
  }

  std::pair<BlockTensors, BlockTensorsBf16> layer(ArenaTensor slot, int j) override {
    if (bf16_slot_) return bf16_slot_->bind(reinterpret_cast<std::byte*>(arena_(slot, j)), j);
    return {bind_block_tensors(c_, j, arena_(slot, j)), BlockTensorsBf16{}};
  }

  const float* final_norm() override {
    if (s_.head_chunk_rows > 0) backend_.wait(Backend::Stream::Compute, chunk_loaded_[0]);  // it came with chunk 0
    return arena_(ArenaTensor::NormWeights);
  }
  HeadWeights lm_head() override { return slot(0); }
  HeadWeights head_chunk(int64_t i) override {
    backend_.wait(Backend::Stream::Compute, chunk_loaded_[i % 2]);
    return slot(static_cast<int>(i % 2));
  }

 private:
  HeadWeights slot(int k) const {
    float* p = arena_(ArenaTensor::LmHead, k);
    if (bf16_slot_) return {nullptr, reinterpret_cast<const bf16*>(p)};
    return {p, nullptr};
  }

  const ModelConfig& c_;
  const StreamSchedule& s_;
  Backend& backend_;
  const LiveArena& arena_;
  std::optional<Bf16WeightSlot> bf16_slot_;
  HostBuffer in0_;
  Backend::Event chunk_loaded_[2];  // a streamed head's last load into each chunk slot
};

}  // namespace

ComputeTierWeights compute_tier_weights(const Plan& plan, const Backend& backend, Precision precision) {
  ComputeTierWeights cw;
  if (backend.host_is_compute()) return cw;
  const bool bf16_compute = precision == Precision::BF16;
  const size_t block = static_cast<size_t>(max_block_numel(plan.model));  // a slot holds any layer
  cw.on_compute = true;
  cw.layer_bytes = bf16_compute ? Bf16WeightSlot(plan.model).bytes() : block * sizeof(float);
  cw.layer_grad_bytes = block * sizeof(float);
  // One lm_head slot: the whole matrix, or one chunk of a streamed head.
  const int64_t rows = plan.head_chunk_rows > 0 ? plan.head_chunk_rows : plan.model.vocab_size;
  cw.lm_head_bytes = static_cast<size_t>(rows * plan.model.hidden_size) * (bf16_compute ? sizeof(bf16) : sizeof(float));
  cw.lm_head_grad_bytes = static_cast<size_t>(rows * plan.model.hidden_size) * sizeof(float);
  cw.norm_bytes = cw.norm_grad_bytes = static_cast<size_t>(plan.model.hidden_size) * sizeof(float);
  return cw;
}

std::unique_ptr<WeightSource> make_weight_source(const ModelConfig& c, const StreamSchedule& s, Backend& backend,
                                                 const LiveArena& arena, HostPool& host, Precision precision) {
  if (backend.host_is_compute()) return std::make_unique<HostViews>(c, s, precision);
  return std::make_unique<ComputeSlots>(c, s, backend, arena, host, precision);
}

}  // namespace lt
