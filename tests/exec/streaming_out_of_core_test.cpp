// Out-of-core training (issue 4, section 6): a model whose training state (fp32 weights,
// gradients, the two AdamW moments, and every activation a step can save) is at
// least twice the compute-tier budget trains on the cpu backend, its checkpoints partly on
// host and NVMe as the MILP decides under that budget, and its five steps match the
// in-memory run bitwise.
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "exec/backend.h"
#include "exec/streaming_executor.h"
#include "plan/cost_model.h"
#include "plan/planner.h"
#include "streaming_test_util.h"
#include "streaming_trajectory.h"

namespace lt {
namespace {

using namespace streaming_test;

TEST(StreamingOutOfCore, StateTwiceTheComputeBudgetTrainsBitwiseLikeInMemory) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("lt-streaming-ooc-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const ModelConfig c = test::streaming_tiny_config(6);
  const Plan plan = offloading_milp_plan(c);  // the tightest budgets that use host and NVMe
  ASSERT_TRUE(plan.feasible && !plan.windows.empty()) << "no budget made the MILP use both host and NVMe";
  const Plan::TierCounts tc = plan.tier_counts();
  EXPECT_GT(tc.nvme, 0.0);

  size_t budget = 0, all_activations = 0, nvme_file = 0;
  {
    auto cpu = make_cpu_backend();
    StreamingOptions so;
    so.offload_dir = dir;
    so.direct_io = false;
    StreamingExecutor ooc(plan, *cpu, so);
    // Everything a step could hold at once: every boundary and every layer's internals
    // on the compute tier (the MILP's plan may keep some internals too).
    const PlanRequest req = request(c);
    const CostModel cm = build_cost_model(req);
    Decisions keep = all_gpu_decisions(static_cast<int>(c.num_layers), "keep-all-internals");
    keep.keep_internals.assign(c.num_layers, true);
    ASSERT_TRUE(assign_asap_traffic(keep, cm));
    Plan keep_plan = build_plan(req, cm, keep);
    evaluate_plan(keep_plan);
    StreamingExecutor keep_all(keep_plan, *cpu);
    budget = ooc.arena_bytes();
    all_activations = keep_all.arena_bytes();
    nvme_file = ooc.nvme_bytes();
  }
  const ModelParameters probe(c);
  const size_t state = static_cast<size_t>(probe.numel()) * sizeof(float) * 4 + all_activations;
  RecordProperty("compute_budget_bytes", std::to_string(budget));
  RecordProperty("training_state_bytes", std::to_string(state));
  EXPECT_GE(state, 2 * budget) << "training state " << state << " vs compute budget " << budget;
  EXPECT_GT(all_activations, budget) << "the activations alone must not fit";
  EXPECT_GT(nvme_file, 0u);
  SCOPED_TRACE("gpu=" + std::to_string(tc.gpu) + " cpu=" + std::to_string(tc.cpu) + " nvme=" + std::to_string(tc.nvme) +
               " recompute=" + std::to_string(tc.recompute) + " budget=" + std::to_string(budget) +
               " state=" + std::to_string(state));

  expect_bitwise_equal(run_streaming(c, plan, dir), run_reference(c), "out-of-core milp");
  std::filesystem::remove_all(dir);
}

// Host memory 1% short of the host state: the planner pages optimizer states from NVMe
// (the MILP chooses which layers and when their states move; the rule would page the top
// four, with three staging slots), and the run, with the hybrid 8-bit AdamW, still matches
// the in-memory one bit for bit: losses, gradients, parameters, and every layer's
// optimizer state, the paged ones read back from their NVMe slots.
TEST(StreamingOutOfCore, OptimizerStatesPagedFromNvmeTrainBitwiseLikeInMemory) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("lt-streaming-paged-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const ModelConfig c = test::streaming_tiny_config(6);
  const CostModel cm = build_cost_model(c, test::streaming_cpu_profile(), kBatch, kSeq);
  const double host = 0.99 * cm.host_state_bytes / 0.9;  // PlanRequest::cpu_budget keeps 10% back
  const Plan plan = offloading_milp_plan(c, host);
  ASSERT_TRUE(plan.feasible && !plan.windows.empty()) << "no budget made the MILP use both host and NVMe";
  EXPECT_FALSE(plan.nvme_state_layers.empty());
  EXPECT_LE(plan.nvme_state_layers.size(), 4u) << "more states paged than the rule needs";
  EXPECT_LE(plan.host_state_bytes, 0.9 * host);
  const RunOptions eight_bit{.eight_bit = true};
  expect_bitwise_equal(run_streaming(c, plan, dir, make_cpu_backend(), eight_bit), run_reference(c, eight_bit),
                       "paged optimizer states, cpu");
  expect_bitwise_equal(run_streaming(c, plan, dir, make_emu_backend(5, 5), eight_bit), run_reference(c, eight_bit),
                       "paged optimizer states, emu");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace lt
