// The Updater's paged layers (the streaming executor's NVMe slots hold their optimizer
// states): a slot holds any paged layer's state, and updating from it is the unpaged
// update bit for bit, also in a hybrid model whose layers' states differ in size; and
// tensors placed outside the blocks (TensorPlaces: a paged layer's masters and gradients
// in its slot) update there as they would in the blocks, for AdamW and SGD.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include <gtest/gtest.h>

#include "core/aligned_buffer.h"
#include "exec/streaming_executor.h"
#include "model/parameters.h"
#include "train/updater.h"
#include "../exec/streaming_test_util.h"

namespace lt {
namespace {

TEST(UpdaterPaging, ASlotHoldsTheLargestLayersStateAndUpdatesBitwise) {
  const ModelConfig c = test::qwen3_5_tiny_config(
      {LayerKind::Attention, LayerKind::LinearAttention, LayerKind::Attention, LayerKind::LinearAttention});
  TrainConfig cfg;
  cfg.optimizer = "adamw8";
  cfg.lr = 1e-3;
  cfg.warmup_steps = 0;
  cfg.steps = 2;
  ModelParameters a(c), b(c), grads(c);
  test::init_parameters(a, 3);
  std::memcpy(b.data(), a.data(), a.numel() * sizeof(float));
  test::init_parameters(grads, 4);
  const std::vector<int> paged{1, 2, 3};
  Updater in_memory(cfg, a), paging(cfg, b, paged);
  size_t most = 0, least = SIZE_MAX;
  for (int j = 0; j < c.num_layers; ++j) {
    most = std::max(most, paging.layer_state_bytes(j));
    least = std::min(least, paging.layer_state_bytes(j));
  }
  ASSERT_LT(least, most) << "the layers' states do not differ";
  EXPECT_EQ(paging.layer_state_bytes(), most);
  std::vector<AlignedBuffer<std::byte>> slots;
  for (size_t k = 0; k < paged.size(); ++k) {
    slots.emplace_back(paging.layer_state_bytes());
    slots.back().zero();  // a new slot: the optimizer's initial state
  }
  for (int64_t step = 1; step <= 2; ++step) {
    const UpdateResult da = in_memory.decide(1.0, step), db = paging.decide(1.0, step);
    for (int j = 0; j < c.num_layers; ++j) {
      const auto it = std::find(paged.begin(), paged.end(), j);
      std::span<std::byte> slot;
      if (it != paged.end()) slot = {slots[it - paged.begin()].data(), slots[it - paged.begin()].size()};
      for (auto [offset, n] : target_ranges(a, {UpdateTarget::Kind::Layer, j})) {
        in_memory.update_range(a, grads, offset, n, da, nullptr);
        paging.update_range(b, grads, offset, n, db, nullptr, slot);
      }
    }
  }
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.numel() * sizeof(float)), 0)
      << "updating from the slots differs from the unpaged update";
}

TEST(UpdaterPaging, TensorsPlacedOutsideTheBlocksUpdateThereBitwise) {
  const ModelConfig c = test::streaming_tiny_config(3);
  for (const char* optimizer : {"adamw8", "adamw", "sgd"}) {
    SCOPED_TRACE(optimizer);
    TrainConfig cfg;
    cfg.optimizer = optimizer;
    cfg.lr = 1e-3;
    cfg.warmup_steps = 0;
    cfg.steps = 2;
    ModelParameters a(c), b(c), grads(c), poisoned(c);
    test::init_parameters(a, 3);
    std::memcpy(b.data(), a.data(), a.numel() * sizeof(float));
    test::init_parameters(grads, 4);
    // Layer 1's tensors, parameters and gradients, live elsewhere; b's and the gradient
    // block's copies there are NaN, so reading them would show.
    const int64_t first = a.block_base(1) - a.data(), n = block_numel(c, 1);
    std::vector<float> params_there(b.block_base(1), b.block_base(1) + n);
    const std::vector<float> grads_there(grads.block_base(1), grads.block_base(1) + n);
    std::memcpy(poisoned.data(), grads.data(), grads.numel() * sizeof(float));
    std::fill_n(b.block_base(1), n, std::nanf(""));
    std::fill_n(poisoned.block_base(1), n, std::nanf(""));
    TensorPlaces places;
    places.params = [&](int64_t offset) { return params_there.data() + (offset - first); };
    places.grads = [&](int64_t offset) { return grads_there.data() + (offset - first); };
    Updater in_memory(cfg, a), placed(cfg, b);
    std::vector<bf16> copy_a(static_cast<size_t>(a.numel())), copy_b(copy_a.size());
    for (int64_t step = 1; step <= 2; ++step) {
      const UpdateResult da = in_memory.decide(1.0, step), db = placed.decide(1.0, step);
      for (int j = 0; j < c.num_layers; ++j)
        for (auto [offset, numel] : target_ranges(a, {UpdateTarget::Kind::Layer, j})) {
          in_memory.update_range(a, grads, offset, numel, da, copy_a.data());
          placed.update_range(b, poisoned, offset, numel, db, copy_b.data(), {}, j == 1 ? &places : nullptr);
        }
    }
    std::memcpy(b.block_base(1), params_there.data(), static_cast<size_t>(n) * sizeof(float));
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.numel() * sizeof(float)), 0) << "the parameters differ";
    EXPECT_EQ(std::memcmp(copy_a.data(), copy_b.data(), copy_a.size() * sizeof(bf16)), 0) << "the bf16 copies differ";
  }
}

}  // namespace
}  // namespace lt
