// `lazytrain train --plan`: the trainer through the streaming executor, out of core, with
// the lazy optimizer and the top layers' optimizer states paged from NVMe, gives bitwise
// the in-memory trainer's run (fp32): losses, final weights and optimizer state, on the
// cpu and emu backends, straight through and resumed from a checkpoint.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"
#include "core/threads.h"
#include "model/checkpoint.h"
#include "plan/hardware_profile.h"
#include "plan/plan_json.h"
#include "plan/plan_validate.h"
#include "plan/planner.h"
#include "plan/state_paging.h"
#include "dist/device_collectives.h"
#include "exec/backend_cuda.h"
#include "train/streamed_training.h"
#include "train/trainer.h"
#include "../exec/streaming_test_util.h"
#include "../plan/plan_test_util.h"
#include "test_util.h"
#include "out_of_core_plan.h"
#include "train_test_util.h"

namespace lt {
namespace {

// The trainer tests' tiny run, six layers deep (layers 2..5 can page their optimizer
// states), with accumulation, in fp32 (what the streaming executor computes in).
TrainConfig tiny_config(const std::string& out) {
  TrainConfig c = test::tiny_config(out);
  c.scratch_layers = 6;
  c.seq_len = 32;
  c.grad_accum = 2;
  c.steps = 8;
  c.warmup_steps = 2;
  c.synthetic_train_problems = 200;
  c.precision = "f32";
  return c;
}

// run_training(c) throws an lt::Error whose message contains `part`.
void expect_training_error(const TrainConfig& c, const std::string& part) {
  try {
    run_training(c);
    FAIL() << "expected an lt::Error mentioning " << part;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

void expect_same_run(const TrainSummary& s, const TrainSummary& ref, const std::string& what) {
  EXPECT_EQ(std::memcmp(&s.final_loss, &ref.final_loss, sizeof(double)), 0)
      << what << ": loss " << s.final_loss << " vs " << ref.final_loss;
  const std::vector<float> a = test::final_weights(s.checkpoint_dir), b = test::final_weights(ref.checkpoint_dir);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << what << ": final weights differ";
  EXPECT_EQ(test::read_file(s.checkpoint_dir + "/optimizer.bin"), test::read_file(ref.checkpoint_dir + "/optimizer.bin"))
      << what << ": optimizer state differs";
}

class StreamedTraining : public ::testing::Test {
 protected:
  // A run that plans itself (compute_budget_gb) on the streaming cpu profile, for the
  // compute cap of the fixture's plan, into `out`.
  TrainConfig self_planned(const std::string& out) {
    const std::string profile = plan_dir_.str() + "/cpu.json";
    {
      std::ofstream f(profile);
      f << hardware_profile_to_json(test::streaming_cpu_profile()).dump(2);
    }
    TrainConfig c = tiny_config(out);
    c.compute_budget_gb = load_plan(plan_path_).gpu_cap_bytes / 1e9;
    c.hardware = profile;
    c.offload_dir = plan_dir_.str();
    return c;
  }

  void SetUp() override {
    reference_ = run_training(tiny_config(ref_dir_.str()));
    const TrainConfig tiny = tiny_config("");
    const Plan p = test::out_of_core_plan(load_model_config(reference_.checkpoint_dir), tiny.batch, tiny.seq_len, true);
    ASSERT_TRUE(p.feasible) << p.infeasible_reason;
    const Plan::TierCounts tc = p.tier_counts();
    ASSERT_GT(tc.cpu + tc.nvme + tc.recompute, 0.0) << "the plan keeps every boundary on the compute tier";
    ASSERT_FALSE(p.nvme_state_layers.empty()) << "the plan pages no optimizer state";
    plan_path_ = plan_dir_.str() + "/plan.json";
    save_plan(p, plan_path_);
  }
  TrainConfig streamed(const std::string& out, const std::string& backend) const {
    TrainConfig c = tiny_config(out);
    c.plan = plan_path_;
    c.backend = backend;
    c.offload_dir = plan_dir_.str();
    return c;
  }
  void expect_same_as_reference(const TrainSummary& s, const std::string& what) const {
    expect_same(s, reference_, what);
  }
  static void expect_same(const TrainSummary& s, const TrainSummary& ref, const std::string& what) {
    expect_same_run(s, ref, what);
  }
  test::TempDir ref_dir_{"streamed-ref"}, plan_dir_{"streamed-plan"};
  TrainSummary reference_;
  std::string plan_path_;
};

TEST_F(StreamedTraining, MatchesTheInMemoryTrainerBitwise) {
  for (const char* backend : {"cpu", "emu"}) {
    test::TempDir out(std::string("streamed-") + backend);
    const TrainSummary s = run_training(streamed(out.str(), backend));
    expect_same_as_reference(s, backend);
    EXPECT_GT(s.peak_nvme_bytes, 0) << backend;
  }
}

// bf16 matmuls, the trainer's default: the streaming run reads the bf16 compute copy the
// lazy updates keep current (host views on cpu, bf16 weight slots on emu), and matches
// the in-memory bf16 run bit for bit.
TEST_F(StreamedTraining, Bf16MatchesTheInMemoryTrainerBitwise) {
  test::TempDir ref_dir("streamed-bf16-ref");
  TrainConfig in_memory = tiny_config(ref_dir.str());
  in_memory.precision = "bf16";
  const TrainSummary ref = run_training(in_memory);
  EXPECT_NE(ref.final_loss, reference_.final_loss) << "bf16 and fp32 runs should differ";
  for (const char* backend : {"cpu", "emu"}) {
    test::TempDir run(std::string("streamed-bf16-") + backend);
    TrainConfig c = streamed(run.str(), backend);
    c.precision = "bf16";
    expect_same(run_training(c), ref, std::string("bf16 ") + backend);
  }
}

// The paging tests' runs: evaluations and checkpoints along, no accumulation (paged
// gradients and copies do not take it).
TrainConfig paged_run_config(const std::string& out, const std::string& precision) {
  TrainConfig c = tiny_config(out);
  c.scratch_layers = 10;
  c.grad_accum = 1;
  c.precision = precision;
  c.eval_problems = 4;
  c.eval_every = 3;
  c.save_every = 4;
  return c;
}

// What a paged layer's slot holds besides its optimizer state: its matrices' fp32 masters
// (bf16 runs, Plan::nvme_master_layers) and its gradients (nvme_grad_layers), each on a host
// that paging one part fewer cannot fit. The runs (with evaluations, checkpoints and a
// resume from one) are the in-memory runs bit for bit; each part lowers the run's host
// figure and takes NVMe bytes. No accumulation: paged gradients do not take it.
TEST(StreamedTrainingPagedParts, MatchTheInMemoryRunsBitwise) {
  const auto config = paged_run_config;
  test::TempDir plan_dir("paged-parts-plan"), bf16_ref_dir("paged-parts-ref-bf16"), f32_ref_dir("paged-parts-ref-f32");
  struct Parts {
    const char* precision;
    bool master, grads;
  };
  std::map<std::string, TrainSummary> ref;
  std::map<std::string, std::vector<TrainSummary>> runs;  // per precision: cpu and emu runs, part by part
  for (const Parts parts : {Parts{"bf16", false, false}, Parts{"bf16", true, false}, Parts{"bf16", true, true},
                            Parts{"f32", false, false}, Parts{"f32", false, true}}) {
    const std::string precision = parts.precision;
    const std::string what = precision + (parts.master ? " masters" : "") + (parts.grads ? " gradients" : "");
    if (!ref.count(precision))
      ref[precision] = run_training(config((precision == "bf16" ? bf16_ref_dir : f32_ref_dir).str(), precision));
    const TrainConfig shape = config("", precision);
    const Plan p = test::out_of_core_plan(load_model_config(ref[precision].checkpoint_dir), shape.batch,
                                          shape.seq_len, true, 1, true, parts.master, parts.grads);
    ASSERT_TRUE(p.feasible) << what << ": " << p.infeasible_reason;
    ASSERT_FALSE(p.nvme_state_layers.empty()) << what << ": the plan pages no layer";
    ASSERT_EQ(p.nvme_master_layers, parts.master ? p.nvme_state_layers : std::vector<int>{}) << what;
    ASSERT_EQ(p.nvme_grad_layers, parts.grads ? p.nvme_state_layers : std::vector<int>{}) << what;
    if (parts.grads) {  // the executor's three gradient buffers (exec/state_pager.h) are reused
      ASSERT_GE(p.nvme_state_layers.size(), 4u) << what << ": no paged layer reuses a gradient buffer";
    }
    const std::string plan_path = plan_dir.str() + "/" + std::to_string(runs[precision].size()) + precision + ".json";
    save_plan(p, plan_path);
    for (const char* backend : {"cpu", "emu"}) {
      test::TempDir out(std::string("paged-parts-") + backend);
      TrainConfig c = config(out.str(), precision);
      c.plan = plan_path;
      c.backend = backend;
      c.offload_dir = plan_dir.str();
      runs[precision].push_back(run_training(c));
      expect_same_run(runs[precision].back(), ref[precision], what + " " + backend);
      EXPECT_EQ(runs[precision].back().eval_exact_match, ref[precision].eval_exact_match) << what;
      if (std::string(backend) != "cpu" || !(parts.master || parts.grads)) continue;
      std::filesystem::remove_all(out.path() / "checkpoint-000008");  // resumes from step 4's
      c.resume = true;
      expect_same_run(run_training(c), ref[precision], what + ", resumed");
    }
    if (parts.master) {  // an fp32 run's matmuls read the masters: such a plan is a clear error there
      test::TempDir fp32_out("paged-parts-fp32");
      TrainConfig fp32 = config(fp32_out.str(), "f32");
      fp32.plan = plan_path;
      fp32.offload_dir = plan_dir.str();
      expect_training_error(fp32, "only bf16 runs");
    }
    if (parts.grads) {  // accumulating micro-batches add to the host's gradients
      test::TempDir acc_out("paged-parts-accumulate");
      TrainConfig acc = config(acc_out.str(), precision);
      acc.grad_accum = 2;
      acc.plan = plan_path;
      acc.offload_dir = plan_dir.str();
      expect_training_error(acc, "gradient accumulation");
    }
  }
  // Each part added: a lower host figure, more NVMe bytes (cpu and emu runs alike).
  for (auto& [precision, r] : runs)
    for (size_t k = 2; k < r.size(); ++k) {
      EXPECT_LT(r[k].peak_host_bytes, r[k - 2].peak_host_bytes) << precision << " run " << k << ": no host saved";
      EXPECT_GT(r[k].peak_nvme_bytes, r[k - 2].peak_nvme_bytes) << precision << " run " << k << ": no NVMe taken";
    }
}

// The parts page per layer: of a plan that pages every paged layer's masters and
// gradients (bf16) or gradients (fp32), one layer keeps its masters and gradients on the
// host, another its gradients (each slot then reads and writes back less). The runs on cpu
// and emu (evaluations, checkpoints, a resume) are the in-memory runs bit for bit.
TEST(StreamedTrainingPagedParts, PerLayerMatchTheInMemoryRunsBitwise) {
  const auto config = paged_run_config;
  test::TempDir plan_dir("per-layer-parts-plan");
  for (const std::string precision : {"bf16", "f32"}) {
    test::TempDir ref_dir("per-layer-parts-ref");
    const TrainSummary ref = run_training(config(ref_dir.str(), precision));
    const TrainConfig shape = config("", precision);
    const bool bf16 = precision == "bf16";
    Plan p = test::out_of_core_plan(load_model_config(ref.checkpoint_dir), shape.batch, shape.seq_len, true, 1, true,
                                    bf16, true);
    ASSERT_TRUE(p.feasible) << precision << ": " << p.infeasible_reason;
    ASSERT_GE(p.nvme_grad_layers.size(), 3u) << precision << ": too few paged layers";
    const std::vector<int> all = p.nvme_grad_layers;
    test::keep_on_host(p, all[0], /*masters=*/true);
    if (bf16) test::keep_on_host(p, all[1], /*masters=*/false);  // fp32: the masters never page
    ASSERT_TRUE(validate_plan(p).empty()) << validate_plan(p).front();
    ASSERT_EQ(p.nvme_state_layers, all);
    ASSERT_EQ(p.nvme_grad_layers, std::vector<int>(all.begin() + (bf16 ? 2 : 1), all.end()));
    ASSERT_EQ(p.nvme_master_layers, bf16 ? std::vector<int>(all.begin() + 1, all.end()) : std::vector<int>{});
    const std::string plan_path = plan_dir.str() + "/" + precision + ".json";
    save_plan(p, plan_path);
    for (const char* backend : {"cpu", "emu"}) {
      const std::string what = precision + " " + backend;
      test::TempDir out(std::string("per-layer-parts-") + backend);
      TrainConfig c = config(out.str(), precision);
      c.plan = plan_path;
      c.backend = backend;
      c.offload_dir = plan_dir.str();
      expect_same_run(run_training(c), ref, what);
      if (std::string(backend) != "cpu") continue;
      std::filesystem::remove_all(out.path() / "checkpoint-000008");  // resumes from step 4's
      c.resume = true;
      expect_same_run(run_training(c), ref, what + ", resumed");
    }
  }
}

// The Qwen3.5 hybrid (the 27B preset's family), whose layers differ in size (so each
// paged layer's parts fill a different share of the common slot), fine-tuned with its
// states, masters and gradients paged per layer (the MILP's choice, and one layer keeping
// its masters and gradients on the host): the in-memory fine-tune bit for bit, on cpu and
// emu, and resumed.
TEST(StreamedTrainingPagedParts, HybridModelMatchesTheInMemoryRunBitwise) {
  test::TempDir base("hybrid-paged-base"), plan_dir("hybrid-paged-plan"), ref_dir("hybrid-paged-ref");
  // The model directory: a from-scratch run's tokenizer files, a hybrid's config and weights.
  TrainConfig scratch = paged_run_config(base.str() + "/run", "bf16");
  scratch.steps = 1;
  scratch.warmup_steps = 0;
  scratch.eval_problems = 0;
  const std::string ckpt = run_training(scratch).checkpoint_dir;
  const LayerKind delta = LayerKind::LinearAttention, attention = LayerKind::Attention;
  std::vector<LayerKind> kinds;  // twelve layers: ten may page, more than the slots paging them costs
  for (int k = 0; k < 3; ++k) kinds.insert(kinds.end(), {delta, delta, delta, attention});
  ModelConfig hybrid = test::qwen3_5_tiny_config(kinds);
  hybrid.vocab_size = load_model_config(ckpt).vocab_size;
  const std::string model = base.str() + "/hybrid";
  std::filesystem::create_directories(model);
  for (const auto& f : std::filesystem::directory_iterator(ckpt))
    if (f.path().filename().string().rfind("tokenizer", 0) == 0 || f.path().filename() == "generation_config.json")
      std::filesystem::copy_file(f.path(), model / f.path().filename());
  ModelParameters weights(hybrid);
  init_parameters(weights, 11);
  save_pretrained(weights, model);

  TrainConfig c = paged_run_config(ref_dir.str(), "bf16");
  c.model = model;
  const TrainSummary ref = run_training(c);
  Plan p = test::out_of_core_plan(hybrid, c.batch, c.seq_len, true, 1, true, /*page_master=*/true, /*page_grads=*/true);
  ASSERT_TRUE(p.feasible) << p.infeasible_reason;
  ASSERT_GE(p.nvme_master_layers.size(), 2u) << "too few layers page their masters";
  test::keep_on_host(p, p.nvme_master_layers.front(), /*masters=*/true);
  ASSERT_TRUE(validate_plan(p).empty()) << validate_plan(p).front();
  ASSERT_FALSE(p.nvme_master_layers.empty());
  ASSERT_FALSE(p.nvme_grad_layers.empty());
  std::printf("hybrid plan pages states of %zu layers, masters of %zu, gradients of %zu\n", p.nvme_state_layers.size(),
              p.nvme_master_layers.size(), p.nvme_grad_layers.size());
  const std::string plan_path = plan_dir.str() + "/hybrid.json";
  save_plan(p, plan_path);
  for (const char* backend : {"cpu", "emu"}) {
    test::TempDir out(std::string("hybrid-paged-") + backend);
    TrainConfig run = paged_run_config(out.str(), "bf16");
    run.model = model;
    run.plan = plan_path;
    run.backend = backend;
    run.offload_dir = plan_dir.str();
    expect_same_run(run_training(run), ref, std::string("hybrid ") + backend);
    if (std::string(backend) != "cpu") continue;
    std::filesystem::remove_all(out.path() / "checkpoint-000008");  // resumes from step 4's
    run.resume = true;
    expect_same_run(run_training(run), ref, "hybrid, resumed");
  }
}

// The bf16 copies page too, on a host that every other part paged cannot fit (a keep-all
// plan, whose six paged copies reuse the staging buffers, and the MILP's): the update
// writes each paged copy into the executor's staging, it goes to NVMe in its forward and
// comes back for its backward. The runs on cpu and emu (evaluations, checkpoints, a
// resume) are the in-memory run bit for bit.
TEST(StreamedTrainingPagedCopies, MatchTheInMemoryRunBitwise) {
  const auto config = [](const std::string& out) { return paged_run_config(out, "bf16"); };
  test::TempDir plan_dir("paged-copies-plan"), ref_dir("paged-copies-ref");
  const TrainSummary ref = run_training(config(ref_dir.str()));
  const TrainConfig shape = config("");
  PlanRequest req;
  req.model_name = "streamed-training-test";
  req.model = load_model_config(ref.checkpoint_dir);
  req.hardware = test::streaming_cpu_profile();
  req.hardware.act_bytes = 4;
  req.batch = shape.batch;
  req.seq = shape.seq_len;
  req.page_master = req.page_grads = req.page_copy = true;
  // A host between the rule's state with every layer's other parts paged and with the copies too.
  PlanRequest all = req;
  all.nvme_state_layers = req.model.num_layers - 2;
  const CostModel cm = build_cost_model(all);
  StatePaging paging = plan_state_paging(all, cm, true);
  const double without = paging.host_state_bytes;
  std::vector<bool> copies(req.model.num_layers, false);
  for (int j = 0; j < req.model.num_layers; ++j) copies[j] = StatePaging::copy_may_page(req.model.num_layers, j);
  page_copies(paging, cm, copies);
  req.hardware.host_memory_bytes = (without + paging.host_state_bytes) / 2;
  PlanRequest no_copies = req;
  no_copies.page_copy = false;
  EXPECT_FALSE(make_plan(no_copies, "keep-all").feasible) << "the host fits without paging the copies";
  for (const char* policy : {"keep-all", "milp"}) {
    SCOPED_TRACE(policy);
    const Plan plan = make_plan(req, policy);
    ASSERT_TRUE(plan.feasible) << plan.infeasible_reason;
    ASSERT_FALSE(plan.nvme_copy_layers.empty());
    if (std::string(policy) == "keep-all") {
      ASSERT_GE(plan.nvme_copy_layers.size(), 4u) << "no paged copy reuses a staging buffer";
    }
    const std::string plan_path = plan_dir.str() + "/" + policy + ".json";
    save_plan(plan, plan_path);
    for (const char* backend : {"cpu", "emu"}) {
      test::TempDir out(std::string("paged-copies-") + backend);
      TrainConfig c = config(out.str());
      c.plan = plan_path;
      c.backend = backend;
      c.offload_dir = plan_dir.str();
      c.adaptive_plan = "off";
      const TrainSummary run = run_training(c);
      expect_same_run(run, ref, std::string("paged copies ") + policy + " " + backend);
      EXPECT_EQ(run.eval_exact_match, ref.eval_exact_match) << backend;
      if (std::string(backend) != "cpu") continue;
      std::filesystem::remove_all(out.path() / "checkpoint-000008");  // resumes from step 4's
      c.resume = true;
      expect_same_run(run_training(c), ref, std::string("paged copies ") + policy + ", resumed");
    }
  }
}

TEST_F(StreamedTraining, ResumesBitwise) {
  test::TempDir out("streamed-resume");
  TrainConfig first = streamed(out.str(), "cpu");
  first.save_every = 4;  // a checkpoint mid-run, with paged states saved from NVMe
  run_training(first);
  std::filesystem::remove_all(out.path() / "checkpoint-000008");
  TrainConfig second = first;
  second.resume = true;
  expect_same_as_reference(run_training(second), "resumed");
}

// --compute-budget-gb: the trainer plans the run itself (MILP on the given profile, in
// the executors' fp32 sizes), keeps within the budget, writes the plan beside its
// checkpoints, and still matches the in-memory run; a budget too small is a clear error.
TEST_F(StreamedTraining, PlansItselfForAComputeBudget) {
  test::TempDir out("streamed-budget");
  TrainConfig c = self_planned(out.str());
  expect_same_as_reference(run_training(c), "planned by the trainer");
  const Plan own = load_plan(out.str() + "/plan.json");
  EXPECT_TRUE(own.feasible);
  EXPECT_DOUBLE_EQ(own.gpu_cap_bytes, c.compute_budget_gb * 1e9);
  EXPECT_LE(own.predicted_peak.gpu, own.gpu_cap_bytes);
  EXPECT_EQ(own.hardware.act_bytes, 4);

  c.compute_budget_gb = 1e-4;  // 100 kB: not even the weight slots
  expect_training_error(c, "compute-tier memory short by");

  // A budget that holds batch 1 whole (its keep-all plan's peak) but not batch 8: the
  // error names a smaller batch that fits, each searched batch planned with its own
  // kernels' scratch (with the scratch of batch 8, none would fit).
  TrainConfig one = c;
  one.batch = 1;
  c.compute_budget_gb = make_plan(run_plan_request(one, load_model_config(reference_.checkpoint_dir)), "keep-all")
                            .predicted_peak.gpu / 1e9;
  c.batch = 8;
  expect_training_error(c, "or train with --batch ");
  try {
    run_training(c);
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).find("largest batch that fits: none"), std::string::npos) << e.what();
  }
}

// host_budget_gb: the trainer's plan keeps the host peak within it by paging optimizer
// states to NVMe (the training stays the in-memory run's); a budget that the states alone
// exceed (naming the host budget to raise), or one without a plan of the trainer's, is a
// clear error.
TEST_F(StreamedTraining, PlansWithinAHostBudget) {
  test::TempDir out("streamed-host-budget");
  TrainConfig c = self_planned(out.str());
  // A host whose share for the state is short of the whole state by one and a half
  // layers' optimizer states (state_paging.h).
  const PlanRequest req = run_plan_request(c, load_model_config(reference_.checkpoint_dir));
  const CostModel cm = build_cost_model(req);
  c.host_budget_gb = (cm.host_state_bytes - 1.5 * cm.layer(0).state_bytes) / kHostStateShare / 1e9;
  expect_same_as_reference(run_training(c), "within a host budget");
  const Plan own = load_plan(out.str() + "/plan.json");
  EXPECT_TRUE(own.feasible);
  EXPECT_DOUBLE_EQ(own.hardware.host_memory_bytes, c.host_budget_gb * 1e9);
  EXPECT_FALSE(own.nvme_state_layers.empty()) << "no optimizer state paged for a budget below the unpaged peak";
  EXPECT_LE(own.predicted_peak.cpu, own.hardware.host_memory_bytes);

  test::TempDir out2("streamed-host-budget-small");
  c.output_dir = out2.str();
  c.host_budget_gb = 1e-6;  // 1 kB
  expect_training_error(c, "host memory short by");
  expect_training_error(c, "(in train config (host_budget_gb)): raise --host-budget-gb");  // not the compute tier's
  c.compute_budget_gb = 0;
  expect_training_error(c, "host_budget_gb");
}

// Where no MILP plan keeps the state within its share of the host budget but the keep-all
// plan fits (it may use the whole budget), the run trains with the keep-all plan (the
// in-memory run, bit for bit) instead of failing. The budget: the least keep-all fits,
// by bisection.
TEST_F(StreamedTraining, TakesTheKeepAllPlanWhereOnlyItFitsTheHost) {
  test::TempDir out("streamed-keep-all-fallback");
  TrainConfig c = self_planned(out.str());
  c.compute_budget_gb = 1;  // room for keep-all's every boundary: the host is what binds
  const ModelConfig mc = load_model_config(reference_.checkpoint_dir);
  const auto planned = [&](double budget_gb, const char* policy) {
    TrainConfig at = c;
    at.host_budget_gb = budget_gb;
    return make_plan(run_plan_request(at, mc), policy);
  };
  double lo = 0, hi = test::streaming_cpu_profile().host_memory_bytes / 1e9;
  ASSERT_TRUE(planned(hi, "keep-all").feasible);
  for (int k = 0; k < 30; ++k) {
    const double mid = (lo + hi) / 2;
    (planned(mid, "keep-all").feasible ? hi : lo) = mid;
  }
  ASSERT_FALSE(planned(hi, "milp").feasible) << "the MILP fits where keep-all barely does: nothing to fall back from";
  c.host_budget_gb = hi;
  expect_same_as_reference(run_training(c), "on the keep-all plan");
  const Plan own = load_plan(out.str() + "/plan.json");
  EXPECT_EQ(own.policy, "keep-all");
  EXPECT_LE(own.predicted_peak.cpu, hi * 1e9);
}

// A profile measured on more threads than this process has (a data-parallel rank sharing
// the host, or --threads): the trainer plans at the process's share of its rates.
TEST_F(StreamedTraining, PlansAtItsShareOfTheProfilesThreads) {
  test::TempDir out("streamed-thread-share");
  TrainConfig c = self_planned(out.str());
  const ModelConfig mc = load_model_config(reference_.checkpoint_dir);
  HardwareProfile hw = test::streaming_cpu_profile();
  hw.threads = 4;
  {
    std::ofstream f(c.hardware);
    f << hardware_profile_to_json(hw).dump(2);
  }
  {
    ScopedNumThreads one(1);
    const PlanRequest req = run_plan_request(c, mc);
    EXPECT_DOUBLE_EQ(req.hardware.peak_flops, hw.peak_flops / 4);
    EXPECT_DOUBLE_EQ(req.hardware.host_optimizer_params_per_s, hw.host_optimizer_params_per_s / 4);
  }
  ScopedNumThreads four(4);
  const PlanRequest req = run_plan_request(c, mc);
  EXPECT_DOUBLE_EQ(req.hardware.peak_flops, hw.peak_flops);
  EXPECT_DOUBLE_EQ(req.hardware.host_optimizer_params_per_s, hw.host_optimizer_params_per_s);
}

// The trainer's plan counts the scratch of the kernels its backend will run: the CUDA
// table's on cuda (whose head and layer workspaces are its own), the CPU's on cpu and emu.
// A plan sized with another table's scratch is refused by the executor when it is short.
TEST_F(StreamedTraining, PlansTheScratchOfItsBackendsKernels) {
  test::TempDir out("streamed-backend-scratch");
  TrainConfig c = self_planned(out.str());
  const ModelConfig mc = load_model_config(reference_.checkpoint_dir);
  const std::string cpu_profile = c.hardware, gpu_profile = out.str() + "/gpu.json";
  {
    HardwareProfile gpu = test::streaming_cpu_profile();
    gpu.backend = "cuda";
    std::ofstream(gpu_profile) << hardware_profile_to_json(gpu).dump(2);
  }
  for (const char* backend : {"cpu", "emu", "cuda"}) {
    SCOPED_TRACE(backend);
    c.backend = backend;
    c.hardware = std::string(backend) == "cuda" ? gpu_profile : cpu_profile;
    const KernelTable* table = nullptr;
    if (const std::string no = test::error_of([&] { table = &backend_kernel_table(backend); }); !no.empty()) {
      EXPECT_NE(no.find("without CUDA"), std::string::npos) << no;  // the one table a build may lack
      continue;
    }
    EXPECT_STREQ(table->name, std::string(backend) == "cuda" ? "cuda" : cpu_kernel_table().name);
    for (const char* precision : {"fp32", "bf16"}) {
      c.precision = precision;
      const PlanRequest req = run_plan_request(c, mc);
      const Precision p = c.precision == "bf16" ? Precision::BF16 : Precision::F32;
      const ExecutorScratch want = executor_scratch(mc, c.batch, c.seq_len, *table, p);
      EXPECT_EQ(req.scratch.layer_bytes, want.layer_bytes) << precision;
      EXPECT_EQ(req.scratch.head_bytes, want.head_bytes) << precision;
      const ExecutorScratch at4 = req.scratch_at(4), want4 = executor_scratch(mc, 4, c.seq_len, *table, p);
      EXPECT_EQ(at4.layer_bytes, want4.layer_bytes) << precision;
      EXPECT_EQ(at4.head_bytes, want4.head_bytes) << precision;
    }
  }
}

// A profile measured on more threads than this process has: the plan counts the share
// for what those threads ran (a CPU's GEMMs and the host optimizer), but a GPU's matmul
// rates are the device's, whatever threads the host gives the process.
TEST_F(StreamedTraining, AThreadShareScalesTheHostsRatesNotTheGpus) {
  test::TempDir out("streamed-thread-share");
  TrainConfig c = self_planned(out.str());
  const ModelConfig mc = load_model_config(reference_.checkpoint_dir);
  for (const char* backend : {"cpu", "cuda"}) {
    SCOPED_TRACE(backend);
    // Planning for cuda sizes the cuda table's scratch, which a build without CUDA lacks.
    if (const std::string no = test::error_of([&] { backend_kernel_table(backend); }); !no.empty()) {
      EXPECT_NE(no.find("without CUDA"), std::string::npos) << no;
      std::printf("the %s case is not run: %s\n", backend, no.c_str());
      continue;
    }
    HardwareProfile hw = test::streaming_cpu_profile();
    hw.backend = backend;
    hw.threads = 4 * num_threads();
    hw.bf16_peak_flops = 2 * hw.peak_flops;
    const std::string path = out.str() + "/" + backend + ".json";
    std::ofstream(path) << hardware_profile_to_json(hw).dump(2);
    c.backend = backend;
    c.hardware = path;
    const HardwareProfile got = run_plan_request(c, mc).hardware;
    const double gpu_share = std::string(backend) == "cuda" ? 1.0 : 0.25;
    EXPECT_DOUBLE_EQ(got.peak_flops, hw.peak_flops * gpu_share);
    EXPECT_DOUBLE_EQ(got.bf16_peak_flops, hw.bf16_peak_flops * gpu_share);
    EXPECT_DOUBLE_EQ(got.host_optimizer_params_per_s, hw.host_optimizer_params_per_s * 0.25);
  }
}

// A cuda run planned with a CPU's profile would take half the host's RAM for the device.
TEST_F(StreamedTraining, ACudaRunRefusesACpuProfile) {
  test::TempDir out("streamed-cuda-cpu-profile");
  TrainConfig c = self_planned(out.str());
  c.backend = "cuda";
  const std::string e = test::error_of([&] { run_plan_request(c, load_model_config(reference_.checkpoint_dir)); });
  EXPECT_NE(e.find("describes the cpu backend, and this run computes on cuda (in train config (hardware))"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("lazytrain profile --backend cuda"), std::string::npos) << e;
}

TEST_F(StreamedTraining, PlanForAnotherShapeIsAClearError) {
  test::TempDir out("streamed-mismatch");
  TrainConfig c = streamed(out.str(), "cpu");
  c.batch = 4;
  expect_training_error(c, "batch 2 x seq 32");
  c = streamed(out.str(), "cpu");
  c.scratch_layers = 5;
  expect_training_error(c, "another model");
}

}  // namespace
}  // namespace lt

namespace lt {
namespace {

// Where data-parallel ranks sum their gradients, decided before the backend exists (the
// plan counts it): in the slots on emu, and on cuda only where NCCL can join the ranks,
// one rank per GPU; on the host on cpu, with more micro-batches, or on one rank.
TEST(StreamedTrainingRanks, SlotSumsWhereTheRanksCanSumInTheirSlots) {
  // Rank r on host hosts[r], GPU gpus[r] (a PCI key; 0: none).
  const uint64_t gpu_a = 1 + (0x3b << 8), gpu_b = 1 + (0x5e << 8);
  EXPECT_EQ(gpus_shared_reason({0}, {gpu_a}), "");
  EXPECT_EQ(gpus_shared_reason({0, 0}, {gpu_a, gpu_b}), "");  // one GPU each (device 0 each, under CUDA_VISIBLE_DEVICES)
  EXPECT_EQ(gpus_shared_reason({0, 1}, {gpu_a, gpu_a}), "");  // the same PCI place on two hosts
  EXPECT_EQ(gpus_shared_reason({0, 0, 0}, {0, 0, 0}), "");    // no GPU: DeviceCollectives says why
  EXPECT_EQ(gpus_shared_reason({0, 0, 2, 2}, {gpu_a, gpu_b, gpu_b, gpu_b}),
            "ranks 2 and 3 share the GPU at PCI 0000:5e:00 of their host, and NCCL sums between one rank per GPU");
  EXPECT_EQ(pci_address(1 + (uint64_t(0x10001) << 16 | 0xff << 8 | 0x1f)), "10001:ff:1f");
  {
    Communicator one;  // a world of one, whatever the backend
    EXPECT_EQ(one.host_id(), 0);
    EXPECT_EQ(ranks_gpus_shared_reason(one, "cuda"), "");
  }
  TrainConfig cfg;
  const RankPlanning two{2, true, 0, ""}, one{1, false, 0, ""};
  cfg.backend = "emu";
  EXPECT_TRUE(slot_sums_planned(cfg, two));
  EXPECT_FALSE(slot_sums_planned(cfg, one));
  cfg.grad_accum = 2;
  EXPECT_FALSE(slot_sums_planned(cfg, two));
  cfg.grad_accum = 1;
  cfg.backend = "cpu";
  EXPECT_FALSE(slot_sums_planned(cfg, two));
  cfg.backend = "cuda";
  const bool nccl = DeviceCollectives::unavailable_reason().empty();
  EXPECT_EQ(slot_sums_planned(cfg, two), nccl) << (nccl ? "" : DeviceCollectives::unavailable_reason());
  const RankPlanning sharing{2, true, 0, "ranks 0 and 1 share the GPU at PCI 0000:3b:00 of their host"};
  EXPECT_FALSE(slot_sums_planned(cfg, sharing));
}

}  // namespace
}  // namespace lt
