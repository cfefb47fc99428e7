// A decoder layer's weight slot on a separate compute tier (the emu backend, and what a
// GPU's HBM copy holds) under bf16 compute: the seven projection matrices in bf16, all the
// matmuls read, then the norms and biases in fp32, read as they are. Half the bytes of the
// fp32 block over the link and on the compute tier, less the small fp32 tail.
//
// Layout: model/bf16_slot_layout.h's (which the planner counts too). Each layer has its
// own (a hybrid model's layers differ); bytes() is the largest, the size of every slot.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "exec/backend.h"
#include "model/bf16_slot_layout.h"
#include "model/parameters.h"

namespace lt {

class Bf16WeightSlot {
 public:
  explicit Bf16WeightSlot(const ModelConfig& c);
  size_t bytes() const { return bytes_; }

  // Queues the copies of layer `layer` into `slot`: matrices from its bf16 copy
  // (`layer_copy`: the layer's block in ModelParameters' layout, from its first parameter),
  // norms and biases from the fp32 parameters.
  void copy_in(Backend& backend, std::byte* slot, const ModelParameters& params, const bf16* layer_copy,
               int layer) const;
  // Views of a slot filled with layer `layer`: bf16 matrices, fp32 norms and biases (fp32
  // matrix views null).
  std::pair<BlockTensors, BlockTensorsBf16> bind(std::byte* slot, int layer) const;

 private:
  std::vector<Bf16SlotLayout> layouts_;  // per layer
  size_t bytes_ = 0;
};

}  // namespace lt
