// The streaming executor's setup errors: plans it cannot run, and an NVMe tier with no
// directory, are lt::Errors before step 1, never a crash mid-step.
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "core/error.h"
#include "exec/backend.h"
#include "exec/streaming_executor.h"
#include "plan/planner.h"
#include "streaming_test_util.h"
#include "test_util.h"

namespace lt {
namespace {

PlanRequest tiny_request() {
  PlanRequest req;
  req.model_name = "streaming-tiny";
  req.model = test::streaming_tiny_config(4);
  req.hardware = test::streaming_cpu_profile();
  req.batch = 2;
  req.seq = 16;
  return req;
}

TEST(StreamingErrors, InfeasiblePlanIsRejectedAtSetup) {
  Plan p = make_plan(tiny_request(), "keep-all");
  p.feasible = false;
  p.infeasible_reason = "test";
  auto backend = make_cpu_backend();
  EXPECT_THROW(StreamingExecutor(p, *backend), Error);
}

TEST(StreamingErrors, RecomputedBoundaryWithoutRecomputeWindowIsRejected) {
  Plan p = make_plan(tiny_request(), "keep-all");
  p.boundaries[2].recompute = true;  // no RC window produces it
  auto backend = make_cpu_backend();
  EXPECT_THROW(StreamingExecutor(p, *backend), Error);
}

TEST(StreamingErrors, NvmeTokensWithoutOffloadDirAreAClearError) {
  Plan p = make_plan(tiny_request(), "keep-all");
  p.boundaries[1] = BoundaryPlacement{false, 0.5, 0.0, 0.5};
  auto backend = make_cpu_backend();
  try {
    StreamingExecutor ex(p, *backend);
    FAIL() << "expected an lt::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("offload"), std::string::npos) << e.what();
  }
}

TEST(StreamingErrors, PagedStatesWithoutTheirSizeAreAClearError) {
  PlanRequest req = tiny_request();
  req.nvme_state_layers = 2;
  const Plan p = make_plan(req, "milp");
  ASSERT_EQ(p.nvme_state_layers.size(), 2u);
  auto backend = make_cpu_backend();
  StreamingOptions so;
  so.offload_dir = std::filesystem::temp_directory_path();
  try {
    StreamingExecutor ex(p, *backend, so);  // layer_state_bytes left at 0
    FAIL() << "expected an lt::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer_state_bytes"), std::string::npos) << e.what();
  }
  so.offload_dir.clear();
  so.layer_state_bytes = 4096;
  try {
    StreamingExecutor ex(p, *backend, so);
    FAIL() << "expected an lt::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("offload"), std::string::npos) << e.what();
  }
}

// A plan that counts the executor's scratch but less than its kernels take (made for
// another executor, or edited) is refused at setup, naming both figures; one made
// without the figure (estimates, `lazytrain plan`) runs.
TEST(StreamingErrors, PlanCountingTooLittleScratchIsRejected) {
  PlanRequest req = tiny_request();
  const ExecutorScratch need = executor_scratch(req.model, req.batch, req.seq, cpu_kernel_table());
  for (bool head : {false, true}) {
    req.scratch = need;
    (head ? req.scratch.head_bytes : req.scratch.layer_bytes) = 64;
    auto cpu = make_cpu_backend();
    const std::string message = test::error_of([&] { StreamingExecutor ex(make_plan(req, "keep-all"), *cpu); });
    EXPECT_NE(message.find(head ? "cross-entropy scratch" : "layer-pass scratch"), std::string::npos) << message;
    EXPECT_NE(message.find("regenerate the plan"), std::string::npos) << message;
  }
  req.scratch = {};
  auto cpu = make_cpu_backend();
  EXPECT_NO_THROW(StreamingExecutor(make_plan(req, "keep-all"), *cpu));
  req.scratch = need;
  EXPECT_NO_THROW(StreamingExecutor(make_plan(req, "keep-all"), *cpu));
}

TEST(StreamingErrors, UnknownBackendNamesTheChoices) {
  EXPECT_THROW(make_backend("tpu"), Error);
  EXPECT_NE(make_backend("emu"), nullptr);
}

}  // namespace
}  // namespace lt
