#include "train/master_pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/error.h"

namespace lt {

MasterPages::MasterPages(ModelParameters& params, const std::vector<int>& layers) {
  const ModelConfig& c = params.config();
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  ranges_.resize(static_cast<size_t>(c.num_layers));
  for (int j : layers) {
    LT_ASSERT(j >= 0 && j < c.num_layers, "paged master of layer " + std::to_string(j));
    float* at = params.block_base(j);
    for (const BlockField& f : block_fields(c, j)) {
      const auto begin = reinterpret_cast<uintptr_t>(at);
      const uintptr_t end = begin + static_cast<uintptr_t>(f.numel) * sizeof(float);
      at += f.numel;
      if (!f.matrix) continue;
      const uintptr_t first = (begin + page - 1) / page * page, last = end / page * page;
      if (last > first) ranges_[static_cast<size_t>(j)].push_back({reinterpret_cast<std::byte*>(first), last - first});
    }
    max_bytes_ = std::max(max_bytes_, bytes(j));
  }
}

size_t MasterPages::bytes(int layer) const {
  size_t b = 0;
  for (const Range& r : ranges_[static_cast<size_t>(layer)]) b += r.bytes;
  return b;
}

void MasterPages::copy_out(int layer, std::span<std::byte> out) const {
  LT_ASSERT(out.size() >= bytes(layer), "paged masters of layer " + std::to_string(layer) + ": buffer too small");
  std::byte* to = out.data();
  for (const Range& r : ranges_[static_cast<size_t>(layer)]) {
    std::memcpy(to, r.begin, r.bytes);
    to += r.bytes;
  }
}

void MasterPages::copy_in(int layer, std::span<const std::byte> in) {
  LT_ASSERT(in.size() >= bytes(layer), "paged masters of layer " + std::to_string(layer) + ": buffer too small");
  const std::byte* from = in.data();
  for (const Range& r : ranges_[static_cast<size_t>(layer)]) {
    std::memcpy(r.begin, from, r.bytes);
    from += r.bytes;
  }
}

void MasterPages::release(int layer) {
  for (const Range& r : ranges_[static_cast<size_t>(layer)])
    if (madvise(r.begin, r.bytes, MADV_DONTNEED) != 0)
      throw Error("could not give layer " + std::to_string(layer) + "'s paged weights back to the kernel: " +
                      std::strerror(errno),
                  "madvise(MADV_DONTNEED)", "report this with your kernel version");
}

}  // namespace lt
