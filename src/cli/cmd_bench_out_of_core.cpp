// `lazytrain bench out-of-core` (issue 4, section 6): trains a model whose training state
// (fp32 weights and gradients, the hybrid 8-bit AdamW's states, and every activation a
// keep-all step holds) is several times the compute-tier budget, on the cpu backend,
// with the optimizer running in the lazy-update hook. The MILP plans it under a compute
// cap, a host activation budget of one boundary, and a host memory too small for the
// whole host state, so checkpoints go to host memory, NVMe or recompute, and the top
// layers' optimizer states page from NVMe, all as the planner decides. Reports the step
// time against the I/O-bound floor (the NVMe bytes the step moves over the store's
// measured bandwidth) and against the same training step run in memory (keep-all).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include "cli/bench_streaming.h"
#include "cli/commands.h"
#include "core/threads.h"
#include "model/parameters.h"
#include "plan/cost_model.h"
#include "plan/planner.h"

namespace lt::cli {
namespace {

struct OutOfCoreArgs {
  StreamingBenchArgs base;
  double cap_fraction = 0.35;    // the compute cap to start from, of keep-all's peak
  double paged_fraction = 0.75;  // host memory leaves room for about this share of the
                                 // pageable layers' (2..L-1) optimizer states
};

void run_out_of_core(const OutOfCoreArgs& o) {
  const StreamingBenchArgs& a = o.base;
  set_num_threads(a.kernel_threads);
  PlanRequest req = bench_request(a, "this machine (bench out-of-core)");
  HardwareProfile& hw = req.hardware;
  const CostModel cm0 = build_cost_model(req.model, hw, req.batch, req.seq);
  hw.host_optimizer_params_per_s = adamw8_params_per_s(static_cast<int64_t>(cm0.layer(0).params));
  const Measured probe = measure_layer_times(req, a);

  // Host memory: the host state less (k - 3) layers' optimizer states, k the pageable
  // layers we aim at (three states are in flight at once, so paging fewer than four saves
  // nothing). The rule (plan_state_paging) would page the top k; the MILP chooses which
  // layers page and may page fewer, spaced so that fewer staging slots are in flight.
  const int L = a.layers;
  const int aim = std::max(4, static_cast<int>(std::lround(o.paged_fraction * (L - 2))));
  if (aim > L - 2) {
    std::printf("RESULT out-of-core infeasible: %d layers leave fewer than 4 whose optimizer states can page\n", L);
    return;
  }
  hw.host_memory_bytes = (cm0.host_state_bytes - (aim - 3.5) * cm0.layer(0).state_bytes) / 0.9;
  const double boundary = static_cast<double>(a.batch) * a.seq * a.hidden * hw.act_bytes;
  req.cpu_act_budget_bytes = boundary;
  req.time_limit_s = 20;
  const Plan keep_all = make_plan(req, "keep-all");
  Plan plan;
  for (double f = o.cap_fraction; f <= 1.0; f += 0.05) {
    req.gpu_cap_bytes = keep_all.predicted_peak.gpu * f;
    plan = make_plan(req, "milp");
    if (plan.feasible) break;
  }
  if (!plan.feasible) {
    std::printf("RESULT out-of-core infeasible: %s\n", plan.infeasible_reason.c_str());
    return;
  }
  // In memory: the same training step, keep-all, everything on the host (no paging).
  PlanRequest roomy = req;
  roomy.hardware.host_memory_bytes = 64e9;
  roomy.gpu_cap_bytes = 0;
  const Measured in_memory = run_plan(make_plan(roomy, "keep-all"), a, -1, /*train=*/true);
  const Measured m = run_plan(plan, a, -1, /*train=*/true);

  const ModelParameters probe_params(req.model);
  const double n = static_cast<double>(probe_params.numel());
  const double optimizer_state = cm0.layer(0).state_bytes / cm0.layer(0).params * n;  // 8-bit m, v and scales
  const double state = 8 * n + optimizer_state + static_cast<double>(probe.arena_planned_peak);
  const double budget = static_cast<double>(m.arena_planned_peak);
  double wbytes = 0, rbytes = 0, state_bytes = 0;
  for (const ExecEvent& e : m.fastest.events) {
    if (e.lane != ExecLane::Nvme) continue;
    (e.name.find("write") != std::string::npos ? wbytes : rbytes) += e.bytes;
    if (e.name.rfind("os.", 0) == 0) state_bytes += e.bytes;
  }
  const double floor_s = wbytes / hw.nvme_write_bw + rbytes / hw.nvme_read_bw;
  const Plan::TierCounts tc = plan.tier_counts();
  std::printf("bench out-of-core: %s, batch %d, seq %d; NVMe store read %.2f GB/s, write %.2f GB/s; "
              "8-bit AdamW %.0f M params/s\n",
              req.model_name.c_str(), a.batch, a.seq, hw.nvme_read_bw / 1e9, hw.nvme_write_bw / 1e9,
              hw.host_optimizer_params_per_s / 1e6);
  std::printf("training state %.1f MiB (fp32 weights+grads %.1f MiB, 8-bit AdamW states %.1f MiB, keep-all "
              "activations %.1f MiB), compute budget %.1f MiB: %.1fx\n",
              state / 1048576, 8 * n / 1048576, optimizer_state / 1048576, probe.arena_planned_peak / 1048576.0,
              budget / 1048576, state / budget);
  std::printf("plan: boundaries gpu %.1f cpu %.1f nvme %.1f recomputed %.0f; optimizer states of %zu of %d layers "
              "on NVMe (%.1f MiB), host state %.1f MiB of %.1f MiB; predicted %.4f s\n",
              tc.gpu, tc.cpu, tc.nvme, tc.recompute, plan.nvme_state_layers.size(), L,
              plan.nvme_state_bytes() / 1048576, plan.host_state_bytes / 1048576, hw.host_memory_bytes / 1048576,
              plan.predicted_step_s);
  std::printf("NVMe per step: wrote %.1f MiB, read %.1f MiB (optimizer states %.1f MiB); I/O floor %.4f s\n",
              wbytes / 1048576, rbytes / 1048576, state_bytes / 1048576, floor_s);
  std::printf("step (fastest of %d, optimizer included): out-of-core %.4f s (optimizer %.4f s), in-memory keep-all "
              "%.4f s; measured peak %zu <= budget %.0f: %s\n",
              a.steps, m.step_s, m.optimizer_s, in_memory.step_s, m.peak, budget,
              static_cast<double>(m.peak) <= budget ? "yes" : "NO");
  std::printf("RESULT out-of-core step_s=%.4f io_floor_s=%.4f ratio=%.2f vs_in_memory=%.2f state_over_budget=%.1f "
              "paged_state_layers=%zu\n",
              m.step_s, floor_s, floor_s > 0 ? m.step_s / floor_s : 0.0, m.step_s / in_memory.step_s, state / budget,
              plan.nvme_state_layers.size());
}

}  // namespace

void add_bench_out_of_core_command(CLI::App& app) {
  CLI::App* parent = bench_command(app);
  auto o = std::make_shared<OutOfCoreArgs>();
  CLI::App* ooc = parent->add_subcommand("out-of-core",
                                         "Train a model whose state is several times the compute budget; "
                                         "step time vs the NVMe I/O floor");
  ooc->add_option("--layers", o->base.layers, "decoder layers of the bench model");
  ooc->add_option("--hidden", o->base.hidden, "hidden size of the bench model");
  ooc->add_option("--seq", o->base.seq, "sequence length");
  ooc->add_option("--batch", o->base.batch, "batch size");
  ooc->add_option("--steps", o->base.steps, "measured steps (the fastest counts)");
  ooc->add_option("--kernel-threads", o->base.kernel_threads, "kernel and optimizer threads");
  ooc->add_option("--cap-fraction", o->cap_fraction, "compute budget as a fraction of a keep-all step's peak");
  ooc->add_option("--paged-fraction", o->paged_fraction,
                  "host memory short by about this share of layers 2..L-1's optimizer states");
  ooc->add_option("--offload-dir", o->base.offload_dir, "directory for the NVMe tier");
  ooc->add_flag("!--no-direct-io", o->base.direct_io, "buffered I/O (filesystems without O_DIRECT)");
  ooc->callback([o] { run_out_of_core(*o); });
}

}  // namespace lt::cli
