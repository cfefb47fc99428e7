// Where a decoder layer's weights lie in a bf16 compute-tier weight slot: the projection
// matrices in bf16 first, then the norms, biases and DeltaNet parameters in fp32 (what the
// kernels read under Precision::BF16), each at a 64-byte boundary. The executor fills and
// binds slots by it (exec/bf16_weight_slot.h); the planner counts a slot's bytes by it
// (plan/cost_model.h), so that both count the same bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/config.h"
#include "model/parameters.h"

namespace lt {

struct Bf16SlotPart {
  BlockField field;
  size_t offset = 0;  // in the slot
};

struct Bf16SlotLayout {
  std::vector<Bf16SlotPart> parts;  // matrices, then the rest, each in block_fields() order
  size_t bytes = 0;                 // the end of the last part, aligned
};

Bf16SlotLayout bf16_slot_layout(const ModelConfig& c, int64_t layer);
// A slot holds any layer: the largest layer's bytes.
size_t bf16_weight_slot_bytes(const ModelConfig& c);

}  // namespace lt
