#include "model/bf16_slot_layout.h"

#include <algorithm>

#include "core/dtype.h"

namespace lt {
namespace {

constexpr size_t kAlign = 64;  // a cache line, and the widest vector the kernels load
size_t align_up(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

}  // namespace

Bf16SlotLayout bf16_slot_layout(const ModelConfig& c, int64_t layer) {
  Bf16SlotLayout l;
  const std::vector<BlockField> fields = block_fields(c, layer);
  for (bool matrices : {true, false})
    for (const BlockField& f : fields) {
      if (f.matrix != matrices) continue;
      l.parts.push_back({f, l.bytes});
      l.bytes = align_up(l.bytes + static_cast<size_t>(f.numel) * (f.matrix ? sizeof(bf16) : sizeof(float)));
    }
  return l;
}

size_t bf16_weight_slot_bytes(const ModelConfig& c) {
  size_t bytes = 0;
  for (int64_t layer = 0; layer < c.num_layers; ++layer) bytes = std::max(bytes, bf16_slot_layout(c, layer).bytes);
  return bytes;
}

}  // namespace lt
