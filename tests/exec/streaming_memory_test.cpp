// The compute tier, window by window: on the emu backend (weights, gradients and
// activations all in the arena) the executor never holds more bytes at once than the plan
// it runs accounts for in that window (its allocations so far plus the window's
// workspace and the two fixed weight slots; gradient slots are allocations from their
// layer's backward to their drain). The plans use fp32 activations,
// the executor's, so the two count the same tensors in the same units. Covers the head's
// weight and gradient slots, recompute blocks longer than two layers (whose weights load
// once for RC and again for B), and bf16 weight slots (plans at 2 bytes a weight).
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "exec/backend.h"
#include "exec/streaming_executor.h"
#include "layers/compute_copy.h"
#include "model/parameters.h"
#include "plan/planner.h"
#include "streaming_test_util.h"
#include "streaming_trajectory.h"

namespace lt {
namespace {

using namespace streaming_test;

// Per window: the plan's compute-tier bytes at its fullest (plan/plan_evaluate.cpp's rule).
std::vector<double> planned_live(const Plan& p) {
  std::vector<double> out;
  double live = p.fixed_gpu_bytes;
  for (const Window& w : p.windows) {
    for (const MemOp& a : w.alloc) live += a.bytes;
    out.push_back(live + w.workspace_bytes);
    for (const MemOp& f : w.free) live -= f.bytes;
  }
  return out;
}

TEST(StreamingMemory, EmuComputeTierStaysWithinThePlanInEveryWindow) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("lt-streaming-mem-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const ModelConfig c = test::streaming_tiny_config(6);
  PlanRequest req = request(c);
  req.hardware.act_bytes = 4;  // the executor's activations are fp32
  struct Case {
    Plan plan;
    Precision precision;
  };
  std::vector<Case> cases;
  for (const char* policy : {"keep-all", "recompute-all", "megatrain", "megatrain-code", "milp"})
    cases.push_back({make_plan(req, policy), Precision::F32});
  // bf16 compute: bf16 weight slots, so the plan counts weights at 2 bytes.
  PlanRequest bf16_req = req;
  bf16_req.hardware.weight_bytes = 2;
  for (const char* policy : {"recompute-all", "megatrain"}) cases.push_back({make_plan(bf16_req, policy), Precision::BF16});
  cases.push_back({offloading_milp_plan(c), Precision::F32});  // bf16 activations: checked against its own arena only
  ModelParameters params(c), grads(c);
  test::init_parameters(params, 7);
  ComputeCopy copy(Precision::BF16);
  copy.refresh(params);
  std::vector<int32_t> ids, labels;
  test::make_batch(ids, labels, kBatch * kSeq, c.vocab_size, 0);
  for (const auto& [plan, precision] : cases) {
    ASSERT_TRUE(plan.feasible) << plan.policy << ": " << plan.infeasible_reason;
    auto emu = make_emu_backend();
    StreamingOptions so;
    so.offload_dir = dir;
    so.direct_io = false;
    so.precision = precision;
    StreamingExecutor ex(plan, *emu, so);
    grads.zero();
    StepOptions o;
    o.compute_copy = copy.data(params);
    const StreamingStepResult r = ex.step(params, grads, ids.data(), labels.data(), o);
    EXPECT_LE(ex.measured_peak_bytes(), ex.planned_peak_bytes()) << plan.policy;
    if (plan.hardware.act_bytes != 4) continue;
    const std::vector<double> bound = planned_live(plan);
    ASSERT_EQ(r.compute_bytes.size(), plan.windows.size());
    for (size_t w = 0; w < plan.windows.size(); ++w)
      EXPECT_LE(r.compute_bytes[w].second, bound[w])
          << plan.policy << " window " << plan.windows[w].name << ": the executor holds more than the plan";
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace lt
