#include "plan/cost_model.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "model/bf16_slot_layout.h"
#include "plan/model_preset.h"
#include "plan_test_util.h"

namespace lt {
namespace {

TEST(ModelPresets, AllResolve) {
  struct Want {
    const char* name;
    int64_t layers, hidden;
  };
  for (Want w : {Want{"qwen2.5-3b", 36, 2048}, Want{"qwen2.5-7b", 28, 3584}, Want{"qwen2.5-14b", 48, 5120},
                 Want{"qwen3.6-27b", 64, 5120}, Want{"llama-3.1-8b", 32, 4096}, Want{"llama-3.1-70b", 80, 8192}}) {
    ResolvedModel m = resolve_model(w.name);
    EXPECT_EQ(m.config.num_layers, w.layers) << w.name;
    EXPECT_EQ(m.config.hidden_size, w.hidden) << w.name;
  }
  EXPECT_THROW(resolve_model("no-such-model"), Error);
}

TEST(CostModel, PaperShapeOf27B) {
  // Qwen3.6-27B: 48 Gated DeltaNet layers and 16 gated full-attention layers (every 4th).
  PlanRequest req = test::preset_request("qwen3.6-27b", "h800", 72);
  CostModel cm = build_cost_model(req.model, req.hardware, 72, 1024);
  // The paper: 0.703 GiB per boundary at batch 72, seq 1024 (bf16, hidden 5120).
  EXPECT_NEAR(cm.boundary_bytes / (1024.0 * 1024 * 1024), 0.703, 0.0005);
  ASSERT_EQ(cm.layers.size(), 64u);
  // Parameters, counted here from transformers' module shapes (C 5120, I 17408; DeltaNet:
  // key dim 16*128 = 2048, value dim 48*128 = 6144, conv over 2*2048 + 6144 = 10240).
  const double C = 5120, I = 17408, mlp = 3 * C * I, norms = 2 * C;
  const double linear = 10240 * C + 6144 * C + 2 * 48 * C + 10240 * 4 + 48 + 48 + 128 + C * 6144 + mlp + norms;
  const double full = 2 * 6144 * C + 2 * 1024 * C + C * 6144 + 2 * 256 + mlp + norms;
  for (int j = 0; j < 64; ++j) {
    SCOPED_TRACE(j);
    const LayerCost& l = cm.layer(j);
    const bool attention = j % 4 == 3;
    EXPECT_EQ(l.kind, attention ? LayerKind::Attention : LayerKind::LinearAttention);
    EXPECT_EQ(l.params, attention ? full : linear);
    EXPECT_DOUBLE_EQ(l.weight_bytes, 2 * l.params);  // weights stream in bf16
    // Forward FLOPs: 2 per MAC on every weight, plus attention or the delta rule (a few
    // percent at seq 1024).
    const double matmul = 2 * l.params * cm.tokens;
    EXPECT_GT(l.forward_flops, matmul);
    EXPECT_LT(l.forward_flops, 1.1 * matmul);
    EXPECT_DOUBLE_EQ(l.backward_s, 2 * l.forward_s);
    EXPECT_NEAR(l.forward_s, l.forward_flops / req.hardware.effective_flops(), 1e-12);
    EXPECT_GT(l.workspace_backward, l.internals_bytes);
  }
  // A DeltaNet layer keeps the recurrent state entering each 64-token chunk, fp32:
  // 72 sequences * 48 heads * 16 chunks * 128 * 128 * 4 bytes, more than a boundary.
  const double states = 72.0 * 48 * 16 * 128 * 128 * 4;
  EXPECT_GT(cm.layer(0).internals_bytes, states + cm.boundary_bytes);
  // The slots hold the largest layer (a DeltaNet one): its matrices in bf16, the rest in
  // fp32, each part aligned (model/bf16_slot_layout.h), so a little over 2 bytes a weight.
  EXPECT_DOUBLE_EQ(cm.slot_weight_bytes(), static_cast<double>(bf16_weight_slot_bytes(req.model)));
  EXPECT_GT(cm.slot_weight_bytes(), 2 * linear);
  EXPECT_LT(cm.slot_weight_bytes(), 2 * linear * (1 + 1e-3));
  // Untied head: 26.90B trainable parameters (the vision tower and MTP layer are not trained).
  EXPECT_FALSE(cm.tied_embeddings);
  EXPECT_EQ(cm.total_params, 48 * linear + 16 * full + 2 * 248320 * C + C);
  EXPECT_NEAR(cm.total_params / 1e9, 26.896, 0.001);
}

TEST(CostModel, MeasuredLayerTimesNeedUniformLayers) {
  PlanRequest req = test::preset_request("qwen3.6-27b", "h800", 8);
  MeasuredLayerTimes mt;
  mt.forward_s = 0.01;
  EXPECT_THROW(build_cost_model(req.model, req.hardware, 8, 1024, mt), Error);
}

TEST(CostModel, WeightAndGradientBytesFollowTheProfile) {
  PlanRequest req = test::preset_request("qwen2.5-3b", "h800", 8);
  const CostModel bf16 = build_cost_model(req.model, req.hardware, 8, 512);
  EXPECT_DOUBLE_EQ(bf16.layer(0).weight_bytes, 2 * bf16.layer(0).params);
  EXPECT_DOUBLE_EQ(bf16.layer(0).grad_bytes, 2 * bf16.layer(0).params);
  HardwareProfile fp32 = req.hardware;
  fp32.weight_bytes = 4;
  fp32.grad_bytes = 4;
  const CostModel cm = build_cost_model(req.model, fp32, 8, 512);
  EXPECT_DOUBLE_EQ(cm.layer(0).weight_bytes, 2 * bf16.layer(0).weight_bytes);
  EXPECT_DOUBLE_EQ(cm.layer(0).grad_bytes, 2 * bf16.layer(0).grad_bytes);
  EXPECT_DOUBLE_EQ(cm.head_weight_bytes, 2 * bf16.head_weight_bytes);
  EXPECT_DOUBLE_EQ(cm.head_grad_bytes, 2 * bf16.head_grad_bytes);
  EXPECT_DOUBLE_EQ(cm.boundary_bytes, bf16.boundary_bytes);  // activations follow act_bytes
}

TEST(CostModel, MeasuredLayerTimesOverrideFlops) {
  PlanRequest req = test::preset_request("qwen2.5-3b", "rtx3090", 4);
  MeasuredLayerTimes mt;
  mt.forward_s = 0.01;
  mt.backward_s = 0.025;
  mt.head_s = 0.05;
  CostModel cm = build_cost_model(req.model, req.hardware, 4, 1024, mt);
  EXPECT_DOUBLE_EQ(cm.layer(0).forward_s, 0.01);
  EXPECT_DOUBLE_EQ(cm.layer(0).backward_s, 0.025);
  EXPECT_DOUBLE_EQ(cm.head_s, 0.05);
  // Tied embeddings: the head streams the embedding matrix, its own update is the norm's.
  EXPECT_TRUE(cm.tied_embeddings);
  EXPECT_GT(cm.head_weight_bytes, 2 * cm.embed_params);
}

}  // namespace
}  // namespace lt
