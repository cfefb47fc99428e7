// `lazytrain bench host-budget` (issue 30, deliverable 5): the bench model trained on the
// emu backend (a separate compute tier) with its host memory at the in-memory footprint,
// and again at a fraction of it (a quarter by default), where the optimizer states, the
// matrices' fp32 masters and bf16 copies (bf16) and the gradients page to an NVMe
// directory as the plan says. Both runs are the trainer's streamed training (StreamedTraining) on the same
// tokens; each step is timed against its plan's prediction, and the final weights are
// compared bit for bit. The plans come from this machine's measured profile (the NVMe
// store's bandwidth, memcpy for the links, a keep-all step's layer times, the 8-bit
// AdamW's rate).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cli/bench_streaming.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/threads.h"
#include "exec/backend.h"
#include "model/checkpoint.h"
#include "model/hybrid_layers.h"
#include "model/parameters.h"
#include "plan/planner.h"
#include "train/streamed_training.h"
#include "train/updater.h"

namespace lt::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct HostBudgetArgs {
  StreamingBenchArgs base;
  double fraction = 0.25;  // of the in-memory run's planned host peak
};

struct Run {
  std::vector<double> step_s;  // every step after the first (whose update is pending, not run)
  std::vector<float> weights;  // after the last step's update
  double host_peak = 0;        // the plan's
  double nvme_bytes = 0;       // its NVMe slots and activations
  size_t paged_layers = 0;
  std::string parts;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

Run train(const HostBudgetArgs& o, const Plan& plan) {
  const StreamingBenchArgs& a = o.base;
  TrainConfig cfg;
  cfg.batch = plan.batch;
  cfg.seq_len = plan.seq;
  cfg.steps = a.steps + 1;
  cfg.optimizer = "adamw8";
  cfg.lr = 1e-3;
  cfg.warmup_steps = 0;
  cfg.precision = a.precision == Precision::BF16 ? "bf16" : "f32";
  cfg.backend = "emu";
  cfg.offload_dir = a.offload_dir;
  cfg.adaptive_plan = "off";
  const ModelConfig& mc = plan.model;
  ModelParameters params(mc), grads(mc);
  init_parameters(params, 1);
  Updater updater(cfg, params, plan.nvme_state_layers);
  StreamedTraining st(cfg, plan, params, grads, updater);
  const int64_t tokens = plan.batch * plan.seq;
  std::vector<int32_t> ids(tokens), labels(tokens);
  uint64_t s = 99;
  Run run;
  for (int step = 1; step <= cfg.steps; ++step) {
    next_tokens(ids, labels, mc.vocab_size, s);  // the same tokens in both runs
    const int64_t predicted = plan.batch * (plan.seq - 1);
    const auto t0 = Clock::now();
    st.step(ids.data(), labels.data(), predicted, step);
    if (step > 1) run.step_s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  st.flush();
  run.weights.assign(params.data(), params.data() + params.numel());
  run.host_peak = plan.predicted_peak.cpu;
  run.nvme_bytes = static_cast<double>(st.nvme_bytes());
  run.paged_layers = plan.nvme_state_layers.size();
  auto of = [](const char* part, const std::vector<int>& layers) {
    return layers.empty() ? std::string() : std::string(", ") + part + " of " + std::to_string(layers.size());
  };
  run.parts = plan.nvme_state_layers.empty() ? "nothing"
              : "optimizer states" + of("fp32 masters", plan.nvme_master_layers) +
                    of("gradients", plan.nvme_grad_layers) + of("bf16 copies", plan.nvme_copy_layers);
  return run;
}

void report(const char* name, const Plan& plan, const Run& r) {
  std::printf("%-10s host budget %8.2f MiB, planned host peak %8.2f MiB; pages %s of %zu layers (NVMe %.2f MiB); "
              "step median %.4f s (%zu steps), predicted %.4f s (%+.1f%%)\n",
              name, plan.hardware.host_memory_bytes / 1048576, r.host_peak / 1048576, r.parts.c_str(),
              r.paged_layers, r.nvme_bytes / 1048576, median(r.step_s), r.step_s.size(), plan.predicted_step_s,
              100 * (median(r.step_s) / plan.predicted_step_s - 1));
}

void run_host_budget(const HostBudgetArgs& o) {
  const StreamingBenchArgs& a = o.base;
  if (!(o.fraction > 0 && o.fraction <= 1))
    throw Error("--fraction must lie in (0, 1]", "bench host-budget", "e.g. 0.25 (a quarter of the in-memory host)");
  if (a.steps < 1) throw Error("--steps must be at least 1", "bench host-budget", "");
  set_num_threads(a.kernel_threads);
  PlanRequest req = bench_request(a, "this machine (bench host-budget)");
  req.hardware.host_optimizer_params_per_s = adamw8_params_per_s(static_cast<int64_t>(layer_params(req.model, 0)));
  measure_layer_times(req, a);
  req.page_master = a.precision == Precision::BF16;  // as train plans itself: one rank, no accumulation
  req.page_grads = true;
  req.page_copy = req.page_master;
  req.time_limit_s = 20;

  const Plan in_memory = make_plan(req, "milp");  // the profile's 64 GB: nothing pages
  if (!in_memory.feasible) throw Error("no in-memory plan: " + in_memory.infeasible_reason, "bench host-budget", "");
  PlanRequest tight = req;
  tight.hardware.host_memory_bytes = o.fraction * in_memory.predicted_peak.cpu;
  const Plan paged = make_plan(tight, "milp");
  std::printf("bench host-budget: %s, batch %d x seq %d, %s, emu backend; NVMe store read %.2f GB/s, write %.2f "
              "GB/s; in-memory host footprint %.2f MiB\n",
              req.model_name.c_str(), a.batch, a.seq, a.precision == Precision::BF16 ? "bf16" : "fp32",
              req.hardware.nvme_read_bw / 1e9, req.hardware.nvme_write_bw / 1e9,
              in_memory.predicted_peak.cpu / 1048576);
  if (!paged.feasible) {
    const InfeasibleReport rep = diagnose_infeasible(tight, "milp", paged);
    std::printf("RESULT host_budget frac=%.2f infeasible: %s\n", o.fraction, rep.shortage.c_str());
    return;
  }
  const Run full = train(o, in_memory), small = train(o, paged);
  report("in-memory", in_memory, full);
  report("paged", paged, small);
  const bool bitwise = full.weights.size() == small.weights.size() &&
                       std::memcmp(full.weights.data(), small.weights.data(), full.weights.size() * sizeof(float)) == 0;
  const double slowdown = median(small.step_s) / median(full.step_s);
  const double pred_err = std::max(std::fabs(median(full.step_s) / in_memory.predicted_step_s - 1),
                                   std::fabs(median(small.step_s) / paged.predicted_step_s - 1));
  std::printf("RESULT host_budget frac=%.2f slowdown=%.2f pred_err=%.3f bitwise=%s\n", o.fraction, slowdown, pred_err,
              bitwise ? "true" : "false");
}

}  // namespace

void add_bench_host_budget_command(CLI::App& app) {
  CLI::App* parent = bench_command(app);
  auto o = std::make_shared<HostBudgetArgs>();
  // 48 layers: at a quarter of the in-memory footprint what cannot page (the embedding and
  // head, the layers that do not page, the staging) must still fit, which 24 layers of
  // this width do not.
  o->base.layers = 48;
  o->base.steps = 5;
  o->base.precision = Precision::BF16;
  CLI::App* cmd = parent->add_subcommand(
      "host-budget", "Train in memory and at a fraction of its host memory with state paged to NVMe; "
                     "measured vs predicted steps, bitwise check");
  cmd->add_option("--fraction", o->fraction, "host budget as a fraction of the in-memory run's planned host peak")
      ->capture_default_str();
  cmd->add_option("--layers", o->base.layers, "decoder layers of the bench model")->capture_default_str();
  cmd->add_option("--hidden", o->base.hidden, "hidden size of the bench model")->capture_default_str();
  cmd->add_option("--seq", o->base.seq, "sequence length")->capture_default_str();
  cmd->add_option("--batch", o->base.batch, "batch size")->capture_default_str();
  cmd->add_option("--steps", o->base.steps, "measured steps (after one whose update waits)")->capture_default_str();
  cmd->add_option("--kernel-threads", o->base.kernel_threads, "kernel and optimizer threads")->capture_default_str();
  cmd->add_option("--offload-dir", o->base.offload_dir, "directory for the NVMe tier")->capture_default_str();
  cmd->add_flag("!--no-direct-io", o->base.direct_io, "buffered I/O (filesystems without O_DIRECT)");
  cmd->add_flag_callback("--fp32", [o] { o->base.precision = Precision::F32; }, "fp32 matmuls (no masters page)");
  cmd->callback([o] { run_host_budget(*o); });
}

}  // namespace lt::cli
