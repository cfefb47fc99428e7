// The fp32 masters of paged layers' projection matrices (Plan::paged_master): between a
// layer's lazy updates they live in its NVMe slot, after its optimizer state, and their
// host pages are given back to the kernel, so host memory holds them only around the
// update (and while a checkpoint or an evaluation reads them).
//
// Only bf16 runs page masters: their matmuls read the bf16 compute copy, which each update
// rewrites; the norms, biases and the Gated DeltaNet's small tensors, which the compute
// reads in fp32, stay. ModelParameters keeps one contiguous block, so what pages is each
// matrix's whole pages (memory/page_interior.h): released after the update, written back
// before the next one reads them. A matrix's first and last partial pages stay resident.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "memory/page_interior.h"
#include "model/parameters.h"

namespace lt {

class MasterPages {
 public:
  MasterPages(ModelParameters& params, const std::vector<int>& layers);

  // Bytes of layer j's paged interiors (0 for a layer that does not page), and the most.
  size_t bytes(int layer) const;
  size_t max_bytes() const { return max_bytes_; }

  // Layer j's interiors, in block order, to `out` (bytes(j) of it) and back from `in`.
  void copy_out(int layer, std::span<std::byte> out) const;
  void copy_in(int layer, std::span<const std::byte> in);
  // Gives layer j's interiors' pages back to the kernel (they read as zeros after).
  void release(int layer);

 private:
  std::vector<std::vector<PageSpan>> ranges_;  // per layer
  size_t max_bytes_ = 0;
};

}  // namespace lt
