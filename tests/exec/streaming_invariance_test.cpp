// Plan invariance (issue 4, section 4): a plan changes where activations live and what is
// recomputed, never the math. On the cpu backend, five training steps with an fp32 AdamW
// between them give bitwise the same losses, gradients, gradient norms and parameters
// under keep-all, recompute-all, megatrain, megatrain-code and a MILP plan that offloads to both host
// and NVMe, and the same as ModelStep's in-memory step.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"
#include "exec/backend.h"
#include "exec/streaming_executor.h"
#include "layers/model_step.h"
#include "optim/adamw.h"
#include "plan/planner.h"
#include "streaming_test_util.h"
#include "streaming_trajectory.h"

namespace lt {
namespace {

using namespace streaming_test;


class StreamingInvariance : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("lt-streaming-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(StreamingInvariance, EveryPlanMatchesTheInMemoryStepBitwise) {
  const ModelConfig c = test::streaming_tiny_config(4);
  const Trajectory ref = run_reference(c);
  // The comparison means something only if training moves: the optimizer changes the
  // loss and the gradients are not zero.
  EXPECT_NE(ref.loss.front(), ref.loss.back());
  EXPECT_GT(ref.grad_sq.back(), 0.0);
  std::vector<Plan> plans;
  // milp with room to spare keeps every layer's internals (the int.<j> path).
  for (const char* policy : {"keep-all", "recompute-all", "megatrain", "megatrain-code", "milp"})
    plans.push_back(make_plan(request(c), policy));
  plans.push_back(offloading_milp_plan(c));
  ASSERT_TRUE(plans.back().feasible && !plans.back().windows.empty())
      << "no budget made the MILP use both host and NVMe";
  for (const Plan& p : plans) {
    ASSERT_TRUE(p.feasible) << p.policy << ": " << p.infeasible_reason;
    const Plan::TierCounts tc = p.tier_counts();
    SCOPED_TRACE(p.policy + " gpu=" + std::to_string(tc.gpu) + " cpu=" + std::to_string(tc.cpu) +
                 " nvme=" + std::to_string(tc.nvme) + " recompute=" + std::to_string(tc.recompute));
    expect_bitwise_equal(run_streaming(c, p, dir_), ref, p.policy);
  }
}

// The emu backend copies weights into slots and gradients out of slots through its copy
// threads (throttled here, so copies really overlap compute); the math must not move.
TEST_F(StreamingInvariance, EmuBackendMatchesBitwise) {
  const ModelConfig c = test::streaming_tiny_config(4);
  const Trajectory ref = run_reference(c);
  expect_bitwise_equal(run_streaming(c, make_plan(request(c), "megatrain"), dir_, make_emu_backend(2, 2)), ref,
                       "emu megatrain");
  expect_bitwise_equal(run_streaming(c, make_plan(request(c), "milp"), dir_, make_emu_backend()), ref, "emu milp");
  expect_bitwise_equal(run_streaming(c, offloading_milp_plan(c), dir_, make_emu_backend(5, 5)), ref,
                       "emu milp offload");
}

// A forward window's updates of layers it neither computes with nor copies run after its
// kernels are issued (on a GPU, while they run); an update due in the window that
// prefetches its layer still runs before that copy. An optimizer whose every update starts
// 20 ms late must give the same bits: a prefetch queued before its layer's update would
// have copied the old weights long before, on the unthrottled copy thread. In bf16 too,
// where the update also writes the bf16 copy that the prefetch reads.
TEST_F(StreamingInvariance, UpdatesBesideTheKernelsAndBeforeTheirLayersPrefetch) {
  const ModelConfig c = test::streaming_tiny_config(4);
  for (const Precision precision : {Precision::F32, Precision::BF16}) {
    const RunOptions ro{.eight_bit = true, .precision = precision};
    RunOptions slow = ro;
    slow.update_delay_ms = 20;
    const Trajectory ref = run_reference(c, ro);
    const std::string bf16 = precision == Precision::BF16 ? "bf16 " : "";
    // The planners update a layer a window before its prefetch: beside that window's kernels.
    const Trajectory milp = run_streaming(c, make_plan(request(c), "milp"), dir_, make_emu_backend(), slow);
    expect_bitwise_equal(milp, ref, bf16 + "emu milp, slow updates");
    EXPECT_GT(milp.updates_beside_kernels, 0) << bf16 << "milp: no update ran beside its window's kernels";
    // Moved into its prefetch's window, each update goes before the copy.
    Plan late = make_plan(request(c), "keep-all");
    for (OptimizerPlacement& o : late.optimizer)
      for (int j = 1; j < c.num_layers; ++j)
        if (o.target == "layer." + std::to_string(j))
          for (size_t w = 0; w < late.windows.size(); ++w)
            if (late.windows[w].name == "F" + std::to_string(j - 1)) o.window = static_cast<int>(w);
    const Trajectory moved = run_streaming(c, late, dir_, make_emu_backend(), slow);
    expect_bitwise_equal(moved, ref, bf16 + "emu keep-all, updates in their prefetch's window, slow updates");
    EXPECT_EQ(moved.updates_beside_kernels, 0) << bf16 << "an update ran beside the kernels of its prefetch's window";
  }
}

// bf16 matmuls (the trainer's default): the same bits as ModelStep's BF16 step, under
// plans that recompute, offload to host and NVMe, and page optimizer states, on the cpu
// backend (host views of the compute copy) and the emu backend (bf16 weight slots).
TEST_F(StreamingInvariance, Bf16MatmulsMatchModelStepBitwise) {
  const ModelConfig c = test::streaming_tiny_config(4);
  const RunOptions bf16{.eight_bit = true, .precision = Precision::BF16};
  const Trajectory ref = run_reference(c, bf16);
  const Trajectory f32 = run_reference(c, RunOptions{.eight_bit = true});
  EXPECT_NE(ref.loss.back(), f32.loss.back()) << "bf16 and fp32 runs should differ";
  for (const char* policy : {"recompute-all", "megatrain"})
    expect_bitwise_equal(run_streaming(c, make_plan(request(c), policy), dir_, make_cpu_backend(), bf16), ref,
                         std::string("bf16 ") + policy);
  PlanRequest paged = request(c);
  paged.nvme_state_layers = 2;
  expect_bitwise_equal(run_streaming(c, make_plan(paged, "milp"), dir_, make_cpu_backend(), bf16), ref,
                       "bf16 milp, paged states");
  expect_bitwise_equal(run_streaming(c, offloading_milp_plan(c), dir_, make_cpu_backend(), bf16), ref,
                       "bf16 milp offload");
  expect_bitwise_equal(run_streaming(c, make_plan(request(c), "megatrain"), dir_, make_emu_backend(2, 2), bf16), ref,
                       "bf16 emu megatrain");
  expect_bitwise_equal(run_streaming(c, make_plan(paged, "milp"), dir_, make_emu_backend(), bf16), ref,
                       "bf16 emu milp, paged states");
}

TEST_F(StreamingInvariance, TiedEmbeddingsMatchToo) {
  ModelConfig c = test::streaming_tiny_config(4);
  c.tie_word_embeddings = true;
  const Trajectory ref = run_reference(c);
  expect_bitwise_equal(run_streaming(c, make_plan(request(c), "recompute-all"), dir_), ref, "recompute-all tied");
  expect_bitwise_equal(run_streaming(c, offloading_milp_plan(c), dir_), ref, "milp tied");
}

// Packed documents (StepOptions::doc_start: block-diagonal attention, per-document RoPE
// positions) through every kind of plan and both backends, fp32 and bf16: the same bits
// as ModelStep given the same documents, and not the bits of the unmasked run.
TEST_F(StreamingInvariance, DocumentMaskMatchesBitwise) {
  const ModelConfig c = test::streaming_tiny_config(4);
  const RunOptions docs{.document_mask = true};
  const Trajectory ref = run_reference(c, docs);
  const Trajectory plain = run_reference(c);
  EXPECT_NE(ref.loss.front(), plain.loss.front()) << "the documents should change the loss";
  for (const char* policy : {"keep-all", "recompute-all", "megatrain", "milp"})
    expect_bitwise_equal(run_streaming(c, make_plan(request(c), policy), dir_, make_cpu_backend(), docs), ref,
                         std::string("documents ") + policy);
  expect_bitwise_equal(run_streaming(c, offloading_milp_plan(c), dir_, make_cpu_backend(), docs), ref,
                       "documents milp offload");
  expect_bitwise_equal(run_streaming(c, make_plan(request(c), "megatrain"), dir_, make_emu_backend(2, 2), docs), ref,
                       "documents emu megatrain");
  expect_bitwise_equal(run_streaming(c, offloading_milp_plan(c), dir_, make_emu_backend(5, 5), docs), ref,
                       "documents emu milp offload");
  const RunOptions bf16{.eight_bit = true, .precision = Precision::BF16, .document_mask = true};
  const Trajectory ref16 = run_reference(c, bf16);
  expect_bitwise_equal(run_streaming(c, make_plan(request(c), "recompute-all"), dir_, make_cpu_backend(), bf16),
                       ref16, "documents bf16 recompute-all");
  expect_bitwise_equal(run_streaming(c, make_plan(request(c), "megatrain"), dir_, make_emu_backend(), bf16), ref16,
                       "documents bf16 emu megatrain");
}

// Gemma 3 (sandwich norms, GeGLU, (1 + w) norms, scaled embeddings, per-layer RoPE and a
// window shorter than the sequence on the sliding layers) and Mistral with a real window:
// the streamed executor gives the in-memory step's bits under every kind of plan, both
// backends, bf16 and documents.
ModelConfig gemma3_tiny_config() {
  ModelConfig c = test::streaming_tiny_config(4);
  c.model_type = "gemma3_text";
  c.qk_norm = true;
  c.tie_word_embeddings = true;
  c.mlp_activation = MlpActivation::GeluTanh;
  c.norm_weight_offset = 1.0;
  c.sandwich_norms = true;
  c.scale_embeddings = true;
  c.padding_idx = 0;
  c.query_pre_attn_scalar = 12;
  c.sliding_window = 5;  // < kSeq
  c.layer_types = {LayerAttention::Sliding, LayerAttention::Full, LayerAttention::Sliding, LayerAttention::Full};
  c.rope_theta = 1e6;
  c.local_rope = true;
  c.local_rope_theta = 1e4;
  return c;
}

TEST_F(StreamingInvariance, Gemma3AndMistralWindowsMatchBitwise) {
  const ModelConfig g = gemma3_tiny_config();
  const Trajectory ref = run_reference(g);
  EXPECT_NE(ref.loss.front(), ref.loss.back());
  for (const char* policy : {"keep-all", "recompute-all", "megatrain", "milp"})
    expect_bitwise_equal(run_streaming(g, make_plan(request(g), policy), dir_), ref, std::string("gemma3 ") + policy);
  expect_bitwise_equal(run_streaming(g, offloading_milp_plan(g), dir_), ref, "gemma3 milp offload");
  expect_bitwise_equal(run_streaming(g, make_plan(request(g), "megatrain"), dir_, make_emu_backend(2, 2)), ref,
                       "gemma3 emu megatrain");
  const RunOptions bf16{.eight_bit = true, .precision = Precision::BF16};
  expect_bitwise_equal(run_streaming(g, make_plan(request(g), "megatrain"), dir_, make_emu_backend(), bf16),
                       run_reference(g, bf16), "gemma3 bf16 emu megatrain");
  const RunOptions docs{.document_mask = true};
  expect_bitwise_equal(run_streaming(g, offloading_milp_plan(g), dir_, make_cpu_backend(), docs),
                       run_reference(g, docs), "gemma3 documents milp offload");

  ModelConfig m = test::streaming_tiny_config(4);
  m.model_type = "mistral";
  m.sliding_window = 6;  // < kSeq
  const Trajectory mref = run_reference(m);
  ModelConfig full = m;
  full.sliding_window = 0;
  EXPECT_NE(mref.loss.front(), run_reference(full).loss.front()) << "the window should change the loss";
  expect_bitwise_equal(run_streaming(m, make_plan(request(m), "megatrain"), dir_), mref, "mistral megatrain");
  expect_bitwise_equal(run_streaming(m, offloading_milp_plan(m), dir_, make_emu_backend(5, 5)), mref,
                       "mistral emu milp offload");
}

// Qwen3.5 hybrid (Gated DeltaNet layers with their per-chunk states, and a gated
// full-attention layer with partial RoPE): layers of two sizes in one set of weight and
// gradient slots, each layer's own saved tensors, one scratch for the largest. The
// streamed executor gives the in-memory step's bits under every kind of plan, both
// backends, fp32 and bf16.
ModelConfig qwen3_5_tiny_config() {
  return test::qwen3_5_tiny_config({LayerKind::LinearAttention, LayerKind::Attention, LayerKind::LinearAttention,
                                    LayerKind::LinearAttention});
}

TEST_F(StreamingInvariance, Qwen35HybridLayersMatchBitwise) {
  const ModelConfig h = qwen3_5_tiny_config();
  const Trajectory ref = run_reference(h);
  EXPECT_NE(ref.loss.front(), ref.loss.back());
  for (const char* policy : {"keep-all", "recompute-all", "megatrain", "megatrain-code", "milp"})
    expect_bitwise_equal(run_streaming(h, make_plan(request(h), policy), dir_), ref, std::string("qwen3.5 ") + policy);
  expect_bitwise_equal(run_streaming(h, offloading_milp_plan(h), dir_), ref, "qwen3.5 milp offload");
  expect_bitwise_equal(run_streaming(h, make_plan(request(h), "megatrain"), dir_, make_emu_backend(2, 2)), ref,
                       "qwen3.5 emu megatrain");
  expect_bitwise_equal(run_streaming(h, offloading_milp_plan(h), dir_, make_emu_backend(5, 5)), ref,
                       "qwen3.5 emu milp offload");
  const RunOptions bf16{.eight_bit = true, .precision = Precision::BF16};
  const Trajectory ref16 = run_reference(h, bf16);
  expect_bitwise_equal(run_streaming(h, make_plan(request(h), "recompute-all"), dir_, make_cpu_backend(), bf16), ref16,
                       "qwen3.5 bf16 recompute-all");
  expect_bitwise_equal(run_streaming(h, make_plan(request(h), "megatrain"), dir_, make_emu_backend(), bf16), ref16,
                       "qwen3.5 bf16 emu megatrain");
}

// qwen3_moe: sparse layers (4 experts, top 2, renormalized) with a dense one among them
// (mlp_only_layers), so the weight and gradient slots hold layers of two sizes, and the
// MoE block's routing (int32) and expert projections among the saved tensors. The streamed
// executor gives the in-memory step's bits under every kind of plan, both backends, fp32
// and bf16, with documents.
ModelConfig qwen3_moe_tiny_config() {
  ModelConfig c = test::streaming_tiny_config(4);
  c.model_type = "qwen3_moe";
  c.qk_norm = true;
  c.moe.num_experts = 4;
  c.moe.experts_per_token = 2;
  c.moe.expert_intermediate = 48;
  c.moe.norm_topk_prob = true;
  c.moe.mlp_only_layers = {2};
  return c;
}

TEST_F(StreamingInvariance, Qwen3MoeLayersMatchBitwise) {
  const ModelConfig m = qwen3_moe_tiny_config();
  ASSERT_TRUE(m.layer_is_sparse(0) && !m.layer_is_sparse(2));
  const Trajectory ref = run_reference(m);
  EXPECT_NE(ref.loss.front(), ref.loss.back());
  for (const char* policy : {"keep-all", "recompute-all", "megatrain", "milp"})
    expect_bitwise_equal(run_streaming(m, make_plan(request(m), policy), dir_), ref, std::string("qwen3_moe ") + policy);
  expect_bitwise_equal(run_streaming(m, offloading_milp_plan(m), dir_), ref, "qwen3_moe milp offload");
  expect_bitwise_equal(run_streaming(m, offloading_milp_plan(m), dir_, make_emu_backend(5, 5)), ref,
                       "qwen3_moe emu milp offload");
  const RunOptions bf16{.eight_bit = true, .precision = Precision::BF16};
  expect_bitwise_equal(run_streaming(m, make_plan(request(m), "megatrain"), dir_, make_emu_backend(), bf16),
                       run_reference(m, bf16), "qwen3_moe bf16 emu megatrain");
  const RunOptions docs{.document_mask = true};
  expect_bitwise_equal(run_streaming(m, make_plan(request(m), "recompute-all"), dir_, make_cpu_backend(), docs),
                       run_reference(m, docs), "qwen3_moe documents recompute-all");

  // With the routers' load-balancing loss: summed over the forward windows before any
  // backward reads it, and not again by a recompute.
  ModelConfig a = m;
  a.moe.output_router_logits = true;
  a.moe.router_aux_loss_coef = 0.5;
  const Trajectory aref = run_reference(a);
  EXPECT_NE(aref.loss.front(), ref.loss.front()) << "the routers' loss should be in the loss";
  for (const char* policy : {"keep-all", "recompute-all", "megatrain"})
    expect_bitwise_equal(run_streaming(a, make_plan(request(a), policy), dir_), aref,
                         std::string("qwen3_moe router loss ") + policy);
  expect_bitwise_equal(run_streaming(a, offloading_milp_plan(a), dir_, make_emu_backend(5, 5)), aref,
                       "qwen3_moe router loss emu milp offload");
}

// qwen3_5_moe: the hybrid layers, each with the experts and the gated shared expert (the
// layer's dense MLP), and the routers' loss.
TEST_F(StreamingInvariance, Qwen35MoeLayersMatchBitwise) {
  ModelConfig h = qwen3_5_tiny_config();
  h.model_type = "qwen3_5_moe_text";
  h.moe.num_experts = 4;
  h.moe.experts_per_token = 2;
  h.moe.expert_intermediate = 32;
  h.moe.norm_topk_prob = true;
  h.moe.shared_expert_intermediate = h.intermediate_size;
  h.moe.output_router_logits = true;
  h.moe.router_aux_loss_coef = 0.1;
  const Trajectory ref = run_reference(h);
  EXPECT_NE(ref.loss.front(), ref.loss.back());
  for (const char* policy : {"keep-all", "recompute-all", "megatrain", "milp"})
    expect_bitwise_equal(run_streaming(h, make_plan(request(h), policy), dir_), ref,
                         std::string("qwen3_5_moe ") + policy);
  expect_bitwise_equal(run_streaming(h, offloading_milp_plan(h), dir_, make_emu_backend(5, 5)), ref,
                       "qwen3_5_moe emu milp offload");
  const RunOptions bf16{.eight_bit = true, .precision = Precision::BF16};
  expect_bitwise_equal(run_streaming(h, make_plan(request(h), "megatrain"), dir_, make_emu_backend(), bf16),
                       run_reference(h, bf16), "qwen3_5_moe bf16 emu megatrain");
}

}  // namespace
}  // namespace lt
