// Re-planning during a run (train/replanner.h, train/streamed_training.h): the drift
// detector on synthetic measurements (nothing below the threshold, one re-plan after K
// steps above it, no flapping, the NVMe bound's rule), the link timing of the emu backend,
// the re-prediction of a plan on its own profile, and end to end on emu: links that slow
// down mid-run make the adaptive run switch plans while its losses and final weights stay
// bitwise those of the static run; a re-plan that cannot be solved keeps the old plan.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/measure.h"
#include "exec/backend.h"
#include "exec/streaming_executor.h"
#include "model/checkpoint.h"
#include "plan/hardware_profile.h"
#include "plan/planner.h"
#include "plan/state_paging.h"
#include "train/replanner.h"
#include "train/streamed_training.h"
#include "train/trainer.h"
#include "train/updater.h"
#include "../exec/streaming_test_util.h"
#include "../plan/plan_test_util.h"
#include "test_util.h"
#include "train_test_util.h"

namespace lt {
namespace {

StepMeasures reference() {
  StepMeasures r;
  r.v[kForwardS] = 0.010;
  r.v[kBackwardS] = 0.020;
  r.v[kHeadS] = 0.005;
  r.v[kH2dBw] = r.v[kD2hBw] = 1e9;
  r.v[kNvmeReadBw] = r.v[kNvmeWriteBw] = 2e9;
  r.step_s = 0.5;
  return r;
}

StepMeasures scaled(const StepMeasures& ref, int measure, double factor) {
  StepMeasures m = ref;
  m.v[measure] *= factor;
  return m;
}

TEST(DriftDetector, NothingBelowTheThreshold) {
  DriftDetector d(reference(), 0.15, 3);
  for (int s = 0; s < 50; ++s) {
    StepMeasures m = reference();
    for (int i = 0; i < kMeasures; ++i) m.v[i] *= (s + i) % 2 ? 1.14 : 0.86;  // 14% either way
    EXPECT_FALSE(d.observe(m).has_value()) << "step " << s;
  }
}

TEST(DriftDetector, OneReplanAfterKStepsAbove) {
  DriftDetector d(reference(), 0.15, 3);
  const double rates[] = {0.26, 0.24, 0.25};  // h2d at a quarter, with noise
  for (int s = 0; s < 2; ++s) EXPECT_FALSE(d.observe(scaled(reference(), kH2dBw, rates[s])).has_value());
  const std::optional<Drift> drift = d.observe(scaled(reference(), kH2dBw, rates[2]));
  ASSERT_TRUE(drift.has_value());
  ASSERT_EQ(drift->measures.size(), 1u);
  EXPECT_EQ(drift->measures[0].measure, kH2dBw);
  EXPECT_EQ(drift->measures[0].assumed, 1e9);
  EXPECT_EQ(drift->measures[0].measured, 0.25e9);  // the median of the three
  EXPECT_DOUBLE_EQ(drift->measures[0].drift(), -0.75);
  EXPECT_EQ(drift->measured.v[kH2dBw], 0.25e9);
  EXPECT_EQ(drift->measured.v[kD2hBw], 1e9);
  EXPECT_NE(drift->describe().find("h2d 1.00 GB/s -> 250.0 MB/s (-75%)"), std::string::npos) << drift->describe();
  // The trainer rebases on the measured machine: the same slow link is no news.
  d.rebase(drift->measured);
  for (int s = 0; s < 30; ++s) EXPECT_FALSE(d.observe(scaled(reference(), kH2dBw, rates[s % 3])).has_value());
  // Without a rebase the detector counts afresh and fires again K steps later, not sooner.
  DriftDetector again(reference(), 0.15, 3);
  int fired = 0;
  for (int s = 0; s < 9; ++s) fired += again.observe(scaled(reference(), kForwardS, 1.5)).has_value();
  EXPECT_EQ(fired, 3);
}

TEST(DriftDetector, NoFlapping) {
  DriftDetector d(reference(), 0.15, 3);
  for (int s = 0; s < 40; ++s) {
    // One measure swings from one side to the other; another is over only every other step.
    StepMeasures m = scaled(reference(), kD2hBw, s % 2 ? 1.4 : 0.6);
    m.v[kForwardS] *= s % 2 ? 1.3 : 1.05;
    EXPECT_FALSE(d.observe(m).has_value()) << "step " << s;
  }
}

// After a kept re-plan the trainer holds its measures: they do not fire while held, the
// others do.
TEST(DriftDetector, HeldMeasuresWait) {
  DriftDetector d(reference(), 0.15, 2);
  d.hold(kForwardS, 5);
  for (int s = 0; s < 5; ++s) EXPECT_FALSE(d.observe(scaled(reference(), kForwardS, 1.5)).has_value()) << s;
  EXPECT_TRUE(d.observe(scaled(reference(), kForwardS, 1.5)).has_value());  // the run went on meanwhile
  d.hold(kForwardS, 100);
  StepMeasures both = scaled(reference(), kForwardS, 1.5);
  both.v[kD2hBw] *= 0.25;
  EXPECT_FALSE(d.observe(both).has_value());
  const std::optional<Drift> drift = d.observe(both);
  ASSERT_TRUE(drift.has_value());
  EXPECT_EQ(drift->measures.size(), 2u);  // the held measure is still reported and measured
}

// The NVMe rate is a lower bound (issue to retire): below the plan it counts only in a
// step that itself runs late; above the plan it is evidence either way.
TEST(DriftDetector, NvmeBoundCountsOnlyWhenTheStepIsLate) {
  DriftDetector d(reference(), 0.15, 2);
  for (int s = 0; s < 10; ++s) EXPECT_FALSE(d.observe(scaled(reference(), kNvmeReadBw, 0.5)).has_value());
  StepMeasures late = scaled(reference(), kNvmeReadBw, 0.5);
  late.step_s = 0.7;
  EXPECT_FALSE(d.observe(late).has_value());
  const std::optional<Drift> drift = d.observe(late);
  ASSERT_TRUE(drift.has_value());
  EXPECT_EQ(drift->measures[0].measure, kNvmeReadBw);
  EXPECT_EQ(drift->measured.v[kNvmeReadBw], 1e9);
  DriftDetector faster(reference(), 0.15, 2);
  EXPECT_FALSE(faster.observe(scaled(reference(), kNvmeWriteBw, 2)).has_value());
  EXPECT_TRUE(faster.observe(scaled(reference(), kNvmeWriteBw, 2)).has_value());
}

// A tiny llama whose boundaries outweigh its layers' weights (T = 1024 tokens, hidden 32),
// so that recomputing a boundary beats moving it over a slow link.
ModelConfig model() {
  ModelConfig c = test::streaming_tiny_config(4);
  c.hidden_size = 32;
  c.num_heads = 2;
  c.num_kv_heads = 1;
  c.head_dim = 16;
  c.intermediate_size = 64;
  c.vocab_size = 64;
  c.max_position_embeddings = 256;
  c.tie_word_embeddings = true;
  return c;
}

PlanRequest request(double gbps, const MeasuredLayerTimes& t) {
  PlanRequest req;
  req.model_name = "replan-test";
  req.model = model();
  req.hardware = test::streaming_cpu_profile();
  req.hardware.backend = "emu";
  req.hardware.act_bytes = 4;
  req.hardware.h2d_bw = req.hardware.d2h_bw = gbps * 1e9;
  req.hardware.host_optimizer_params_per_s = 1e12;
  req.batch = 4;
  req.seq = 256;
  req.nvme_act_budget_bytes = 0;
  req.nvme_state_layers = 0;
  req.measured = t;
  req.time_limit_s = 5;
  return req;
}

// Layer times for the tests whose plans need not match this machine's speed: a fixed
// profile keeps their plans (and so their verdicts) the same on an idle machine and a
// loaded one under a sanitizer.
const MeasuredLayerTimes kFixedLayerTimes{0.004, 0.008, 0.002};

// Compute per layer on the emu backend at this slowdown: medians of three keep-all steps.
MeasuredLayerTimes probe(double slowdown) {
  const PlanRequest req = request(1, {});
  const Plan keep = make_plan(req, "keep-all");
  auto emu = make_emu(0, 0, slowdown);
  StreamingExecutor ex(keep, *emu);
  ModelParameters p(req.model), g(req.model);
  init_parameters(p, 3);
  std::vector<int32_t> ids(req.batch * req.seq, 1);
  std::vector<double> f, b, h;
  for (int s = 0; s < 4; ++s) {
    const StepMeasures m = measure_step(keep, ex.step(p, g, ids.data(), ids.data()), {}, {});
    if (s == 0) continue;
    f.push_back(m.v[kForwardS]), b.push_back(m.v[kBackwardS]), h.push_back(m.v[kHeadS]);
  }
  return {median(f), median(b), median(h)};
}

TEST(Replanner, PlanOnItsOwnProfilePredictsItself) {
  const Plan p = make_plan(request(0.05, kFixedLayerTimes), "milp");
  ASSERT_TRUE(p.feasible) << p.infeasible_reason;
  EXPECT_NEAR(predict_on(p, assumed_measures(p)), p.predicted_step_s, 1e-12 * p.predicted_step_s);
  // Slower compute never makes a plan faster, and slower links never either.
  EXPECT_GE(predict_on(p, scaled(assumed_measures(p), kForwardS, 2)), p.predicted_step_s);
  EXPECT_GE(predict_on(p, scaled(assumed_measures(p), kH2dBw, 0.25)), p.predicted_step_s);
  // And the request rebuilt from a plan makes the same plan.
  const Plan again = make_plan(request_of(p, 5), "milp");
  EXPECT_EQ(again.tier_counts().cpu, p.tier_counts().cpu);
  EXPECT_EQ(again.tier_counts().recompute, p.tier_counts().recompute);
}

// The emu lanes time their copies: each lasts at least bytes / rate, so the measured rate
// never exceeds the throttle; the setters change it between steps.
TEST(Replanner, EmuLinksTimeTheirCopies) {
  const PlanRequest req = request(1, kFixedLayerTimes);
  const Plan p = make_plan(req, "megatrain");
  auto emu = make_emu(0.2, 0.1);
  StreamingExecutor ex(p, *emu);
  ModelParameters params(req.model), grads(req.model);
  init_parameters(params, 3);
  std::vector<int32_t> ids(req.batch * req.seq, 2);
  for (double scale : {1.0, 0.5}) {
    emu->set_link_rates(0.2 * scale, 0.1 * scale);
    const size_t h0 = emu->h2d_bytes, d0 = emu->d2h_bytes;
    const Backend::LinkBusy b0 = emu->link_busy();
    const StreamingStepResult r = ex.step(params, grads, ids.data(), ids.data());
    const Backend::LinkBusy b1 = emu->link_busy();
    const LinkUse h2d{static_cast<double>(emu->h2d_bytes - h0), b1.h2d_s - b0.h2d_s};
    const LinkUse d2h{static_cast<double>(emu->d2h_bytes - d0), b1.d2h_s - b0.d2h_s};
    EXPECT_GE(h2d.busy_s, h2d.bytes / (0.2e9 * scale));
    EXPECT_GE(d2h.busy_s, d2h.bytes / (0.1e9 * scale));
    const StepMeasures m = measure_step(p, r, h2d, d2h);
    EXPECT_LE(m.v[kH2dBw], 0.2e9 * scale);
    EXPECT_GT(m.v[kH2dBw], 0);
    EXPECT_LE(m.v[kD2hBw], 0.1e9 * scale);
    EXPECT_GT(m.v[kForwardS], 0);
    EXPECT_GT(m.v[kBackwardS], 0);
    EXPECT_GT(m.v[kHeadS], 0);
  }
  EXPECT_THROW(emu->set_link_rates(-1, 1), Error);
  EXPECT_THROW(emu->set_compute_slowdown(0.5), Error);
}

struct TrainRun {
  std::vector<double> loss;
  std::vector<float> weights;
  std::vector<ReplanEvent> events;
  int switches = 0;
};

// Trains `steps` steps of `plan` on emu links at fast_gbps; before step change+1 they drop
// to slow_gbps and the compute slowdown to compute_after.
TrainRun train(const Plan& plan, const PlanRequest& req, bool adaptive, double fast_gbps, double slow_gbps, int steps,
          int change, double compute_before, double compute_after, const std::string& offload_dir,
          double margin = 0.05) {
  TrainConfig cfg;
  cfg.batch = plan.batch;
  cfg.seq_len = plan.seq;
  cfg.steps = steps;
  cfg.lr = 1e-3;
  cfg.warmup_steps = 0;
  cfg.precision = "f32";
  cfg.backend = "emu";
  cfg.offload_dir = offload_dir;
  cfg.adaptive_plan = adaptive ? "on" : "off";
  cfg.replan_steps = 2;
  cfg.replan_margin = margin;
  ModelParameters params(plan.model), grads(plan.model);
  init_parameters(params, 11);
  Updater updater(cfg, params, plan.nvme_state_layers);
  auto emu = make_emu(fast_gbps, fast_gbps, compute_before);
  EmuBackend& knobs = *emu;
  StreamedTraining::Options o;
  o.backend = std::move(emu);
  o.request = req;
  o.wait_for_replans = true;  // the outcome, not the solver's speed on a busy machine, is under test
  StreamedTraining st(cfg, plan, params, grads, updater, std::move(o));
  const int64_t T = plan.batch * plan.seq;
  std::vector<int32_t> ids(T);
  TrainRun run;
  for (int step = 1; step <= steps; ++step) {
    for (int64_t i = 0; i < T; ++i) ids[i] = static_cast<int32_t>((i * 7 + step * 13) % plan.model.vocab_size);
    if (step == change + 1) {
      knobs.set_link_rates(slow_gbps, slow_gbps);
      knobs.set_compute_slowdown(compute_after);
    }
    StreamedTraining::Outcome out = st.step(ids.data(), ids.data(), plan.batch * (plan.seq - 1), step);
    run.loss.push_back(out.loss);
    for (ReplanEvent& e : out.replans) run.events.push_back(std::move(e));
  }
  for (ReplanEvent& e : st.finish(steps)) run.events.push_back(std::move(e));
  st.flush();
  run.weights.assign(params.data(), params.data() + params.numel());
  run.switches = st.replans();
  return run;
}

void expect_bitwise(const TrainRun& a, const TrainRun& b) {
  ASSERT_EQ(a.loss.size(), b.loss.size());
  for (size_t i = 0; i < a.loss.size(); ++i)
    EXPECT_EQ(std::memcmp(&a.loss[i], &b.loss[i], sizeof(double)), 0) << "step " << i + 1;
  ASSERT_EQ(a.weights.size(), b.weights.size());
  EXPECT_EQ(std::memcmp(a.weights.data(), b.weights.data(), a.weights.size() * sizeof(float)), 0)
      << "final weights differ";
}

std::string messages(const TrainRun& r) {
  std::string s;
  for (const ReplanEvent& e : r.events) s += e.message() + "\n";
  return s;
}

TEST(Replanner, SlowerLinksSwitchPlansAndKeepTheMath) {
  test::TempDir dir("replan-e2e");
  // Before the change, compute is slow (emu slowdown 3) and links fast enough to hide the
  // boundaries' trips to host memory; after it, compute is at this CPU's speed and the
  // links at a quarter: recomputing is then cheaper than the trips.
  const double before = 3, after = 1;
  const MeasuredLayerTimes t = probe(before);
  // Links at which a boundary's trip takes one (slowed) forward, then a quarter of that.
  const ModelConfig c = model();
  const double boundary = 4.0 * 4 * 256 * c.hidden_size;
  const double fast = boundary / t.forward_s / 1e9, slow = fast / 4;
  PlanRequest req = request(fast, t);
  StepMeasures slow_machine = assumed_measures(make_plan(req, "keep-all"));
  for (int i : {kForwardS, kBackwardS, kHeadS}) slow_machine.v[i] *= after / before;
  slow_machine.v[kH2dBw] = slow_machine.v[kD2hBw] = slow * 1e9;
  // The cap (keep-all's peak less k boundaries) where the fast-link plan loses most on the
  // slow machine, by the planner's own prediction.
  const double keep_peak = make_plan(req, "keep-all").predicted_peak.gpu;
  Plan plan;
  double gain = 0;
  for (int k = 1; k < c.num_layers; ++k) {
    PlanRequest r = req;
    r.gpu_cap_bytes = keep_peak - k * boundary;
    const Plan p = make_plan(r, "milp");
    PlanRequest s = r;
    s.hardware = with_rates(s.hardware, slow_machine);
    s.measured = layer_times(slow_machine);
    const Plan q = make_plan(s, "milp");
    if (!p.feasible || !q.feasible) continue;
    if (predict_on(p, slow_machine) / q.predicted_step_s > gain) {
      gain = predict_on(p, slow_machine) / q.predicted_step_s;
      plan = p;
      req.gpu_cap_bytes = r.gpu_cap_bytes;
    }
  }
  ASSERT_GT(gain, 1.2) << "no cap makes the fast-link plan wrong for the slow links; the test needs one";
  ASSERT_GT(plan.tier_counts().cpu, 0.0);

  const TrainRun fixed = train(plan, req, false, fast, slow, 16, 4, before, after, dir.str());
  const TrainRun adaptive = train(plan, req, true, fast, slow, 16, 4, before, after, dir.str());
  EXPECT_TRUE(fixed.events.empty());
  EXPECT_GE(adaptive.switches, 1) << messages(adaptive);
  bool saw_link_drift = false;
  for (const ReplanEvent& e : adaptive.events)
    for (const DriftedMeasure& d : e.result.drift.measures) saw_link_drift |= d.measure == kH2dBw && d.drift() < -0.5;
  EXPECT_TRUE(saw_link_drift) << messages(adaptive);
  expect_bitwise(fixed, adaptive);
}

// A switch between plans that page the top layers' optimizer states from NVMe: the states
// move from the old executor's NVMe slots to the new one's (the optimizer's math would
// part from the static run's at the first update after the switch if they did not).
TEST(Replanner, ASwitchCarriesThePagedOptimizerStates) {
  test::TempDir dir("replan-paged");
  // The plan believes in links a thousand times slower than the emu's unthrottled copies,
  // so it recomputes what its cap cannot hold; the measured links make host memory free.
  // Its layer times are fixed: the plan, not this machine's speed, decides the cap.
  PlanRequest req = request(0.002, kFixedLayerTimes);
  req.nvme_state_layers = 2;
  const ModelConfig c = model();
  const double boundary = 4.0 * 4 * 256 * c.hidden_size;
  const double keep_peak = make_plan(req, "keep-all").predicted_peak.gpu;
  Plan plan;
  for (int k = 1; k < c.num_layers && !(plan.feasible && plan.tier_counts().recompute > 0); ++k) {
    req.gpu_cap_bytes = keep_peak - k * boundary;  // keep-all's peak less k boundaries
    plan = make_plan(req, "milp");
  }
  ASSERT_TRUE(plan.feasible) << plan.infeasible_reason;
  ASSERT_EQ(plan.nvme_state_layers.size(), 2u);
  ASSERT_GT(plan.tier_counts().recompute, 0.0);
  // Any faster plan is switched to (margin 0): the switch, not its gain, is under test.
  const TrainRun fixed = train(plan, req, false, 0, 0, 24, 0, 1, 1, dir.str(), 0);
  const TrainRun adaptive = train(plan, req, true, 0, 0, 24, 0, 1, 1, dir.str(), 0);
  EXPECT_GE(adaptive.switches, 1) << messages(adaptive);
  expect_bitwise(fixed, adaptive);
}

// A re-plan keeps what the running plan pages, layer by layer (PlanRequest::keep_paged):
// a plan that pages every state it can and the masters of some layers (a mix), re-solved
// on a machine whose NVMe reads run at half speed and whose host would hold every master
// (which the trainer's blocks are not set up for), pages the same layers' states and
// masters, so that it can be switched to. The running plan's mix is given (keep_paged
// too), not left to its solve: within a limit in CPU seconds the MILP's own mix depends
// on how far a loaded or sanitized machine gets (one stopped at the rule's start, which
// pages every master). Its host fits that mix and none with fewer masters paged.
TEST(Replanner, KeepsWhatPagesLayerByLayer) {
  PlanRequest req = test::tiny_request(16, "h800", 4);
  req.page_master = true;
  req.time_limit_s = 5;
  req.nvme_state_layers = req.model.num_layers - 2;
  const CostModel cm = build_cost_model(req);
  StatePaging states_alone = plan_state_paging(req, cm, true);
  page_parts(states_alone, cm, std::vector<bool>(16, false), std::vector<bool>(16, false));
  req.hardware.host_memory_bytes = (states_alone.host_state_bytes - 5.5 * cm.layer(2).master_bytes) / 0.9;
  req.keep_paged = PlanRequest::PagedLayers{};
  for (int j = 2; j < 16; ++j) req.keep_paged->states.push_back(j);
  for (int j = 10; j < 16; ++j) req.keep_paged->masters.push_back(j);
  const Plan running = make_plan(req, "milp");
  ASSERT_TRUE(running.feasible) << running.infeasible_reason;
  ASSERT_EQ(running.nvme_master_layers, req.keep_paged->masters);
  ASSERT_LT(running.nvme_master_layers.size(), running.nvme_state_layers.size()) << "not a mix";
  req.keep_paged->masters.pop_back();  // five masters paged: the host is short
  const Plan fewer = make_plan(req, "milp");
  EXPECT_FALSE(fewer.feasible) << "the host holds more masters than the test means it to";
  std::printf("five masters paged: %s\n", fewer.infeasible_reason.c_str());
  PlanRequest again = request_of(running, 5);
  again.hardware.nvme_read_bw *= 0.5;
  again.hardware.host_memory_bytes *= 2;
  const Plan re = make_plan(again, "milp");
  ASSERT_TRUE(re.feasible) << re.infeasible_reason;
  EXPECT_EQ(re.nvme_state_layers, running.nvme_state_layers);
  EXPECT_EQ(re.nvme_master_layers, running.nvme_master_layers);
  EXPECT_EQ(re.nvme_grad_layers, running.nvme_grad_layers);
  EXPECT_EQ(re.nvme_copy_layers, running.nvme_copy_layers);
  Plan faster = re;
  faster.predicted_step_s = 0.5 * running.predicted_step_s;
  Drift drift;
  drift.measured = assumed_measures(running);
  const ReplanResult judged = judge_replan(running, faster, drift, 0.05);
  EXPECT_TRUE(judged.adopt) << judged.note;
}

// A re-plan that cannot be solved (here: its request's cap holds nothing) keeps the plan
// that runs, says why, and changes nothing of the math.
TEST(Replanner, AnInfeasibleReplanKeepsThePlan) {
  test::TempDir dir("replan-infeasible");
  // The plan believes in links 100x faster than the emu's: drift from the first steps.
  PlanRequest req = request(5, kFixedLayerTimes);
  const Plan plan = make_plan(req, "milp");
  ASSERT_TRUE(plan.feasible) << plan.infeasible_reason;
  PlanRequest impossible = req;
  impossible.gpu_cap_bytes = 1000;
  const TrainRun fixed = train(plan, req, false, 0.05, 0.05, 12, 0, 1, 1, dir.str());
  const TrainRun adaptive = train(plan, impossible, true, 0.05, 0.05, 12, 0, 1, 1, dir.str());
  EXPECT_EQ(adaptive.switches, 0);
  bool noted = false;
  for (const ReplanEvent& e : adaptive.events)
    if (!e.started) {
      EXPECT_FALSE(e.switched);
      EXPECT_NE(e.message().find("kept the current plan: the re-plan is infeasible"), std::string::npos) << e.message();
      noted = true;
    }
  EXPECT_TRUE(noted) << messages(adaptive);
  expect_bitwise(fixed, adaptive);
}

// A solver that throws, a plan for another shape: the current plan stays, with a note.
TEST(Replanner, FailedOrForeignReplansAreNotAdopted) {
  const PlanRequest req = request(0.05, kFixedLayerTimes);
  const Plan current = make_plan(req, "milp");
  ASSERT_TRUE(current.feasible);
  Drift drift;
  drift.measured = assumed_measures(current);
  BackgroundSolve solve;
  solve.start(req, "no-such-policy", current, drift, 0.05);
  const ReplanResult r = solve.wait();
  EXPECT_FALSE(r.adopt);
  EXPECT_NE(r.note.find("the re-plan failed"), std::string::npos) << r.note;
  PlanRequest other = req;
  other.batch = 2;
  const ReplanResult foreign = judge_replan(current, make_plan(other, "milp"), drift, 0.05);
  EXPECT_FALSE(foreign.adopt);
  EXPECT_NE(foreign.note.find("another model or shape"), std::string::npos) << foreign.note;
  // A re-plan that pages other parts (here the gradients, or the bf16 copies of other
  // layers) is not adopted: the trainer's host blocks and slots are set up for what pages.
  for (bool copies : {false, true}) {
    Plan faster = current;
    faster.predicted_step_s = 0.5 * current.predicted_step_s;
    if (copies)
      faster.nvme_copy_layers = {3};
    else
      faster.nvme_grad_layers = current.nvme_grad_layers.empty() ? std::vector<int>{3} : std::vector<int>{};
    const ReplanResult other_parts = judge_replan(current, faster, drift, 0.05);
    EXPECT_FALSE(other_parts.adopt) << (copies ? "copies" : "gradients");
    EXPECT_NE(other_parts.note.find("other layers or parts"), std::string::npos) << other_parts.note;
  }
  // The same plan again is not faster by the margin: no switch (no flapping between equals).
  const ReplanResult same = judge_replan(current, make_plan(req, "milp"), drift, 0.05);
  EXPECT_FALSE(same.adopt);
  EXPECT_NE(same.note.find("not 5% faster"), std::string::npos) << same.note;
}

// `lazytrain train`: a re-plan is printed and logged as a "replan" record in the metrics
// JSONL, whose step records stay one per step.
TEST(Replanner, TrainerLogsReplans) {
  test::TempDir dir("replan-train");
  HardwareProfile hw = test::streaming_cpu_profile();
  hw.peak_flops = 1e15;  // the profile's compute is a thousand times too fast: drift at once
  const std::string profile = dir.str() + "/profile.json";
  std::ofstream(profile) << hardware_profile_to_json(hw).dump(2);
  TrainConfig c = test::tiny_config(dir.str() + "/run");
  // Steps of about 1.5 ms: a re-plan starts only while the rest of the run outlasts the
  // last solve (at least 50 ms; the first MILP's own time, longer on a loaded machine), so
  // 60 steps (~90 ms) sometimes started none; 400 leave a margin of ten.
  constexpr int kSteps = 400;
  c.steps = kSteps;
  c.log_every = 1;
  c.precision = "f32";
  c.compute_budget_gb = 1;
  c.hardware = profile;
  c.offload_dir = dir.str();
  c.replan_steps = 2;
  run_training(c);
  std::ifstream in(dir.str() + "/run/metrics.jsonl");
  std::vector<int64_t> steps;
  int replans = 0;
  std::string records;  // for the failure messages
  for (std::string line; std::getline(in, line);) {
    records += line + "\n";
    const nlohmann::json r = nlohmann::json::parse(line);
    if (r.value("record", "") == "replan") {
      ++replans;
      EXPECT_FALSE(r["drift"].empty()) << r.dump();
      EXPECT_GT(r["old_predicted_s"].get<double>(), 0) << r.dump();
      continue;
    }
    steps.push_back(r["step"]);
  }
  EXPECT_GE(replans, 1) << records;
  std::vector<int64_t> want(kSteps);
  for (int i = 0; i < kSteps; ++i) want[i] = i + 1;
  EXPECT_EQ(steps, want);
}

}  // namespace
}  // namespace lt
