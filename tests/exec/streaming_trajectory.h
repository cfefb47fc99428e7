// Five training steps with AdamW (fp32, or the hybrid 8-bit) between them, in memory
// (ModelStep, the reference) and through the streaming executor under a given plan, and
// their bitwise comparison: shared by the plan-invariance and out-of-core tests. Header-only (the test
// build globs only *_test.cpp).
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "exec/backend.h"
#include "exec/streaming_executor.h"
#include "layers/compute_copy.h"
#include "layers/model_step.h"
#include "optim/adamw.h"
#include "plan/cost_model.h"
#include "plan/default_schedule.h"
#include "plan/plan_builder.h"
#include "plan/plan_evaluate.h"
#include "plan/plan_validate.h"
#include "plan/planner.h"
#include "streaming_test_util.h"

namespace lt::streaming_test {

inline constexpr int kSteps = 5;
inline constexpr int64_t kBatch = 2, kSeq = 16;
inline constexpr float kLr = 1e-2f, kMaxNorm = 0.5f;  // small max norm: clipping is exercised

struct Trajectory {
  std::vector<double> loss, grad_sq;
  std::vector<std::vector<float>> grads;  // after each step
  std::vector<float> final_params;
  std::vector<std::vector<std::byte>> layer_states;  // per layer, after the last update
  int updates_beside_kernels = 0;  // the streamed run's updates traced after their window's kernels began
};

// The step's optimizer updates that ran after their window's kernels were issued (the
// executor's updates beside the kernels: the update's event starts at or after the
// window's compute event).
inline int updates_beside_kernels(const StreamingStepResult& r) {
  int n = 0;
  for (const ExecEvent& u : r.events) {
    if (u.lane != ExecLane::Host || u.name.rfind("optimizer ", 0) != 0) continue;
    for (const ExecEvent& k : r.events)
      if (k.lane == ExecLane::Compute && k.name == u.window && u.start_s >= k.start_s) ++n;
  }
  return n;
}

// AdamW over the lazy-update targets, one optimizer tensor per target range: fp32 states,
// or the hybrid 8-bit one. The layers in `paged` keep their states in the bytes the
// executor hands the hook (AdamW paged tensors), attached only for the update.
struct Optimizer {
  AdamW opt;
  std::vector<std::vector<int>> ids;  // per target (schedule order), per range
  std::vector<UpdateTarget> targets;

  explicit Optimizer(const ModelParameters& p, bool eight_bit = false, const std::vector<int>& paged = {})
      : opt(config(eight_bit)) {
    const int L = static_cast<int>(p.config().num_layers);
    targets.push_back({UpdateTarget::Kind::Embed, -1});
    for (int j = 0; j < L; ++j) targets.push_back({UpdateTarget::Kind::Layer, j});
    targets.push_back({UpdateTarget::Kind::Head, -1});
    for (const UpdateTarget& t : targets) {
      ids.emplace_back();
      int k = 0;
      AdamWTensorOptions to;
      to.paged = t.kind == UpdateTarget::Kind::Layer && std::find(paged.begin(), paged.end(), t.layer) != paged.end();
      for (auto [off, n] : target_ranges(p, t))
        ids.back().push_back(opt.add_tensor(t.name() + "." + std::to_string(k++), n, to));
    }
  }
  static AdamWConfig config(bool eight_bit) {
    AdamWConfig c;
    c.eight_bit = eight_bit;
    c.num_threads = 1;
    return c;
  }
  size_t index(const UpdateTarget& t) const {
    if (t.kind == UpdateTarget::Kind::Embed) return 0;
    if (t.kind == UpdateTarget::Kind::Head) return targets.size() - 1;
    return 1 + t.layer;
  }
  // One layer's state bytes (every layer has the same tensors).
  size_t layer_state_bytes() const {
    size_t b = 0;
    for (int id : ids[1]) b += opt.state_bytes(id);
    return b;
  }
  // Layer j's state region (owned tensors: the optimizer's own copy).
  std::vector<std::byte> layer_state(int j) {
    std::vector<std::byte> out;
    for (int id : ids[1 + j]) {
      const std::byte* base = opt.format(id) == StateFormat::Q8 ? reinterpret_cast<const std::byte*>(opt.q8_state(id).m_code)
                                                                : reinterpret_cast<const std::byte*>(opt.f32_state(id).m);
      out.insert(out.end(), base, base + opt.state_bytes(id));
    }
    return out;
  }
  void update(ModelParameters& p, const ModelParameters& g, const UpdateTarget& t, float clip, int64_t step,
              std::span<std::byte> paged_state = {}) {
    const auto ranges = target_ranges(p, t);
    const auto& tid = ids[index(t)];
    size_t at = 0;
    for (int id : tid)
      if (!paged_state.empty()) {
        opt.attach_state(id, paged_state.data() + at);
        at += opt.state_bytes(id);
      }
    for (size_t r = 0; r < ranges.size(); ++r)
      opt.step_tensor(tid[r], p.data() + ranges[r].first, g.data() + ranges[r].first, nullptr, kLr, clip, step);
    if (!paged_state.empty())
      for (int id : tid) opt.detach_state(id);
  }
};

// The optimizer (fp32 states, or the hybrid 8-bit AdamW) and the matmul precision of a
// run; bf16 runs keep a bf16 compute copy current after every update (the reference
// whole, the streaming run target by target in the hook).
struct RunOptions {
  bool eight_bit = false;
  Precision precision = Precision::F32;
  bool document_mask = false;  // packed documents (make_doc_starts), block-diagonal attention
  // A slow host optimizer: each update starts this late, so a weight copy issued before
  // it (wrongly) has long copied the old weights when it writes the new.
  int update_delay_ms = 0;
};

// Step `step`'s documents: each row cut into documents of 1 to 6 tokens, differently per
// row and step (a one-token document among them), as doc_start (ModelStep's form).
inline std::vector<int32_t> make_doc_starts(int64_t batch, int64_t seq, uint64_t step) {
  std::vector<int32_t> ds(batch * seq);
  for (int64_t b = 0; b < batch; ++b) {
    int64_t start = 0, len = 1 + int64_t((step + 2 * b) % 6);
    for (int64_t s = 0; s < seq; ++s) {
      if (s - start == len) start = s, len = 1 + int64_t((step * 7 + s + b) % 6);
      ds[b * seq + s] = int32_t(start);
    }
  }
  return ds;
}

inline float clip_factor(double sq) {
  const double norm = std::sqrt(sq);
  return norm > kMaxNorm ? static_cast<float>(kMaxNorm / norm) : 1.0f;
}

inline Trajectory run_reference(const ModelConfig& c, RunOptions ro = {}) {
  ModelParameters params(c), grads(c);
  test::init_parameters(params, 7);
  Optimizer opt(params, ro.eight_bit);
  ModelStep ms(c, kBatch, kSeq, ro.precision);
  ms.refresh_compute_copy(params);
  Trajectory tr;
  std::vector<int32_t> ids, labels;
  for (int s = 0; s < kSteps; ++s) {
    if (s > 0) {
      const float clip = clip_factor(tr.grad_sq.back());
      for (const UpdateTarget& t : opt.targets) opt.update(params, grads, t, clip, s);
      ms.refresh_compute_copy(params);
    }
    grads.zero();
    test::make_batch(ids, labels, kBatch * kSeq, c.vocab_size, s);
    const std::vector<int32_t> docs = make_doc_starts(kBatch, kSeq, s);
    StepResult r = ms.forward_backward(params, grads, ids.data(), labels.data(), {}, 0.0f,
                                       ro.document_mask ? docs.data() : nullptr);
    tr.loss.push_back(r.loss);
    tr.grad_sq.push_back(ordered_grad_sq_sum(grads));
    tr.grads.emplace_back(grads.data(), grads.data() + grads.numel());
  }
  tr.final_params.assign(params.data(), params.data() + params.numel());
  for (int j = 0; j < c.num_layers; ++j) tr.layer_states.push_back(opt.layer_state(j));
  return tr;
}

// The plan's paged layers keep their optimizer states on NVMe.
inline Trajectory run_streaming(const ModelConfig& c, const Plan& plan, const std::filesystem::path& dir,
                                std::unique_ptr<Backend> backend = make_cpu_backend(), RunOptions ro = {}) {
  ModelParameters params(c), grads(c);
  test::init_parameters(params, 7);
  Optimizer opt(params, ro.eight_bit, plan.nvme_state_layers);
  ComputeCopy copy(ro.precision);
  copy.refresh(params);
  StreamingOptions so;
  so.offload_dir = dir;
  so.direct_io = false;  // tmpfs and overlay filesystems refuse O_DIRECT
  so.layer_state_bytes = opt.layer_state_bytes();
  so.precision = ro.precision;
  StreamingExecutor ex(plan, *backend, so);
  if (std::getenv("LT_STREAMING_DEBUG")) {
    const StreamSchedule& sc = ex.schedule();
    for (int b = 0; b <= sc.L; ++b) {
      const BoundarySchedule& bs = sc.boundaries[b];
      std::fprintf(stderr, "%s b%d stored %d gpu %ld cpu %ld nvme %ld fetches %zu (first %d) read %d\n",
                   plan.policy.c_str(), b, bs.stored, static_cast<long>(bs.gpu_tokens),
                   static_cast<long>(bs.cpu_tokens), static_cast<long>(bs.nvme_tokens), bs.fetches.size(),
                   bs.fetches.empty() ? -1 : bs.fetches.front().window, bs.nvme_read_w);
    }
    int keep = 0, rc = 0;
    for (int j = 0; j < sc.L; ++j) keep += sc.keep_internals[j], rc += sc.recompute_w[j] >= 0;
    std::fprintf(stderr, "%s keep_internals %d RC windows %d windows %zu nvme file %zu\n", plan.policy.c_str(), keep,
                 rc, plan.windows.size(), ex.nvme_bytes());
  }
  Trajectory tr;
  std::vector<int32_t> ids, labels;
  for (int s = 0; s < kSteps; ++s) {
    float clip = 1;
    LazyUpdateHook hook = [&](const UpdateTarget& t, std::span<std::byte> state) {
      if (ro.update_delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ro.update_delay_ms));
      opt.update(params, grads, t, clip, s, state);
      if (bf16* cc = copy.data(params))
        for (auto [off, n] : target_ranges(params, t)) convert_f32_to_bf16(cc + off, params.data() + off, n);
    };
    StepOptions o;
    o.compute_copy = copy.data(params);
    if (s > 0) {
      clip = clip_factor(tr.grad_sq.back());
      o.update = &hook;
    }
    test::make_batch(ids, labels, kBatch * kSeq, c.vocab_size, s);
    const std::vector<int32_t> docs = make_doc_starts(kBatch, kSeq, s);
    if (ro.document_mask) o.doc_start = docs.data();
    StreamingStepResult r = ex.step(params, grads, ids.data(), labels.data(), o);
    tr.updates_beside_kernels += updates_beside_kernels(r);
    tr.loss.push_back(r.loss);
    tr.grad_sq.push_back(r.grad_sq_sum);
    tr.grads.emplace_back(grads.data(), grads.data() + grads.numel());
    EXPECT_LE(ex.measured_peak_bytes(), ex.planned_peak_bytes()) << plan.policy;
    // The kernels' scratch beside the arena (cuda's pool) within what a plan counts for it.
    EXPECT_LE(backend->kernel_scratch_peak(),
              kernel_pool_scratch_bytes(c, plan.batch, plan.seq, backend->kernels(), ro.precision))
        << plan.policy;
  }
  tr.final_params.assign(params.data(), params.data() + params.numel());
  for (int j = 0; j < c.num_layers; ++j) {
    if (!ex.state_paged(j)) {
      tr.layer_states.push_back(opt.layer_state(j));
      continue;
    }
    std::vector<std::byte> bytes(opt.layer_state_bytes());
    ex.read_paged_state(j, bytes);  // from its NVMe slot
    tr.layer_states.push_back(std::move(bytes));
  }
  return tr;
}

inline void expect_bitwise_equal(const Trajectory& a, const Trajectory& ref, const std::string& what) {
  ASSERT_EQ(a.loss.size(), ref.loss.size());
  for (size_t s = 0; s < ref.loss.size(); ++s) {
    EXPECT_EQ(std::memcmp(&a.loss[s], &ref.loss[s], sizeof(double)), 0)
        << what << " step " << s << " loss " << a.loss[s] << " vs " << ref.loss[s];
    EXPECT_EQ(std::memcmp(&a.grad_sq[s], &ref.grad_sq[s], sizeof(double)), 0) << what << " step " << s;
    ASSERT_EQ(a.grads[s].size(), ref.grads[s].size());
    size_t first_diff = a.grads[s].size();
    for (size_t i = 0; i < a.grads[s].size(); ++i)
      if (std::memcmp(&a.grads[s][i], &ref.grads[s][i], sizeof(float)) != 0) {
        first_diff = i;
        break;
      }
    EXPECT_EQ(first_diff, a.grads[s].size()) << what << " step " << s << ": gradients differ first at element "
                                             << first_diff;
  }
  EXPECT_EQ(std::memcmp(a.final_params.data(), ref.final_params.data(), ref.final_params.size() * sizeof(float)), 0)
      << what << ": final parameters differ";
  ASSERT_EQ(a.layer_states.size(), ref.layer_states.size());
  for (size_t j = 0; j < ref.layer_states.size(); ++j)
    EXPECT_TRUE(a.layer_states[j] == ref.layer_states[j]) << what << ": layer " << j << "'s optimizer state differs";
}

inline PlanRequest request(const ModelConfig& c) {
  PlanRequest req;
  req.model_name = "streaming-tiny";
  req.model = c;
  req.hardware = test::streaming_cpu_profile();
  req.batch = kBatch;
  req.seq = kSeq;
  req.time_limit_s = 5;
  req.scratch = executor_scratch(c, kBatch, kSeq, cpu_kernel_table());
  return req;
}

// A MILP plan that puts boundary tokens on both host and NVMe: the compute cap leaves
// room for few boundaries and the host budget for fewer, so the rest must go to NVMe
// (cheap here) or be recomputed (dear here).
// host_memory_bytes > 0 replaces the profile's host memory (a small one makes the
// planner page optimizer states from NVMe).
inline Plan offloading_milp_plan(const ModelConfig& c, double host_memory_bytes = 0) {
  PlanRequest req = request(c);
  if (host_memory_bytes > 0) req.hardware.host_memory_bytes = host_memory_bytes;
  const Plan loose = make_plan(req, "keep-all");
  const double boundary = static_cast<double>(kBatch * kSeq * c.hidden_size * req.hardware.act_bytes);
  const auto plan_under = [&](double cap) {
    req.gpu_cap_bytes = cap;
    req.cpu_act_budget_bytes = 0.1 * boundary;
    req.nvme_act_budget_bytes = 64 * boundary;
    Plan p = make_plan(req, "milp");
    const Plan::TierCounts tc = p.tier_counts();
    if (std::getenv("LT_STREAMING_DEBUG"))
      std::fprintf(stderr, "milp cap %.2f boundaries over the keep-all peak: feasible %d gpu %.2f cpu %.2f nvme %.2f rc %.0f %s\n",
                   (cap - loose.predicted_peak.gpu) / boundary, p.feasible, tc.gpu, tc.cpu, tc.nvme, tc.recompute,
                   p.infeasible_reason.c_str());
    return p;
  };
  // The smallest cap (to a quarter boundary) under which the MILP finds a plan, between the
  // fixed slots alone and the keep-all plan's peak (which needs no offload): the tightest
  // budget moves the most tokens off the compute tier. Then, if that plan does not use both
  // host and NVMe, a little more room.
  double lo = loose.fixed_gpu_bytes, hi = loose.predicted_peak.gpu;
  while (hi - lo > 0.25 * boundary) {
    const double mid = 0.5 * (lo + hi);
    (plan_under(mid).feasible ? hi : lo) = mid;
  }
  for (double cap = hi; cap <= hi + 8 * boundary; cap += 0.25 * boundary) {
    Plan p = plan_under(cap);
    const Plan::TierCounts tc = p.tier_counts();
    if (p.feasible && tc.cpu > 0 && tc.nvme > 0) return p;
  }
  return Plan{};
}

// A plan built from decisions: every boundary on the compute tier, or (mixed) a boundary
// recomputed, one split over host and NVMe and a layer's internals kept; the head
// streamed in chunks of `rows` (0: whole).
inline Plan decided_plan(const ModelConfig& c, int64_t rows, bool mixed, double weight_bytes = 4) {
  PlanRequest req = request(c);
  req.hardware.weight_bytes = weight_bytes;
  const CostModel cm = build_cost_model(req);
  Decisions d = all_gpu_decisions(static_cast<int>(c.num_layers), "decided");
  if (mixed) {
    d.boundaries[1] = BoundaryPlacement{true, 0, 0, 0};
    d.boundaries[2] = BoundaryPlacement{false, 0.5, 0.25, 0.25};
    d.keep_internals[c.num_layers - 1] = true;
  }
  d.head_chunk_rows = rows;
  EXPECT_TRUE(assign_asap_traffic(d, cm));
  Plan p = build_plan(req, cm, d);
  evaluate_plan(p);
  const auto problems = validate_plan(p);
  EXPECT_TRUE(problems.empty()) << problems.front();
  return p;
}

}  // namespace lt::streaming_test
