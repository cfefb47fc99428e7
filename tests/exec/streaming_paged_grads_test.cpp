// Paged gradients in the executor (StreamingOptions::grad_offset, Plan::nvme_grad_layers):
// after a step, a paged layer's gradients are in its NVMe slot, whole, bit for bit what
// backward computed, at their place in the pages covering the layer's block, and never came
// to the host gradient block (it stays zero); the other layers' are there, a paged layer
// that keeps its gradients on the host among them. The next step's update hook finds them in
// its slot. On both backends (the cpu sums in place, emu drains from its slots).
#include <algorithm>
#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "exec/backend.h"
#include "exec/streaming_executor.h"
#include "layers/model_step.h"
#include "memory/nvme_test_util.h"
#include "memory/page_interior.h"
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

// ModelStep's gradients of `params` on the batch (the executor's, bit for bit).
std::vector<float> reference_grads(const ModelConfig& c, const ModelParameters& params, const std::vector<int32_t>& ids,
                                   const std::vector<int32_t>& labels) {
  ModelParameters p(c), g(c);
  std::memcpy(p.data(), params.data(), p.numel() * sizeof(float));
  ModelStep ms(c, kBatch, kSeq, Precision::F32);
  ms.forward_backward(p, g, ids.data(), labels.data());
  return {g.data(), g.data() + g.numel()};
}

// keep-all with layers 3..5 paging their states and gradients (the parts as asked:
// make_plan would take the fewest its host needs).
Plan paged_grads_plan(const ModelConfig& c) {
  PlanRequest req = streaming_test::request(c);
  req.nvme_state_layers = 3;
  req.page_grads = true;
  return plan_keep_all(req, build_cost_model(req));
}

// The pages covering layer j's gradients: the slot's layout of them from grad_offset on.
PageSpan grad_cover(ModelParameters& grads, int j) {
  return page_cover(grads.block_base(j), static_cast<size_t>(block_numel(grads.config(), j)) * sizeof(float));
}

// Where in a slot layer j's first gradient lies.
size_t slot_offset(ModelParameters& grads, int j, size_t grad_offset) {
  const auto* first = reinterpret_cast<std::byte*>(grads.block_base(j));
  return grad_offset + static_cast<size_t>(first - grad_cover(grads, j).begin);
}

TEST(StreamingPagedGradients, GoToTheirSlotsAndNeverToTheHostBlock) {
  test::TempDir dir("exec-paged-grads");
  const ModelConfig c = test::streaming_tiny_config(6);
  Plan all = paged_grads_plan(c), mixed = all;
  ASSERT_EQ(all.nvme_state_layers, (std::vector<int>{3, 4, 5}));
  ASSERT_EQ(all.nvme_grad_layers, all.nvme_state_layers);
  test::keep_on_host(mixed, 4, /*masters=*/false);
  ASSERT_EQ(mixed.nvme_grad_layers, (std::vector<int>{3, 5}));
  for (const auto& [backend_name, plan] : {std::pair{"cpu", all}, std::pair{"emu", all}, std::pair{"cpu", mixed},
                                           std::pair{"emu", mixed}}) {
    SCOPED_TRACE(std::string(backend_name) + (plan.nvme_grad_layers.size() < 3 ? ", layer 4's on the host" : ""));
    ASSERT_TRUE(validate_plan(plan).empty()) << validate_plan(plan).front();
    ModelParameters params(c), grads(c);
    test::init_parameters(params, 7);
    auto backend = make_backend(backend_name);
    StreamingOptions so;
    so.offload_dir = dir.path();
    so.direct_io = false;
    so.grad_offset = 4096;  // a one-page state part
    size_t most = 0;
    for (int j : plan.nvme_grad_layers) most = std::max(most, grad_cover(grads, j).bytes);
    ASSERT_GT(most, 0u);
    so.layer_state_bytes = so.grad_offset + most;
    StreamingExecutor ex(plan, *backend, so);

    std::vector<int32_t> ids, labels;
    std::vector<std::vector<float>> ref;
    std::vector<int> hooked;  // layers whose hook found their previous gradients in the slot
    const LazyUpdateHook hook = [&](const UpdateTarget& t, std::span<std::byte> slot) {
      if (slot.empty() || ref.size() < 2) return;
      const auto* want = reinterpret_cast<const std::byte*>(ref[0].data() + (grads.block_base(t.layer) - grads.data()));
      if (std::memcmp(slot.data() + slot_offset(grads, t.layer, so.grad_offset), want,
                      static_cast<size_t>(block_numel(c, t.layer)) * sizeof(float)) == 0)
        hooked.push_back(t.layer);
    };
    StepOptions o;
    o.update = &hook;
    for (int s = 0; s < 2; ++s) {
      test::make_batch(ids, labels, kBatch * kSeq, c.vocab_size, s);
      ref.push_back(reference_grads(c, params, ids, labels));
      ex.step(params, grads, ids.data(), labels.data(), o);
      std::vector<std::byte> slot(so.layer_state_bytes);
      for (int j = 0; j < c.num_layers; ++j) {
        const auto* want = reinterpret_cast<const std::byte*>(ref.back().data());
        auto* got = reinterpret_cast<const std::byte*>(grads.data());
        const size_t begin = static_cast<size_t>(grads.block_base(j) - grads.data()) * sizeof(float);
        const size_t end = begin + static_cast<size_t>(block_numel(c, j)) * sizeof(float);
        if (!plan.grads_paged(j)) {
          EXPECT_EQ(std::memcmp(got + begin, want + begin, end - begin), 0) << "layer " << j << "'s gradients";
          continue;
        }
        const std::vector<std::byte> zeros(end - begin);
        EXPECT_EQ(std::memcmp(got + begin, zeros.data(), end - begin), 0)
            << "layer " << j << "'s paged gradients came to the gradient block";
        ex.read_paged_state(j, {slot.data(), slot.size()});
        EXPECT_EQ(std::memcmp(slot.data() + slot_offset(grads, j, so.grad_offset), want + begin, end - begin), 0)
            << "layer " << j << "'s slot does not hold its gradients";
      }
    }
    EXPECT_EQ(hooked, plan.nvme_grad_layers) << "the update hook did not find the last gradients in the slots";
  }
}

// Paged layers share three host buffers for their gradients (j % 3): a plan that writes a
// layer's gradients after the backward of the paged layer that reuses its buffer is
// refused at setup, naming both.
TEST(StreamingPagedGradients, APlanWritingThemAfterTheirBufferIsReusedIsRefused) {
  const ModelConfig c = test::streaming_tiny_config(6);
  PlanRequest req = streaming_test::request(c);
  req.nvme_state_layers = 4;  // layers 2..5: 2 and 5 share a buffer
  req.page_grads = true;
  Plan plan = plan_keep_all(req, build_cost_model(req));
  // gs.5 moves to the epilogue, after layer 2's backward (layer 2 reuses layer 5's buffer).
  ASSERT_TRUE(test::move_to_last_window(plan, "gs.5", Link::NvmeWrite)) << "the plan writes no gs.5";
  ASSERT_EQ(plan.windows.back().kind, WindowKind::Epilogue);
  test::TempDir dir("exec-late-grads");
  auto backend = make_cpu_backend();
  StreamingOptions so;
  so.offload_dir = dir.path();
  so.direct_io = false;
  so.grad_offset = 4096;
  so.layer_state_bytes = 4 * so.grad_offset + static_cast<size_t>(max_block_numel(c)) * sizeof(float);
  const std::string m = test::error_of([&] { StreamingExecutor ex(plan, *backend, so); });
  EXPECT_NE(m.find("layer 5's paged gradients"), std::string::npos) << m;
  EXPECT_NE(m.find("layer 2's backward"), std::string::npos) << m;
}

// A disk that dies under a gradient write: the step fails with an lt::Error naming the
// offload file.
TEST(StreamingPagedGradients, DiskDyingUnderTheirWriteFailsTheStepNamingTheFile) {
  test::TempDir scratch("exec-eio-grads");
  std::string why;
  auto mnt = test::ScratchMount::ext4_loop(scratch.path() / "disk.img", scratch.path() / "mnt", 32 << 20, &why);
  if (!mnt) GTEST_SKIP() << why;
  const ModelConfig c = test::streaming_tiny_config(6);
  const Plan plan = paged_grads_plan(c);
  ModelParameters params(c), grads(c);
  test::init_parameters(params, 7);
  auto backend = make_cpu_backend();
  StreamingOptions so;
  so.offload_dir = mnt->path();
  so.grad_offset = 4096;
  // The largest paged layer's cover: each is page-rounded around where its gradients lie, so
  // two layers of one size may differ by a page (taking layer 5's failed now and then).
  size_t most = 0;
  for (int j : plan.nvme_grad_layers) most = std::max(most, grad_cover(grads, j).bytes);
  so.layer_state_bytes = so.grad_offset + most;
  StreamingExecutor ex(plan, *backend, so);
  const std::string file = ex.offload_file();
  std::vector<int32_t> ids, labels;
  test::make_batch(ids, labels, kBatch * kSeq, c.vocab_size, 0);
  std::string shut_error;
  StepOptions o;
  o.before_window = [&](int w) {
    if (w == ex.schedule().grad_write_w[5]) shut_error = mnt->shut_down();
  };
  const std::string m = test::error_of([&] { ex.step(params, grads, ids.data(), labels.data(), o); });
  if (!shut_error.empty()) GTEST_SKIP() << shut_error;
  EXPECT_NE(m.find("Input/output error"), std::string::npos) << m;
  EXPECT_NE(m.find("offload file " + file + " at offset "), std::string::npos) << m;
}

}  // namespace
}  // namespace lt
