#include "exec/bf16_weight_slot.h"

#include <algorithm>

namespace lt {
namespace {

constexpr size_t kAlign = 64;
size_t align_up(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

}  // namespace

Bf16WeightSlot::Bf16WeightSlot(const ModelConfig& c) {
  for (int64_t layer = 0; layer < c.num_layers; ++layer) {
    std::vector<Part>& parts = parts_.emplace_back();
    size_t bytes = 0;
    const std::vector<BlockField> fields = block_fields(c, layer);
    for (bool matrices : {true, false})
      for (const BlockField& f : fields) {
        if (f.matrix != matrices) continue;
        parts.push_back({f, bytes});
        bytes = align_up(bytes + static_cast<size_t>(f.numel) * (f.matrix ? sizeof(bf16) : sizeof(float)));
      }
    bytes_ = std::max(bytes_, bytes);
  }
}

void Bf16WeightSlot::copy_in(Backend& backend, std::byte* slot, const ModelParameters& params,
                             const bf16* compute_copy, int layer) const {
  const BlockTensors host = const_cast<ModelParameters&>(params).block(layer);
  for (const Part& p : parts_[static_cast<size_t>(layer)]) {
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
  for (const Part& p : parts_[static_cast<size_t>(layer)]) {
    if (p.field.matrix)
      b.*bf16_member(p.field.member) = reinterpret_cast<const bf16*>(slot + p.offset);
    else
      w.*p.field.member = reinterpret_cast<float*>(slot + p.offset);
  }
  return {w, b};
}

}  // namespace lt
