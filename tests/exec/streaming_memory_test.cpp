// The compute tier, window by window, on the emu backend (weights, gradients and
// activations all in the arena): a plan's alloc and free are the executor's arena
// requests, name for name; a plan made for the step it runs (fp32 activations, the
// executor's weight slots and kernel scratch at its precision) counts exactly the bytes
// the executor holds in every window, and the executor's measured peak is the plan's. Covers the head's weight
// and gradient slots, recompute blocks longer than two layers (whose weights load once
// for RC and again for B), kept internals, bf16 weight slots, and Qwen3.5's hybrid
// layers (DeltaNet and attention layers of different sizes in one set of slots).
// megatrain-code keeps two weight slots for the whole step, and a plan with bf16
// activations counts other bytes than this fp32 executor: the executor holds no more than
// they count.
#include <unistd.h>

#include <filesystem>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "exec/backend.h"
#include "exec/streaming_executor.h"
#include "layers/compute_copy.h"
#include "model/parameters.h"
#include "plan/planner.h"
#include "sim/simulator.h"
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

// The plan's alloc and free are the executor's arena requests (plan/stream_schedule.h),
// name for name and window for window, and with the same bytes when the plan is made for
// this executor's sizes.
void expect_plan_memory_is_the_arena(const Plan& p, const StreamSchedule& s, bool same_bytes, const std::string& what) {
  using Op = std::tuple<int, std::string, double>;  // window, tensor, bytes
  std::multiset<Op> plan_alloc, plan_free, arena_alloc, arena_free;
  for (int w = 0; w < static_cast<int>(p.windows.size()); ++w) {
    for (const MemOp& a : p.windows[w].alloc) plan_alloc.insert({w, a.tensor, same_bytes ? a.bytes : 0});
    for (const MemOp& f : p.windows[w].free) plan_free.insert({w, f.tensor, same_bytes ? f.bytes : 0});
  }
  for (const ArenaRequest& r : s.arena) {
    const double bytes = same_bytes ? static_cast<double>(r.bytes) : 0;
    arena_alloc.insert({r.first_window, r.name, bytes});
    arena_free.insert({r.last_window, r.name, bytes});
  }
  EXPECT_EQ(plan_alloc, arena_alloc) << what << ": the plan allocates other than the executor's arena";
  EXPECT_EQ(plan_free, arena_free) << what << ": the plan frees other than the executor's arena";
  EXPECT_FALSE(arena_alloc.empty()) << what;
}

// One step of each plan for c on the emu backend, window by window against the plan.
void expect_plans_count_the_executors_bytes(const ModelConfig& c, bool with_offloading_plan) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("lt-streaming-mem-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  struct Case {
    Plan plan;
    Precision precision;
    bool exact;  // the plan counts exactly what the executor holds, window by window
  };
  std::vector<Case> cases;
  for (Precision precision : {Precision::F32, Precision::BF16}) {
    PlanRequest req = request(c);
    req.hardware.act_bytes = 4;  // the executor's activations are fp32
    req.hardware.weight_bytes = precision == Precision::BF16 ? 2 : 4;  // its weight slots
    req.scratch = executor_scratch(c, kBatch, kSeq, cpu_kernel_table(), precision);  // this step's
    for (const char* policy : {"keep-all", "recompute-all", "megatrain", "milp"})
      cases.push_back({make_plan(req, policy), precision, true});
    // megatrain-code holds two weight slots for the whole step (plan/baselines.cpp).
    cases.push_back({make_plan(req, "megatrain-code"), precision, false});
  }
  if (with_offloading_plan)  // bf16 activations: its own arena only
    cases.push_back({offloading_milp_plan(c), Precision::F32, false});
  ModelParameters params(c), grads(c);
  test::init_parameters(params, 7);
  ComputeCopy copy(Precision::BF16);
  copy.refresh(params);
  std::vector<int32_t> ids, labels;
  test::make_batch(ids, labels, kBatch * kSeq, c.vocab_size, 0);
  for (const auto& [plan, precision, exact] : cases) {
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
    if (plan.policy != "megatrain-code")  // MegaTrain's code's accounting, under its own names
      expect_plan_memory_is_the_arena(plan, ex.schedule(), exact, c.model_type + " " + plan.policy);
    if (exact) {  // the plan's peak, and the window replay's (sim/simulator.h), are the executor's
      EXPECT_EQ(static_cast<double>(ex.measured_peak_bytes()), plan.predicted_peak.gpu) << plan.policy;
      EXPECT_EQ(simulate_plan(plan).peak.gpu, plan.predicted_peak.gpu) << plan.policy;
    }
    if (plan.hardware.act_bytes != 4) continue;
    const std::vector<double> bound = planned_live(plan);
    ASSERT_EQ(r.compute_bytes.size(), plan.windows.size());
    for (size_t w = 0; w < plan.windows.size(); ++w) {
      const std::string what = c.model_type + " " + plan.policy + (precision == Precision::BF16 ? " bf16" : "") +
                               " window " + plan.windows[w].name;
      if (exact)
        EXPECT_EQ(r.compute_bytes[w].second, bound[w]) << what << ": the executor holds other than the plan";
      else
        EXPECT_LE(r.compute_bytes[w].second, bound[w]) << what << ": the executor holds more than the plan";
    }
  }
  std::filesystem::remove_all(dir);
}

TEST(StreamingMemory, EmuComputeTierIsThePlansInEveryWindow) {
  expect_plans_count_the_executors_bytes(test::streaming_tiny_config(6), true);
}

// Qwen3.5 hybrid layers: Gated DeltaNet and gated attention layers of different sizes, saved
// tensors and scratch in one set of slots.
TEST(StreamingMemory, HybridLayersTooAreThePlansInEveryWindow) {
  expect_plans_count_the_executors_bytes(
      test::qwen3_5_tiny_config({LayerKind::LinearAttention, LayerKind::Attention, LayerKind::LinearAttention,
                                 LayerKind::LinearAttention}),
      false);
}

}  // namespace
}  // namespace lt
