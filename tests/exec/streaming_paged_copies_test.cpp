// Paged bf16 copies in the executor (Plan::nvme_copy_layers, exec/copy_pager.h): a step
// whose plan pages them needs the update hook, which writes them; a plan whose copy read
// comes after the layer's backward is refused at setup; and a disk that dies under a
// copy's read back fails the step with the offload file named (the layer's backward
// never reads what did not arrive).
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/dtype.h"
#include "exec/backend.h"
#include "exec/streaming_executor.h"
#include "layers/compute_copy.h"
#include "memory/nvme_test_util.h"
#include "plan/baselines.h"
#include "plan/cost_model.h"
#include "plan/plan_request.h"
#include "plan/plan_validate.h"
#include "../plan/plan_test_util.h"
#include "streaming_test_util.h"
#include "streaming_trajectory.h"
#include "test_util.h"

namespace lt {
namespace {

using streaming_test::kBatch;
using streaming_test::kSeq;

// keep-all with layers 2..7 paging their states, masters and gradients, and layers 2..5
// their bf16 copies (the parts as asked: make_plan would take the fewest its host needs).
Plan paged_copies_plan(const ModelConfig& c) {
  PlanRequest req = streaming_test::request(c);
  req.nvme_state_layers = c.num_layers - 2;
  req.page_master = req.page_grads = req.page_copy = true;
  return plan_keep_all(req, build_cost_model(req));
}

StreamingOptions options(const std::string& dir, const ModelConfig& c) {
  StreamingOptions so;
  so.offload_dir = dir;
  so.direct_io = false;
  so.precision = Precision::BF16;
  so.master_offset = 4096;  // one-page state and masters parts (the executor reads neither)
  so.grad_offset = 8192;
  so.layer_state_bytes = so.grad_offset + NvmeStore::round_up(static_cast<size_t>(max_block_numel(c)) * 4) + 4096;
  return so;
}

TEST(StreamingPagedCopies, NeedTheUpdateHookAndTheirWindows) {
  const ModelConfig c = test::streaming_tiny_config(8);
  const Plan plan = paged_copies_plan(c);
  ASSERT_EQ(plan.nvme_copy_layers, (std::vector<int>{2, 3, 4, 5}));
  ASSERT_TRUE(validate_plan(plan).empty()) << validate_plan(plan).front();
  test::TempDir dir("exec-paged-copies");
  auto backend = make_cpu_backend();
  StreamingExecutor ex(plan, *backend, options(dir.str(), c));
  ModelParameters params(c), grads(c);
  test::init_parameters(params, 7);
  ComputeCopy copy(Precision::BF16);
  copy.refresh(params);
  std::vector<int32_t> ids, labels;
  test::make_batch(ids, labels, kBatch * kSeq, c.vocab_size, 0);
  StepOptions o;
  o.compute_copy = copy.data(params);
  const std::string m = test::error_of([&] { ex.step(params, grads, ids.data(), labels.data(), o); });
  EXPECT_NE(m.find("the update hook writes"), std::string::npos) << m;

  // cp.3's read moved to the epilogue, after layer 3's backward.
  Plan late = plan;
  ASSERT_TRUE(test::move_to_last_window(late, "cp.3", Link::NvmeRead));
  const std::string refused = test::error_of([&] { StreamingExecutor bad(late, *backend, options(dir.str(), c)); });
  EXPECT_NE(refused.find("layer 3's bf16 copy"), std::string::npos) << refused;
  EXPECT_NE(refused.find("not before its backward"), std::string::npos) << refused;
}

TEST(StreamingPagedCopies, DiskDyingUnderTheirReadFailsTheStepNamingTheFile) {
  test::TempDir scratch("exec-eio-copies");
  std::string why;
  auto mnt = test::ScratchMount::ext4_loop(scratch.path() / "disk.img", scratch.path() / "mnt", 32 << 20, &why);
  if (!mnt) GTEST_SKIP() << why;
  const ModelConfig c = test::streaming_tiny_config(8);
  const Plan plan = paged_copies_plan(c);
  ModelParameters params(c), grads(c);
  test::init_parameters(params, 7);
  ComputeCopy copy(Precision::BF16);
  copy.refresh(params);
  auto backend = make_cpu_backend();
  StreamingExecutor ex(plan, *backend, options(mnt->path().string(), c));
  const std::string file = ex.offload_file();
  std::vector<int32_t> ids, labels;
  test::make_batch(ids, labels, kBatch * kSeq, c.vocab_size, 0);
  // The hook writes each paged copy from the parameters (no update runs).
  const LazyUpdateHook hook = [&](const UpdateTarget& t, std::span<std::byte>) {
    if (t.kind == UpdateTarget::Kind::Layer && ex.copy_paged(t.layer))
      convert_f32_to_bf16(ex.paged_copy(t.layer), params.block_base(t.layer), block_numel(c, t.layer));
  };
  std::string shut_error;
  StepOptions o;
  o.update = &hook;
  o.compute_copy = copy.data(params);
  o.before_window = [&](int w) {
    if (w == ex.schedule().copy_read_w[3]) shut_error = mnt->shut_down();
  };
  const std::string m = test::error_of([&] { ex.step(params, grads, ids.data(), labels.data(), o); });
  if (!shut_error.empty()) GTEST_SKIP() << shut_error;
  EXPECT_NE(m.find("Input/output error"), std::string::npos) << m;
  EXPECT_NE(m.find("offload file " + file + " at offset "), std::string::npos) << m;
}

}  // namespace
}  // namespace lt
