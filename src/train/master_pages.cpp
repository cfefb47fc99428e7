#include "train/master_pages.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/error.h"

namespace lt {

MasterPages::MasterPages(ModelParameters& params, const std::vector<int>& layers) {
  const ModelConfig& c = params.config();
  ranges_.resize(static_cast<size_t>(c.num_layers));
  for (int j : layers) {
    LT_ASSERT(j >= 0 && j < c.num_layers, "paged master of layer " + std::to_string(j));
    float* at = params.block_base(j);
    for (const BlockField& f : block_fields(c, j)) {
      if (f.matrix)
        if (const PageSpan s = page_interior(at, static_cast<size_t>(f.numel) * sizeof(float)); s.bytes > 0)
          ranges_[static_cast<size_t>(j)].push_back(s);
      at += f.numel;
    }
    max_bytes_ = std::max(max_bytes_, bytes(j));
  }
}

size_t MasterPages::bytes(int layer) const {
  size_t b = 0;
  for (const PageSpan& r : ranges_[static_cast<size_t>(layer)]) b += r.bytes;
  return b;
}

void MasterPages::copy_out(int layer, std::span<std::byte> out) const {
  LT_ASSERT(out.size() >= bytes(layer), "paged masters of layer " + std::to_string(layer) + ": buffer too small");
  std::byte* to = out.data();
  for (const PageSpan& r : ranges_[static_cast<size_t>(layer)]) {
    std::memcpy(to, r.begin, r.bytes);
    to += r.bytes;
  }
}

void MasterPages::copy_in(int layer, std::span<const std::byte> in) {
  LT_ASSERT(in.size() >= bytes(layer), "paged masters of layer " + std::to_string(layer) + ": buffer too small");
  const std::byte* from = in.data();
  for (const PageSpan& r : ranges_[static_cast<size_t>(layer)]) {
    std::memcpy(r.begin, from, r.bytes);
    from += r.bytes;
  }
}

void MasterPages::release(int layer) {
  for (const PageSpan& r : ranges_[static_cast<size_t>(layer)])
    release_pages(r, "layer " + std::to_string(layer) + "'s paged weights");
}

}  // namespace lt
