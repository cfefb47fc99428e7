// Paged gradients in the executor (StreamingOptions::grad_offset, Plan::paged_grads): after
// a step, a paged layer's whole gradient pages are in its NVMe slot, bit for bit what
// backward computed, and gone from host memory (they read as zeros); the ends of its block
// stay. The next step's update hook finds them in its slot, and the step's norm is the
// reference's. On both backends (the cpu sums in place, emu drains from its slots).
#include <cstring>
#include <span>
#include <string>
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

PageSpan grad_pages(ModelParameters& grads, int j) {
  return page_interior(grads.block_base(j), static_cast<size_t>(block_numel(grads.config(), j)) * sizeof(float));
}

// The pages covering layer j's gradients: the slot's layout of them from grad_offset on.
PageSpan grad_cover(ModelParameters& grads, int j) {
  return page_cover(grads.block_base(j), static_cast<size_t>(block_numel(grads.config(), j)) * sizeof(float));
}

// Where in a slot layer j's whole gradient pages lie.
size_t slot_offset(ModelParameters& grads, int j, size_t grad_offset) {
  return grad_offset + static_cast<size_t>(grad_pages(grads, j).begin - grad_cover(grads, j).begin);
}

TEST(StreamingPagedGradients, GoToTheirSlotsAndLeaveTheHost) {
  test::TempDir dir("exec-paged-grads");
  const ModelConfig c = test::streaming_tiny_config(6);
  const Plan plan = paged_grads_plan(c);
  ASSERT_TRUE(plan.paged_grads);
  ASSERT_EQ(plan.nvme_state_layers, (std::vector<int>{3, 4, 5}));
  ASSERT_TRUE(validate_plan(plan).empty()) << validate_plan(plan).front();
  for (const char* backend_name : {"cpu", "emu"}) {
    SCOPED_TRACE(backend_name);
    ModelParameters params(c), grads(c);
    test::init_parameters(params, 7);
    const auto pages = [&](int j) { return grad_pages(grads, j); };
    auto backend = make_backend(backend_name);
    StreamingOptions so;
    so.offload_dir = dir.path();
    so.direct_io = false;
    so.grad_offset = 4096;  // a one-page state part
    size_t most = 0;
    for (int j : plan.nvme_state_layers) most = std::max(most, grad_cover(grads, j).bytes);
    ASSERT_GT(most, 0u);
    so.layer_state_bytes = so.grad_offset + most;
    StreamingExecutor ex(plan, *backend, so);

    std::vector<int32_t> ids, labels;
    std::vector<std::vector<float>> ref;
    std::vector<int> hooked;  // layers whose hook found their previous gradients in the slot
    const LazyUpdateHook hook = [&](const UpdateTarget& t, std::span<std::byte> slot) {
      if (slot.empty() || ref.size() < 2) return;
      const PageSpan p = pages(t.layer);
      const std::byte* want = reinterpret_cast<const std::byte*>(ref[0].data()) +
                              (p.begin - reinterpret_cast<std::byte*>(grads.data()));
      if (std::memcmp(slot.data() + slot_offset(grads, t.layer, so.grad_offset), want, p.bytes) == 0)
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
        const bool paged = j >= 3;
        const PageSpan p = pages(j);
        const size_t lo = paged ? static_cast<size_t>(p.begin - got) : end, hi = paged ? lo + p.bytes : end;
        EXPECT_EQ(std::memcmp(got + begin, want + begin, lo - begin), 0) << "layer " << j << "'s gradients (head)";
        EXPECT_EQ(std::memcmp(got + hi, want + hi, end - hi), 0) << "layer " << j << "'s gradients (tail)";
        if (!paged) continue;
        const std::vector<std::byte> zeros(p.bytes);
        EXPECT_EQ(std::memcmp(p.begin, zeros.data(), p.bytes), 0) << "layer " << j << "'s gradient pages stayed";
        ex.read_paged_state(j, {slot.data(), slot.size()});
        EXPECT_EQ(std::memcmp(slot.data() + slot_offset(grads, j, so.grad_offset), want + lo, p.bytes), 0)
            << "layer " << j << "'s slot does not hold its gradients";
      }
    }
    EXPECT_EQ(hooked, (std::vector<int>{3, 4, 5})) << "the update hook did not find the last gradients in the slots";
  }
}

// A disk that dies under a gradient write: the step fails with an lt::Error naming the
// offload file, and the gradients stay in host memory (their pages are released only once
// written), bit for bit what backward computed.
TEST(StreamingPagedGradients, DiskDyingUnderTheirWriteKeepsThemOnTheHost) {
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
  so.layer_state_bytes = so.grad_offset + grad_cover(grads, 5).bytes;
  StreamingExecutor ex(plan, *backend, so);
  const std::string file = ex.offload_file();
  std::vector<int32_t> ids, labels;
  test::make_batch(ids, labels, kBatch * kSeq, c.vocab_size, 0);
  const std::vector<float> ref = reference_grads(c, params, ids, labels);
  std::string shut_error;
  StepOptions o;
  o.before_window = [&](int w) {
    if (w == ex.schedule().grad_write_w[5]) shut_error = mnt->shut_down();
  };
  const std::string m = test::error_of([&] { ex.step(params, grads, ids.data(), labels.data(), o); });
  if (!shut_error.empty()) GTEST_SKIP() << shut_error;
  EXPECT_NE(m.find("Input/output error"), std::string::npos) << m;
  EXPECT_NE(m.find("offload file " + file + " at offset "), std::string::npos) << m;
  const PageSpan p = grad_pages(grads, 5);
  const auto* want = reinterpret_cast<const std::byte*>(ref.data()) + (p.begin - reinterpret_cast<std::byte*>(grads.data()));
  EXPECT_EQ(std::memcmp(p.begin, want, p.bytes), 0) << "layer 5's gradients left the host without reaching the disk";
}

}  // namespace
}  // namespace lt
