// The fp32 masters of paged layers' projection matrices (Plan::nvme_master_layers): between a
// layer's lazy updates they live in its NVMe slot, after its optimizer state, where the
// update reads and writes them in place (in the slot's host staging); their host pages
// are given back to the kernel, so host memory holds them only while a checkpoint or an
// evaluation reads them (after copy_in).
//
// Only bf16 runs page masters: their matmuls read the bf16 compute copy, which each update
// rewrites; the norms, biases and the Gated DeltaNet's small tensors, which the compute
// reads in fp32, stay. ModelParameters keeps one contiguous block, so what is released is
// each matrix's whole pages (memory/page_interior.h); its partial first and last pages
// stay resident, as they hold its neighbours too, and its bytes there go stale while the
// slot's copy is updated. The slot holds each paged matrix whole, as the pages covering
// it, so that the update finds it in one piece; copy_in brings it back whole.
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

  // Bytes of layer j's released pages, the host memory its paging frees (0 for a layer
  // that does not page).
  size_t bytes(int layer) const;
  // Bytes of layer j's part of its slot (the pages covering each paged matrix), and the most.
  size_t slot_bytes(int layer) const { return slot_bytes_[static_cast<size_t>(layer)]; }
  size_t max_slot_bytes() const { return max_slot_bytes_; }

  // Layer j's paged matrices, whole, from the host block into `part` (slot_bytes(j) of it),
  // and back.
  void copy_out(int layer, std::span<std::byte> part) const;
  void copy_in(int layer, std::span<const std::byte> part);
  // Where in `part` lies the paged matrix whose host copy begins at `home`; null for a
  // tensor that does not page.
  float* in_slot(int layer, std::span<std::byte> part, const float* home) const;
  // Gives layer j's matrices' whole pages back to the kernel (they read as zeros after).
  void release(int layer);

 private:
  struct Matrix {
    float* home = nullptr;
    size_t bytes = 0;
    PageSpan pages;  // its whole pages, released
    size_t at = 0;   // its first byte's offset in the layer's part of the slot
  };
  std::vector<std::vector<Matrix>> matrices_;  // per layer, in block order
  std::vector<size_t> slot_bytes_;             // per layer
  size_t max_slot_bytes_ = 0;
};

}  // namespace lt
