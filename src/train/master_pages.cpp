#include "train/master_pages.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/error.h"

namespace lt {

MasterPages::MasterPages(ModelParameters& params, const std::vector<int>& layers) {
  const ModelConfig& c = params.config();
  matrices_.resize(static_cast<size_t>(c.num_layers));
  slot_bytes_.assign(static_cast<size_t>(c.num_layers), 0);
  for (int j : layers) {
    LT_ASSERT(j >= 0 && j < c.num_layers, "paged master of layer " + std::to_string(j));
    float* at = params.block_base(j);
    size_t part = 0;  // the layer's part of the slot so far, whole pages
    for (const BlockField& f : block_fields(c, j)) {
      const size_t bytes = static_cast<size_t>(f.numel) * sizeof(float);
      if (f.matrix)
        if (const PageSpan pages = page_interior(at, bytes); pages.bytes > 0) {
          const PageSpan cover = page_cover(at, bytes);
          const size_t lead = static_cast<size_t>(reinterpret_cast<std::byte*>(at) - cover.begin);
          matrices_[static_cast<size_t>(j)].push_back({at, bytes, pages, part + lead});
          part += cover.bytes;
        }
      at += f.numel;
    }
    slot_bytes_[static_cast<size_t>(j)] = part;
    max_slot_bytes_ = std::max(max_slot_bytes_, part);
  }
}

size_t MasterPages::bytes(int layer) const {
  size_t b = 0;
  for (const Matrix& m : matrices_[static_cast<size_t>(layer)]) b += m.pages.bytes;
  return b;
}

void MasterPages::copy_out(int layer, std::span<std::byte> part) const {
  LT_ASSERT(part.size() >= slot_bytes(layer), "paged masters of layer " + std::to_string(layer) + ": part too small");
  for (const Matrix& m : matrices_[static_cast<size_t>(layer)]) std::memcpy(part.data() + m.at, m.home, m.bytes);
}

void MasterPages::copy_in(int layer, std::span<const std::byte> part) {
  LT_ASSERT(part.size() >= slot_bytes(layer), "paged masters of layer " + std::to_string(layer) + ": part too small");
  for (const Matrix& m : matrices_[static_cast<size_t>(layer)]) std::memcpy(m.home, part.data() + m.at, m.bytes);
}

float* MasterPages::in_slot(int layer, std::span<std::byte> part, const float* home) const {
  for (const Matrix& m : matrices_[static_cast<size_t>(layer)])
    if (m.home == home) {
      LT_ASSERT(part.size() >= m.at + m.bytes, "paged masters of layer " + std::to_string(layer) + ": part too small");
      return reinterpret_cast<float*>(part.data() + m.at);
    }
  return nullptr;
}

void MasterPages::release(int layer) {
  for (const Matrix& m : matrices_[static_cast<size_t>(layer)])
    release_pages(m.pages, "layer " + std::to_string(layer) + "'s paged weights");
}

}  // namespace lt
