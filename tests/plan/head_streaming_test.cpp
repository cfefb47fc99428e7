// The streamed head in plans (plan/plan.h, plan/cost_model.h HeadFootprint): its
// compute-tier bytes are two weight chunks and two gradient chunks (and the final norm),
// not the whole lm_head; its weight rows cross the link twice and its gradient rows once,
// in HEAD; a cap below any whole-head plan's need now plans; the MILP and greedy stream
// only when it helps, the megatrain rules never; plan files carry the chunk size (version
// 2) and still read version 1; the validator and the window replay understand the chunks.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "plan/baselines.h"
#include "plan/default_schedule.h"
#include "plan/head_streaming.h"
#include "plan/plan_builder.h"
#include "plan/plan_evaluate.h"
#include "plan/plan_json.h"
#include "plan/plan_validate.h"
#include "plan/planner.h"
#include "plan_test_util.h"
#include "sim/simulator.h"

namespace lt {
namespace {

// The tiny planner model with a vocabulary large enough that the head outweighs a
// streamed head: 131072 rows of 512, 8 chunks of kHeadChunkQuantum (16384).
PlanRequest big_vocab_request(int64_t vocab = 8 * kHeadChunkQuantum) {
  PlanRequest req = test::tiny_request(4, "h800", 8);
  req.model.vocab_size = vocab;
  req.time_limit_s = 10;
  return req;
}

double sum_over(const Plan& p, const std::string& prefix, Link link) {
  double s = 0;
  for (const Window& w : p.windows)
    for (const Transfer& t : w.transfers)
      if (t.link == link && t.tensor.rfind(prefix, 0) == 0) s += t.bytes;
  return s;
}

// The compute tier at HEAD's fullest, by plan/plan_evaluate.cpp's rule.
double head_window_bytes(const Plan& p) {
  double live = p.fixed_gpu_bytes;
  for (const Window& w : p.windows) {
    for (const MemOp& a : w.alloc) live += a.bytes;
    if (w.kind == WindowKind::Head) return live + w.workspace_bytes;
    for (const MemOp& f : w.free) live -= f.bytes;
  }
  return -1;
}

double alloc_of(const Plan& p, const std::string& tensor) {
  double s = 0;
  for (const Window& w : p.windows)
    for (const MemOp& a : w.alloc)
      if (a.tensor == tensor) s += a.bytes;
  return s;
}
// A streamed head's slots: the final norm's and two chunk slots (plan/stream_schedule.h).
double head_slots(const Plan& p, const char* weights_or_grads) {
  const std::string k = weights_or_grads;
  return alloc_of(p, k + ".norm") + alloc_of(p, k + ".lm_head.0") + alloc_of(p, k + ".lm_head.1");
}

// The bytes the cost model gives, from the shapes and element sizes directly.
TEST(HeadStreaming, FootprintIsTwoChunksOfWeightsAndTwoOfGradients) {
  for (bool tie : {false, true}) {
    const double R = kHeadChunkQuantum, V = 2 * R + 904;  // a ragged last chunk
    PlanRequest req = big_vocab_request(static_cast<int64_t>(V));
    req.model.tie_word_embeddings = tie;
    const CostModel cm = build_cost_model(req.model, req.hardware, req.batch, req.seq);
    const double C = 512, wb = req.hardware.weight_bytes, gb = req.hardware.grad_bytes;
    ASSERT_EQ(cm.min_head_chunk_rows(), kHeadChunkQuantum);
    const HeadFootprint whole = cm.head_footprint(0);
    // The compute tier holds the final norm in fp32, whatever the weights' element size.
    const double norm_buffer = C * 4;
    EXPECT_DOUBLE_EQ(whole.weight_buffer_bytes, V * C * wb + norm_buffer);
    EXPECT_DOUBLE_EQ(whole.grad_buffer_bytes, (V * C + C) * gb);
    EXPECT_DOUBLE_EQ(whole.prefetch_h2d_bytes, (V * C + C) * wb);
    EXPECT_DOUBLE_EQ(whole.head_h2d_bytes, 0);
    const HeadFootprint f = cm.head_footprint(kHeadChunkQuantum);
    EXPECT_EQ(f.chunks, 3);
    EXPECT_DOUBLE_EQ(f.weight_buffer_bytes, 2 * R * C * wb + norm_buffer);
    EXPECT_DOUBLE_EQ(f.grad_buffer_bytes, 2 * R * C * gb + C * gb);
    EXPECT_DOUBLE_EQ(f.chunk_weight_bytes(2), 904 * C * wb);
    EXPECT_DOUBLE_EQ(f.prefetch_h2d_bytes, C * wb + R * C * wb);
    // Every row twice (both passes); chunk 0's first pass came with the prefetch.
    EXPECT_DOUBLE_EQ(f.prefetch_h2d_bytes + f.head_h2d_bytes, C * wb + 2 * V * C * wb);
    EXPECT_DOUBLE_EQ(f.head_d2h_bytes, (V * C + C) * gb);
  }
  // Two chunks are the whole of a vocabulary twice the quantum: planners hold it whole.
  const PlanRequest small = big_vocab_request(2 * kHeadChunkQuantum);
  EXPECT_EQ(build_cost_model(small.model, small.hardware, small.batch, small.seq).min_head_chunk_rows(), 0);
  const PlanRequest tiny = big_vocab_request(kHeadChunkQuantum);
  EXPECT_THROW(build_cost_model(tiny.model, tiny.hardware, tiny.batch, tiny.seq).head_footprint(kHeadChunkQuantum),
               Error);
}

// A plan built with a streamed head: the head's compute-tier allocations are the chunk
// footprint, its traffic is every chunk twice in (F{L-1} and HEAD) and once out (HEAD),
// the validator accepts it, and the window replay runs it without a violation.
TEST(HeadStreaming, BuiltPlanHoldsChunksAndMovesEveryRowTwice) {
  const PlanRequest req = big_vocab_request();
  const CostModel cm = build_cost_model(req.model, req.hardware, req.batch, req.seq);
  Decisions d = all_gpu_decisions(cm.num_layers, "test");
  d.head_chunk_rows = 2 * kHeadChunkQuantum;
  Plan p = build_plan(req, cm, d);
  evaluate_plan(p);
  const HeadFootprint f = cm.head_footprint(2 * kHeadChunkQuantum);
  EXPECT_EQ(p.head_chunk_rows, 2 * kHeadChunkQuantum);
  EXPECT_EQ(p.head_chunks(), 4);
  EXPECT_DOUBLE_EQ(head_slots(p, "w"), f.weight_buffer_bytes);
  EXPECT_DOUBLE_EQ(head_slots(p, "g"), f.grad_buffer_bytes);
  const double lm = 8.0 * kHeadChunkQuantum * 512 * req.hardware.weight_bytes, norm = 512.0 * req.hardware.weight_bytes;
  EXPECT_DOUBLE_EQ(sum_over(p, "w.head.", Link::H2D), 2 * lm + norm);
  EXPECT_DOUBLE_EQ(sum_over(p, "g.head.", Link::D2H), cm.head_grad_bytes);
  EXPECT_EQ(sum_over(p, "w.head", Link::H2D), sum_over(p, "w.head.", Link::H2D)) << "no whole-head load";
  const auto problems = validate_plan(p);
  EXPECT_TRUE(problems.empty()) << problems.front();
  // The whole head's plan holds all of it in HEAD: more by the difference, nothing else.
  Decisions dw = d;
  dw.head_chunk_rows = 0;
  Plan whole = build_plan(req, cm, dw);
  evaluate_plan(whole);
  EXPECT_NEAR(head_window_bytes(whole) - head_window_bytes(p),
              cm.head_footprint(0).weight_buffer_bytes + cm.head_grad_bytes - f.weight_buffer_bytes - f.grad_buffer_bytes,
              1.0);
  const SimResult sim = simulate_plan(p);
  EXPECT_TRUE(sim.violations.empty()) << sim.violations.front();
  EXPECT_NEAR(sim.step_s, p.predicted_step_s, 1e-9 * p.predicted_step_s);
  EXPECT_NEAR(sim.peak.gpu, p.predicted_peak.gpu, 1.0);
}

// The validator catches a streamed plan that lost a chunk's second load, a buffer of the
// wrong size, and chunk tensors in a plan that holds the head whole.
TEST(HeadStreaming, ValidatorCatchesBrokenChunkTraffic) {
  const PlanRequest req = big_vocab_request();
  const CostModel cm = build_cost_model(req.model, req.hardware, req.batch, req.seq);
  Decisions d = all_gpu_decisions(cm.num_layers, "test");
  d.head_chunk_rows = kHeadChunkQuantum;
  const Plan good = build_plan(req, cm, d);
  ASSERT_TRUE(validate_plan(good).empty());
  auto find_head = [](Plan& p) -> Window& {
    for (Window& w : p.windows)
      if (w.kind == WindowKind::Head) return w;
    throw std::logic_error("no HEAD");
  };
  auto has = [](const std::vector<std::string>& v, const std::string& part) {
    for (const auto& s : v)
      if (s.find(part) != std::string::npos) return true;
    return false;
  };
  {
    Plan p = good;
    auto& tr = find_head(p).transfers;
    for (auto it = tr.rbegin(); it != tr.rend(); ++it)  // the backward pass's load of chunk 3
      if (it->tensor == "w.head.3") {
        tr.erase(std::next(it).base());
        break;
      }
    EXPECT_TRUE(has(validate_plan(p), "w.head.3")) << "a missing second load";
  }
  {
    Plan p = good;
    for (MemOp& a : find_head(p).alloc)
      if (a.tensor == "g.lm_head.0") a.bytes /= 2;
    EXPECT_TRUE(has(validate_plan(p), "allocates g.lm_head.0"));
  }
  {
    Decisions dw = d;
    dw.head_chunk_rows = 0;
    Plan p = build_plan(req, cm, dw);
    find_head(p).transfers.push_back({"w.head.0", Link::H2D, 1e6});
    EXPECT_TRUE(has(validate_plan(p), "holds the head whole"));
  }
  {
    Plan p = good;
    p.head_chunk_rows = 3000;  // not a multiple of the quantum
    EXPECT_TRUE(has(validate_plan(p), "multiple of " + std::to_string(kHeadChunkQuantum)));
  }
}

// A compute cap below what any plan with the whole head needs in HEAD (the fixed slots,
// the head's weights and gradients, boundary L and the head's workspace, with every other
// boundary off the compute tier): the whole-head policies fail, the MILP and greedy stream
// the head and fit. With the default cap the MILP keeps the head whole (here streaming
// would tie: F3 and HEAD are both link-bound; settle_head then holds it whole).
TEST(HeadStreaming, CapBelowTheWholeHeadNowPlans) {
  PlanRequest req = big_vocab_request();
  const CostModel cm = build_cost_model(req.model, req.hardware, req.batch, req.seq);
  const Plan loose = make_plan(req, "milp");
  ASSERT_TRUE(loose.feasible) << loose.infeasible_reason;
  EXPECT_EQ(loose.head_chunk_rows, 0) << "with room to spare the head stays whole";
  const double fixed = loose.fixed_gpu_bytes;
  const HeadFootprint whole = cm.head_footprint(0);
  const double whole_need =
      fixed + whole.weight_buffer_bytes + whole.grad_buffer_bytes + cm.boundary_bytes + cm.workspace_head;
  const HeadFootprint f = cm.head_footprint(cm.min_head_chunk_rows());
  const double saved = whole.weight_buffer_bytes + whole.grad_buffer_bytes - f.weight_buffer_bytes - f.grad_buffer_bytes;
  ASSERT_GT(saved, 0);
  // Below the whole head's need by less than a boundary: any whole-head plan is short,
  // while a streamed head leaves room for boundaries.
  req.gpu_cap_bytes = whole_need - 1e6;
  ASSERT_LT(1e6, cm.boundary_bytes);
  for (const char* policy : {"megatrain", "megatrain-code", "keep-all", "recompute-all"}) {
    const Plan p = make_plan(req, policy);
    EXPECT_FALSE(p.feasible) << policy << " fits under " << req.gpu_cap_bytes;
    EXPECT_EQ(p.head_chunk_rows, 0) << policy << " holds the head whole, as the paper describes";
  }
  for (const char* policy : {"milp", "greedy"}) {
    SCOPED_TRACE(policy);
    const Plan p = make_plan(req, policy);
    ASSERT_TRUE(p.feasible) << p.infeasible_reason;
    ASSERT_GT(p.head_chunk_rows, 0);
    EXPECT_EQ(p.head_chunk_rows % kHeadChunkQuantum, 0);
    EXPECT_LT(p.head_chunk_rows, req.model.vocab_size);
    EXPECT_LE(p.predicted_peak.gpu, req.gpu_cap_bytes * (1 + 1e-9));
    const HeadFootprint g = cm.head_footprint(p.head_chunk_rows);
    EXPECT_DOUBLE_EQ(head_slots(p, "w"), g.weight_buffer_bytes);
    EXPECT_DOUBLE_EQ(head_slots(p, "g"), g.grad_buffer_bytes);
    EXPECT_LT(g.weight_buffer_bytes, cm.head_weight_bytes);
    const auto problems = validate_plan(p);
    EXPECT_TRUE(problems.empty()) << problems.front();
  }
}

// The chunk grows to the largest power-of-two multiple of the quantum that still fits:
// under a cap between the peaks at 2 and at 4 quanta, 1-quantum chunks widen to 2.
TEST(HeadStreaming, ChunksWidenToTheLargestThatFits) {
  const int64_t Q = kHeadChunkQuantum;
  PlanRequest req = big_vocab_request(32 * Q);
  // Links fast enough that F{L-1}'s larger prefetch of chunk 0 never sets its time (then
  // a wider chunk would be slower, and stays narrow).
  req.hardware.h2d_bw = req.hardware.d2h_bw = 1e13;
  const CostModel cm = build_cost_model(req.model, req.hardware, req.batch, req.seq);
  Decisions d = all_gpu_decisions(cm.num_layers, "test");
  auto peak = [&](int64_t rows) {
    Decisions e = d;
    e.head_chunk_rows = rows;
    Plan p = build_plan(req, cm, e);
    evaluate_plan(p);
    return p.predicted_peak.gpu;
  };
  ASSERT_LT(peak(2 * Q), peak(4 * Q));
  req.gpu_cap_bytes = (peak(2 * Q) + peak(4 * Q)) / 2;
  d.head_chunk_rows = Q;
  Plan p = build_plan(req, cm, d);
  evaluate_plan(p);
  ASSERT_TRUE(capacity_problems(p).empty());
  p.feasible = true;
  const Plan wide = widen_head_chunks(req, cm, d, p);
  EXPECT_EQ(wide.head_chunk_rows, 2 * Q);
  EXPECT_TRUE(wide.feasible);
  EXPECT_LE(wide.predicted_step_s, p.predicted_step_s * (1 + 1e-12));
  // With all the room in the world, the widest chunk whose two buffers are fewer rows
  // than the vocabulary's 32 quanta: 8 quanta.
  req.gpu_cap_bytes = 1e13;
  EXPECT_EQ(widen_head_chunks(req, cm, d, p).head_chunk_rows, 8 * Q);
}

// Version 2 and 3 files carry the chunk size; version 1 files read as a whole head; edited
// chunk fields are an lt::Error.
TEST(HeadStreaming, PlanJsonRoundTripAndVersions) {
  const PlanRequest req = big_vocab_request();
  const CostModel cm = build_cost_model(req.model, req.hardware, req.batch, req.seq);
  Decisions d = all_gpu_decisions(cm.num_layers, "test");
  d.head_chunk_rows = kHeadChunkQuantum;
  Plan p = build_plan(req, cm, d);
  evaluate_plan(p);
  const nlohmann::json j = plan_to_json(p);
  EXPECT_EQ(j["version"], 3);
  EXPECT_EQ(j["head"]["chunk_rows"], kHeadChunkQuantum);
  EXPECT_EQ(j["head"]["chunks"], 8);
  const Plan q = plan_from_json(j, "streamed.json");
  EXPECT_EQ(q.head_chunk_rows, kHeadChunkQuantum);
  EXPECT_EQ(plan_to_json(q).dump(), j.dump());
  EXPECT_TRUE(validate_plan(q).empty());

  Decisions dw = d;
  dw.head_chunk_rows = 0;
  nlohmann::json v1 = plan_to_json(build_plan(req, cm, dw));
  v1["version"] = 1;
  v1.erase("head");
  EXPECT_EQ(plan_from_json(v1, "v1.json").head_chunk_rows, 0);

  auto expect_error = [&](nlohmann::json e, const std::string& part) {
    try {
      (void)plan_from_json(e, "edited.json");
      ADD_FAILURE() << "no error; wanted: " << part;
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find(part), std::string::npos) << err.what();
    }
  };
  nlohmann::json e = j;
  e["head"]["chunk_rows"] = 8 * kHeadChunkQuantum;
  expect_error(e, "below the vocabulary");
  e = j;
  e["head"]["chunk_rows"] = -kHeadChunkQuantum;
  expect_error(e, "below the vocabulary");
  e = j;
  e["head"]["chunks"] = 7;
  expect_error(e, "head.chunks 7 does not match");
  e = j;  // a version 1 reader's view of a streamed plan: chunk tensors in a whole-head plan
  e["version"] = 1;
  expect_error(e, "unknown tensor 'w.head.");
  e = j;
  for (auto& w : e["windows"])  // past the last chunk
    if (w["kind"] == "head") w["transfers"][0]["tensor"] = "w.head.8";
  expect_error(e, "unknown tensor 'w.head.8'");
}

}  // namespace
}  // namespace lt
