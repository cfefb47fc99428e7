// The Updater's paged layers (the streaming executor's NVMe slots hold their optimizer
// states): a slot holds any paged layer's state, and updating from it is the unpaged
// update bit for bit, also in a hybrid model whose layers' states differ in size.
#include <algorithm>
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

}  // namespace
}  // namespace lt
