// The step's small inputs that the compute kernels read besides activations and weights:
// the RoPE tables, the head's targets, and the document starts and positions of packed
// rows. The executor keeps them in the backend's host-tier memory, taken once at setup
// and refilled each step: host RAM on cpu and emu, pinned memory on cuda, which a GPU's
// kernels read in place over the bus (under unified addressing a pinned host pointer is a
// device pointer too). So they take no compute-tier bytes, which the plan would have to
// count, and the host code that checks them (the DeltaNet's packed-rows refusal) reads
// the same arrays. The price on a GPU: each RoPE call reads its table over the bus (a few
// MB per layer pass), a candidate for the compute tier once the planner counts it.
#pragma once

#include <cstdint>
#include <vector>

#include "layers/decoder_block.h"
#include "memory/host_pool.h"

namespace lt {

class StepInputs {
 public:
  // For steps of batch x seq tokens of model c, in one buffer of `pool` (the executor's
  // host-tier pool, which counts it).
  StepInputs(HostPool& pool, const ModelConfig& c, int64_t batch, int64_t seq);

  // Points ctx's RoPE tables (global and, for sliding layers, local) at this memory.
  void bind_rope(BlockContext& ctx) const;
  // The step's targets ([batch * seq], layers/step_batch.h), copied here; returns the copy.
  const int32_t* set_targets(const std::vector<int32_t>& targets);
  // ctx's document starts and positions (as StepDocuments::bind left them: host arrays,
  // or null) copied here, and ctx pointed at the copies.
  void bind_documents(BlockContext& ctx);

 private:
  int64_t tokens_;
  HostBuffer memory_;
  float *cos_ = nullptr, *sin_ = nullptr;
  float *local_cos_ = nullptr, *local_sin_ = nullptr;  // within cos_ and sin_; null without local tables
  int32_t *targets_ = nullptr, *doc_start_ = nullptr, *positions_ = nullptr;
};

}  // namespace lt
