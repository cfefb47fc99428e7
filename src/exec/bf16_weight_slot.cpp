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
                             const bf16* layer_copy, int layer) const {
  auto& p = const_cast<ModelParameters&>(params);
  const BlockTensors host = p.block(layer);
  const float* first = p.block_base(layer);
  for (const Bf16SlotPart& part : layouts_[static_cast<size_t>(layer)].parts) {
    const float* src = host.*part.field.member;
    const size_t n = static_cast<size_t>(part.field.numel);
    if (part.field.matrix)
      backend.copy_to_compute(slot + part.offset, layer_copy + (src - first), n * sizeof(bf16));
    else
      backend.copy_to_compute(slot + part.offset, src, n * sizeof(float));
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
