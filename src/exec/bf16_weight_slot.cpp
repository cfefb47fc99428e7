#include "exec/bf16_weight_slot.h"

#include <algorithm>

namespace lt {

Bf16WeightSlot::Bf16WeightSlot(const ModelConfig& c) {
  for (int64_t layer = 0; layer < c.num_layers; ++layer) {
    layouts_.push_back(bf16_slot_layout(c, layer));
    bytes_ = std::max(bytes_, layouts_.back().bytes);
  }
}

void Bf16WeightSlot::copy_in(Backend& backend, std::byte* slot, const ModelParameters& params,
                             const bf16* compute_copy, int layer) const {
  const BlockTensors host = const_cast<ModelParameters&>(params).block(layer);
  for (const Bf16SlotPart& p : layouts_[static_cast<size_t>(layer)].parts) {
    const float* src = host.*p.field.member;
    const size_t n = static_cast<size_t>(p.field.numel);
    if (p.field.matrix)
      backend.copy_to_compute(slot + p.offset, compute_copy + (src - params.data()), n * sizeof(bf16));
    else
      backend.copy_to_compute(slot + p.offset, src, n * sizeof(float));
  }
}

std::pair<BlockTensors, BlockTensorsBf16> Bf16WeightSlot::bind(std::byte* slot, int layer) const {
  BlockTensors w;
  BlockTensorsBf16 b;
  for (const Bf16SlotPart& p : layouts_[static_cast<size_t>(layer)].parts) {
    if (p.field.matrix)
      b.*bf16_member(p.field.member) = reinterpret_cast<const bf16*>(slot + p.offset);
    else
      w.*p.field.member = reinterpret_cast<float*>(slot + p.offset);
  }
  return {w, b};
}

}  // namespace lt
