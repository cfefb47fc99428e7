// `lazytrain bench adapt`: does re-planning during a run pay (issue 13, part 2)? A small
// model trains on the emu backend under a MILP plan solved for fast links and a compute-
// tier cap, so the plan parks boundaries in host memory. Partway through (after a third
// of the steps) the H2D and D2H throttles drop to a quarter and the compute slowdown
// changes. The run goes twice from the same weights and data: once on the static plan,
// once adaptive (train/streamed_training.h: drift seen, MILP re-solved in the background,
// plan switched at a step boundary). Both are timed over every step after the change
// (the adaptive run's steps before its switch, and the solve's share of the CPU, count
// against it). The last line is
//   RESULT adapt static_s=<mean step after the change> adaptive_s=<same> speedup=<ratio>
//          replans=<plans switched to> bitwise=<per-step losses and final weights equal>
// The compute-tier cap is chosen, among keep-all's peak less a few boundaries, as the one
// where the plan solved for the fast links loses most on the slow ones by the planner's
// own prediction.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cli/bench_streaming.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/measure.h"
#include "core/threads.h"
#include "exec/backend.h"
#include "model/checkpoint.h"
#include "plan/planner.h"
#include "train/replanner.h"
#include "train/streamed_training.h"
#include "train/updater.h"

namespace lt::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct AdaptArgs {
  StreamingBenchArgs base;  // layers, hidden, seq, batch, kernel threads, offload dir
  int steps = 36;
  int vocab = 256;
  // The links the plan is solved for; 0: as fast as one boundary's trip takes one layer's
  // forward (measured), so that the trips just hide before the change and cost several
  // forwards after it, whatever this machine's speed.
  double fast_gbps = 0;
  double slow_factor = 0.25;     // what they drop to, as a fraction
  double compute_before = 1.5;   // emu compute slowdown before the change
  double compute_after = 1.0;    // and after it
  double threshold = 0.15;
  int replan_steps = 3;
  double time_limit = 5;
};

ModelConfig adapt_model(const AdaptArgs& a) {
  ModelConfig c;
  c.model_type = "llama";
  c.hidden_size = a.base.hidden;
  c.num_layers = a.base.layers;
  c.num_heads = std::max(1, a.base.hidden / 16);
  c.num_kv_heads = std::max<int64_t>(1, c.num_heads / 2);
  c.head_dim = a.base.hidden / c.num_heads;
  c.intermediate_size = a.base.hidden;  // small weights next to the boundaries
  c.vocab_size = a.vocab;
  c.max_position_embeddings = a.base.seq;
  c.rms_norm_eps = 1e-5;
  c.tie_word_embeddings = true;
  c.torch_dtype = "float32";
  return c;
}

// Per-layer compute on the emu backend as the run will see it (the compute slowdown before
// the change): the fastest of a few keep-all steps, as other processes only ever add time.
MeasuredLayerTimes probe_compute(const PlanRequest& req, const AdaptArgs& a) {
  const Plan keep = make_plan(req, "keep-all");
  auto emu = make_emu(0, 0, a.compute_before);
  StreamingOptions so;
  so.offload_dir = a.base.offload_dir;
  StreamingExecutor ex(keep, *emu, so);
  ModelParameters params(req.model), grads(req.model);
  init_parameters(params, 7);
  std::vector<int32_t> ids(req.batch * req.seq);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 2654435761u) % req.model.vocab_size);
  std::vector<double> f, b, h;
  for (int s = 0; s < 6; ++s) {
    const StepMeasures m = measure_step(keep, ex.step(params, grads, ids.data(), ids.data()), {}, {});
    if (s == 0) continue;  // warm-up
    f.push_back(m.v[kForwardS]);
    b.push_back(m.v[kBackwardS]);
    h.push_back(m.v[kHeadS]);
  }
  return {*std::min_element(f.begin(), f.end()), *std::min_element(b.begin(), b.end()),
          *std::min_element(h.begin(), h.end())};
}

struct Run {
  std::vector<double> loss, step_s;
  std::vector<float> weights;
  int replans = 0;
};

TrainConfig run_config(const AdaptArgs& a, const Plan& plan, bool adaptive) {
  TrainConfig c;
  c.batch = plan.batch;
  c.seq_len = plan.seq;
  c.steps = a.steps;
  c.optimizer = "adamw8";
  c.lr = 1e-3;
  c.warmup_steps = 0;
  c.precision = "f32";
  c.backend = "emu";
  c.offload_dir = a.base.offload_dir;
  c.adaptive_plan = adaptive ? "on" : "off";
  c.replan_threshold = a.threshold;
  c.replan_steps = a.replan_steps;
  c.plan_time_limit = a.time_limit;
  return c;
}

Run train(const AdaptArgs& a, const Plan& plan, const PlanRequest& req, bool adaptive) {
  const TrainConfig cfg = run_config(a, plan, adaptive);
  const ModelConfig& mc = plan.model;
  ModelParameters params(mc), grads(mc);
  init_parameters(params, 1);
  Updater updater(cfg, params, plan.nvme_state_layers);
  auto emu = make_emu(a.fast_gbps, a.fast_gbps, a.compute_before);
  EmuBackend& knobs = *emu;
  StreamedTraining::Options opts;
  opts.backend = std::move(emu);
  opts.request = req;
  StreamedTraining st(cfg, plan, params, grads, updater, std::move(opts));
  const int64_t tokens = plan.batch * plan.seq;
  std::vector<int32_t> ids(tokens), labels(tokens);
  uint64_t s = 99;
  const int change = a.steps / 3;
  Run run;
  for (int step = 1; step <= a.steps; ++step) {
    next_tokens(ids, labels, mc.vocab_size, s);  // the same tokens in both runs
    if (step == change + 1) {  // the machine changes between two steps
      knobs.set_link_rates(a.fast_gbps * a.slow_factor, a.fast_gbps * a.slow_factor);
      knobs.set_compute_slowdown(a.compute_after);
      std::printf("  after step %d: links %.3f -> %.3f GB/s, compute slowdown %.2f -> %.2f\n", change, a.fast_gbps,
                  a.fast_gbps * a.slow_factor, a.compute_before, a.compute_after);
    }
    int64_t predicted = 0;
    for (int64_t bi = 0; bi < plan.batch; ++bi) predicted += plan.seq - 1;
    const auto t0 = Clock::now();
    const StreamedTraining::Outcome o = st.step(ids.data(), labels.data(), predicted, step);
    run.step_s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    run.loss.push_back(o.loss);
    for (const ReplanEvent& e : o.replans) std::printf("  %s\n", e.message().c_str());
  }
  for (const ReplanEvent& e : st.finish(a.steps)) std::printf("  %s\n", e.message().c_str());
  st.flush();
  run.weights.assign(params.data(), params.data() + params.numel());
  run.replans = st.replans();
  return run;
}

double mean_after(const std::vector<double>& v, int from) {
  double s = 0;
  for (size_t i = from; i < v.size(); ++i) s += v[i];
  return s / static_cast<double>(v.size() - from);
}

void run_adapt(const AdaptArgs& a0) {
  if (a0.steps < 6) throw Error("--steps must be at least 6", "bench adapt", "the change comes after a third of them");
  if (!(a0.slow_factor > 0 && a0.fast_gbps >= 0)) throw Error("link rates must be positive", "bench adapt", "");
  if (a0.base.kernel_threads > 0) set_num_threads(a0.base.kernel_threads);
  AdaptArgs a = a0;
  PlanRequest req = bench_request(a.base, "emu (bench adapt)");
  req.model = adapt_model(a);
  req.model_name = "adapt-llama-" + std::to_string(a.base.layers) + "x" + std::to_string(a.base.hidden);
  req.hardware.backend = "emu";
  req.nvme_act_budget_bytes = 0;  // host memory or recompute: the choice the links decide
  req.nvme_state_layers = 0;
  req.time_limit_s = a.time_limit;
  req.measured = probe_compute(req, a);
  const double boundary = static_cast<double>(a.base.batch) * a.base.seq * a.base.hidden * req.hardware.act_bytes;
  if (a.fast_gbps == 0) a.fast_gbps = boundary / req.measured.forward_s / 1e9;
  req.hardware.h2d_bw = req.hardware.d2h_bw = a.fast_gbps * 1e9;
  std::printf("bench adapt: %s, batch %d x seq %d, %d steps; links %.3f GB/s, then %.3f after step %d; "
              "compute per layer forward %.2f ms, backward %.2f ms, head %.2f ms (emu slowdown %.2f)\n",
              req.model_name.c_str(), a.base.batch, a.base.seq, a.steps, a.fast_gbps, a.fast_gbps * a.slow_factor,
              a.steps / 3, req.measured.forward_s * 1e3, req.measured.backward_s * 1e3, req.measured.head_s * 1e3,
              a.compute_before);

  // The machine after the change, as the planner would see it: slow links, compute scaled.
  StepMeasures after;
  after.v[kForwardS] = req.measured.forward_s * a.compute_after / a.compute_before;
  after.v[kBackwardS] = req.measured.backward_s * a.compute_after / a.compute_before;
  after.v[kHeadS] = req.measured.head_s * a.compute_after / a.compute_before;
  after.v[kH2dBw] = after.v[kD2hBw] = a.fast_gbps * a.slow_factor * 1e9;
  const Plan keep = make_plan(req, "keep-all");
  Plan chosen;
  double best_loss = 0;
  const int L = a.base.layers;
  for (int k = L / 2; k < L; ++k) {  // caps that hold all but k boundaries of keep-all
    PlanRequest r = req;
    r.gpu_cap_bytes = keep.predicted_peak.gpu - k * boundary;
    Plan fast = make_plan(r, "milp");
    if (!fast.feasible) {
      std::printf("  cap keep-all less %d boundaries (%.1f MB): infeasible (%s)\n", k, r.gpu_cap_bytes / 1e6,
                  fast.infeasible_reason.c_str());
      continue;
    }
    PlanRequest slow = r;
    slow.hardware = with_rates(slow.hardware, after);
    slow.measured = layer_times(after);
    const Plan re = make_plan(slow, "milp");
    if (!re.feasible) continue;
    const double loss = predict_on(fast, after) / re.predicted_step_s;
    const Plan::TierCounts tf = fast.tier_counts(), ts = re.tier_counts();
    std::printf("  cap keep-all less %d boundaries (%.1f MB): fast-link plan cpu %.1f recomputed %.0f; slow-link plan "
                "cpu %.1f recomputed %.0f; predicted after the change %.4f vs %.4f s\n",
                k, r.gpu_cap_bytes / 1e6, tf.cpu, tf.recompute, ts.cpu, ts.recompute, predict_on(fast, after),
                re.predicted_step_s);
    if (loss > best_loss) {
      best_loss = loss;
      chosen = fast;
      req.gpu_cap_bytes = r.gpu_cap_bytes;
    }
  }
  if (chosen.windows.empty()) throw Error("no cap gave a feasible plan", "bench adapt", "try other --layers/--seq");
  std::printf("plan: cap %.1f MB, predicted %.4f s per step on the fast links, %.4f s on the slow ones (%.2fx the "
              "slow-link plan)\n",
              req.gpu_cap_bytes / 1e6, chosen.predicted_step_s, predict_on(chosen, after), best_loss);

  std::printf("static run:\n");
  const Run st = train(a, chosen, req, false);
  std::printf("adaptive run:\n");
  const Run ad = train(a, chosen, req, true);
  const int from = a.steps / 3;
  const double s_static = mean_after(st.step_s, from), s_adapt = mean_after(ad.step_s, from);
  const bool bitwise = st.loss.size() == ad.loss.size() &&
                       std::memcmp(st.loss.data(), ad.loss.data(), st.loss.size() * sizeof(double)) == 0 &&
                       st.weights.size() == ad.weights.size() &&
                       std::memcmp(st.weights.data(), ad.weights.data(), st.weights.size() * sizeof(float)) == 0;
  std::printf("%6s %12s %12s %12s\n", "step", "static_s", "adaptive_s", "loss");
  for (size_t i = 0; i < st.step_s.size(); ++i)
    std::printf("%6zu %12.4f %12.4f %12.6f%s\n", i + 1, st.step_s[i], ad.step_s[i], st.loss[i],
                st.loss[i] == ad.loss[i] ? "" : "  (losses differ)");
  std::printf("mean step over steps %d..%d (after the change): static %.4f s, adaptive %.4f s\n", from + 1, a.steps,
              s_static, s_adapt);
  std::printf("RESULT adapt static_s=%.4f adaptive_s=%.4f speedup=%.3f replans=%d bitwise=%s\n", s_static, s_adapt,
              s_static / s_adapt, ad.replans, bitwise ? "true" : "false");
}

}  // namespace

void add_bench_adapt_command(CLI::App& app) {
  CLI::App* parent = bench_command(app);
  auto a = std::make_shared<AdaptArgs>();
  a->base.layers = 8;
  a->base.hidden = 64;
  a->base.seq = 256;
  a->base.batch = 8;
  CLI::App* cmd = parent->add_subcommand("adapt", "Re-planning during a run vs the static plan, on emu links that slow down");
  cmd->add_option("--layers", a->base.layers, "decoder layers")->capture_default_str();
  cmd->add_option("--hidden", a->base.hidden, "hidden size")->capture_default_str();
  cmd->add_option("--seq", a->base.seq, "sequence length")->capture_default_str();
  cmd->add_option("--batch", a->base.batch, "batch size")->capture_default_str();
  cmd->add_option("--steps", a->steps, "training steps per run (the change comes after a third)")->capture_default_str();
  cmd->add_option("--fast-gbps", a->fast_gbps, "link rate before the change, GB/s (0: a boundary's trip takes one forward)")->capture_default_str();
  cmd->add_option("--slow-factor", a->slow_factor, "link rate after the change, as a fraction")->capture_default_str();
  cmd->add_option("--compute-before", a->compute_before, "emu compute slowdown before the change (>= 1)")
      ->capture_default_str();
  cmd->add_option("--compute-after", a->compute_after, "emu compute slowdown after the change (>= 1)")
      ->capture_default_str();
  cmd->add_option("--threshold", a->threshold, "re-plan drift threshold")->capture_default_str();
  cmd->add_option("--replan-steps", a->replan_steps, "drifted steps before a re-plan")->capture_default_str();
  cmd->add_option("--time-limit", a->time_limit, "MILP time limit, s")->capture_default_str();
  cmd->add_option("--kernel-threads", a->base.kernel_threads, "kernel threads (0: --threads)")->capture_default_str();
  cmd->add_option("--offload-dir", a->base.offload_dir, "directory for the NVMe store's probe")->capture_default_str();
  cmd->callback([a] { run_adapt(*a); });
}

}  // namespace lt::cli
