#include "exec/step_inputs.h"

#include <algorithm>

#include "core/aligned_buffer.h"
#include "core/error.h"

namespace lt {

namespace {
constexpr size_t kAlign = 64;
size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }
}  // namespace

StepInputs::StepInputs(HostPool& pool, const ModelConfig& c, int64_t batch, int64_t seq)
    : tokens_(batch * seq) {
  // The tables as the in-memory step builds them (layers/decoder_block.h), then copied.
  BlockContext tables;
  AlignedBuffer<float> cos, sin;
  set_rope_tables(tables, cos, sin, c, seq);
  const size_t table_floats = cos.size();  // the global table, then the local one where there is one
  const size_t table_bytes = aligned(table_floats * sizeof(float)), ids_bytes = aligned(tokens_ * sizeof(int32_t));
  memory_ = pool.allocate(2 * table_bytes + 3 * ids_bytes, "step inputs");
  std::byte* p = memory_.data();
  cos_ = reinterpret_cast<float*>(p);
  sin_ = reinterpret_cast<float*>(p + table_bytes);
  targets_ = reinterpret_cast<int32_t*>(p + 2 * table_bytes);
  doc_start_ = reinterpret_cast<int32_t*>(p + 2 * table_bytes + ids_bytes);
  positions_ = reinterpret_cast<int32_t*>(p + 2 * table_bytes + 2 * ids_bytes);
  std::copy_n(cos.data(), table_floats, cos_);
  std::copy_n(sin.data(), table_floats, sin_);
  if (tables.local_rope_cos) {
    local_cos_ = cos_ + (tables.local_rope_cos - tables.rope_cos);
    local_sin_ = sin_ + (tables.local_rope_sin - tables.rope_sin);
  }
}

void StepInputs::bind_rope(BlockContext& ctx) const {
  ctx.rope_cos = cos_;
  ctx.rope_sin = sin_;
  ctx.local_rope_cos = local_cos_;
  ctx.local_rope_sin = local_sin_;
}

const int32_t* StepInputs::set_targets(const std::vector<int32_t>& targets) {
  LT_ASSERT(static_cast<int64_t>(targets.size()) == tokens_, "one target per token");
  std::copy(targets.begin(), targets.end(), targets_);
  return targets_;
}

void StepInputs::bind_documents(BlockContext& ctx) {
  if (!ctx.doc_start) return;  // every row one sequence: nothing to copy
  std::copy_n(ctx.doc_start, tokens_, doc_start_);
  std::copy_n(ctx.positions, tokens_, positions_);
  ctx.doc_start = doc_start_;
  ctx.positions = positions_;
}

}  // namespace lt
