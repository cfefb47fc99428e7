#include "plan/cost_model.h"

#include <gtest/gtest.h>

#include "core/error.h"
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
  PlanRequest req = test::preset_request("qwen3.6-27b", "h800", 72);
  CostModel cm = build_cost_model(req.model, req.hardware, 72, 1024);
  // The paper: 0.703 GiB per boundary at batch 72, seq 1024 (bf16, hidden 5120).
  EXPECT_NEAR(cm.boundary_bytes / (1024.0 * 1024 * 1024), 0.703, 0.0005);
  // Weights stream in bf16; a decoder layer of this shape has ~340.8M parameters.
  EXPECT_NEAR(cm.layer_params / 1e6, 340.8, 0.1);
  EXPECT_DOUBLE_EQ(cm.weight_bytes, 2 * cm.layer_params);
  // Forward FLOPs: 2 per MAC on every weight, plus attention (a few percent at seq 1024).
  double matmul = 2 * cm.layer_params * cm.tokens;
  EXPECT_GT(cm.layer_forward_flops, matmul);
  EXPECT_LT(cm.layer_forward_flops, 1.1 * matmul);
  EXPECT_DOUBLE_EQ(cm.backward_s, 2 * cm.forward_s);
  EXPECT_NEAR(cm.forward_s, cm.layer_forward_flops / req.hardware.effective_flops(), 1e-12);
  // Untied head; 24.35B trainable parameters under the assumed head_dim and vocabulary.
  EXPECT_FALSE(cm.tied_embeddings);
  EXPECT_NEAR(cm.total_params / 1e9, 24.35, 0.01);
  EXPECT_GT(cm.workspace_backward, cm.internals_bytes);
}

TEST(CostModel, WeightAndGradientBytesFollowTheProfile) {
  PlanRequest req = test::preset_request("qwen2.5-3b", "h800", 8);
  const CostModel bf16 = build_cost_model(req.model, req.hardware, 8, 512);
  EXPECT_DOUBLE_EQ(bf16.weight_bytes, 2 * bf16.layer_params);
  EXPECT_DOUBLE_EQ(bf16.grad_bytes, 2 * bf16.layer_params);
  HardwareProfile fp32 = req.hardware;
  fp32.weight_bytes = 4;
  fp32.grad_bytes = 4;
  const CostModel cm = build_cost_model(req.model, fp32, 8, 512);
  EXPECT_DOUBLE_EQ(cm.weight_bytes, 2 * bf16.weight_bytes);
  EXPECT_DOUBLE_EQ(cm.grad_bytes, 2 * bf16.grad_bytes);
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
  EXPECT_DOUBLE_EQ(cm.forward_s, 0.01);
  EXPECT_DOUBLE_EQ(cm.backward_s, 0.025);
  EXPECT_DOUBLE_EQ(cm.head_s, 0.05);
  // Tied embeddings: the head streams the embedding matrix, its own update is the norm's.
  EXPECT_TRUE(cm.tied_embeddings);
  EXPECT_GT(cm.head_weight_bytes, 2 * cm.embed_params);
}

}  // namespace
}  // namespace lt
