// `lazytrain bench predict`: checks the planner's predictions against real steps (issue 4,
// section 5). It profiles this machine with the executor itself (the per-layer forward,
// backward and head times of a keep-all step; memcpy and NVMe-store bandwidth), plans a
// small model under several policies with that profile (one paging optimizer states
// through NVMe), runs each plan on the cpu backend with a real NVMe tier, and prints
// predicted vs measured step time and planned vs measured compute-tier peak, for the cpu
// backend (with the NVMe tier) and the emu backend with throttled links, in fp32 and in
// bf16 (matmuls reading a bf16 copy of the weights; its own probe gives its layer times).
// Before each row runs, the profile is measured again and the row re-planned from it
// (same policy and caps; --probe-once plans every row from the first profile): on a shared
// machine the speed drifts over the bench's minute, and a profile taken long before a row
// makes its prediction err by that drift (issue 13: 6-26% on a 2-core AVX2 machine, two
// back-to-back runs 22% and 7%). --step-times prints every run's steps to show it.
// Each row also gives the event-driven simulation's step on the same profile
// (sim/event_simulator.h: no window barriers) and its error against the measured step.
// The last line is
//   RESULT predict max_err=<largest relative error> peak_ok=<true|false> events_max_err=<...>
// where max_err is the plan's prediction against the measured step and events_max_err the
// event-driven figure's. --windows / --events show where each row's time goes, window by
// window.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "cli/bench_streaming.h"
#include "cli/commands.h"
#include "core/threads.h"
#include "plan/planner.h"
#include "sim/chrome_trace.h"
#include "sim/event_simulator.h"

namespace lt::cli {
namespace {

// Where a step's time goes: each window's measured length next to what the plan gives it
// (its compute, and each link's bytes over the profile's rate; a window lasts the longest
// of them). "extra" sums what the step spent beyond the plan, window by window.
void print_windows(const StreamingStepResult& r, const Plan& p, bool events) {
  const HardwareProfile& hw = p.hardware;
  double extra = 0;
  std::printf("  %-8s %10s %10s %10s %10s %10s %10s\n", "window", "measured", "planned", "compute", "h2d", "d2h",
              "nvme");
  for (size_t i = 0; i < r.windows.size() && i < p.windows.size(); ++i) {
    const Window& w = p.windows[i];
    double h2d = 0, d2h = 0, nvme = 0;
    for (const Transfer& t : w.transfers) {
      if (t.link == Link::H2D) h2d += t.bytes / hw.h2d_bw;
      else if (t.link == Link::D2H) d2h += t.bytes / hw.d2h_bw;
      else if (t.link == Link::NvmeRead) nvme += t.bytes / hw.nvme_read_bw;
      else nvme += t.bytes / hw.nvme_write_bw;
    }
    const double planned = std::max({w.compute_s, h2d, d2h, nvme});
    const double measured = r.windows[i].end_s - r.windows[i].start_s;
    extra += measured - planned;
    if (events)
      for (const ExecEvent& e : r.events)
        if (e.window == w.name)
          std::printf("      %-24s %-8s %8.2f .. %8.2f ms\n", e.name.c_str(), exec_lane_name(e.lane),
                      (e.start_s - r.windows[i].start_s) * 1e3, (e.end_s - r.windows[i].start_s) * 1e3);
    std::printf("  %-8s %10.2f %10.2f %10.2f %10.2f %10.2f %10.2f  ms\n", w.name.c_str(), measured * 1e3,
                planned * 1e3, w.compute_s * 1e3, h2d * 1e3, d2h * 1e3, nvme * 1e3);
  }
  std::printf("  step %.2f ms, planned %.2f ms, extra over the windows' plan %.2f ms\n", r.step_s * 1e3,
              p.predicted_step_s * 1e3, extra * 1e3);
}

SimLane sim_lane(ExecLane lane) {
  switch (lane) {
    case ExecLane::Compute: return SimLane::Compute;
    case ExecLane::H2D: return SimLane::H2D;
    case ExecLane::D2H: return SimLane::D2H;
    case ExecLane::Nvme: return SimLane::Nvme;
    case ExecLane::Host: return SimLane::Host;
  }
  return SimLane::Compute;
}

SimResult to_sim(const StreamingStepResult& r) {
  SimResult s;
  s.step_s = r.step_s;
  for (const ExecEvent& e : r.events) {
    s.events.push_back({e.name, e.window, sim_lane(e.lane), e.start_s, e.end_s, e.bytes});
  }
  s.gpu_memory = r.compute_bytes;
  return s;
}

// --step-times: a run's warm-up and measured steps, in run order (ms).
void print_step_times(const char* label, const Measured& m) {
  std::printf("  %s steps ms: warm-up", label);
  for (double t : m.warmup_times) std::printf(" %.1f", t * 1e3);
  std::printf(" | measured");
  for (double t : m.step_times) std::printf(" %.1f", t * 1e3);
  std::printf("\n");
}

struct Row {
  std::string label;
  Plan plan;
  double emu = -1;  // the emu rows' link rate in GB/s; -1: the cpu backend
  Precision precision = Precision::F32;
  // How the plan was made (its request, caps included, and policy), so that it can be
  // made again from a profile measured just before the row runs (--probe each).
  PlanRequest req;
  std::string policy;
};

// The rows of one precision, planned with `req` (its layer times measured at that
// precision). all: keep-all, recompute-all, megatrain and a tight MILP (and the same with
// paged optimizer states) on the cpu backend, keep-all, megatrain and milp on emu; else
// cpu keep-all, the tight MILP and emu milp.
void add_rows(std::vector<Row>& rows, const PlanRequest& req, const StreamingBenchArgs& a, Precision precision,
              bool all) {
  const HardwareProfile& hw = req.hardware;
  const std::string tag = precision == Precision::BF16 ? " bf16" : "";
  // Each plan with the request and policy that made it.
  std::vector<std::tuple<Plan, PlanRequest, std::string>> plans;
  auto add = [&](const PlanRequest& r, const std::string& policy) {
    plans.emplace_back(make_plan(r, policy), r, policy);
    return std::get<0>(plans.back()).feasible;
  };
  add(req, "keep-all");
  const double keep_peak = std::get<0>(plans.front()).predicted_peak.gpu;
  if (all)
    for (const char* policy : {"recompute-all", "megatrain"}) add(req, policy);
  {  // MILP under a tight compute cap and a small host budget, so that NVMe is in play:
     // the tightest cap (in 5% steps of keep-all's peak) that is feasible.
    PlanRequest tight = req;
    const double boundary = static_cast<double>(a.batch) * a.seq * a.hidden * hw.act_bytes;
    tight.cpu_act_budget_bytes = 0.5 * boundary;
    for (double f = 0.5; f <= 1.0; f += 0.05) {
      tight.gpu_cap_bytes = keep_peak * f;
      if (!add(tight, "milp")) {
        plans.pop_back();
        continue;
      }
      if (!all) break;
      // The same, with layers 2..L-1's optimizer states paging through NVMe (read and
      // written each step; the bench runs no optimizer, so the bytes are the zero state).
      tight.nvme_state_layers = a.layers - 2;
      if (!add(tight, "milp")) plans.pop_back();
      break;
    }
  }
  for (auto& [p, r, policy] : plans) {
    const std::string label = r.nvme_state_layers > 0 ? "milp-paged" : p.policy;
    if (r.nvme_state_layers > 0) p.policy = label;
    rows.push_back({"cpu" + tag + " " + label, p, -1, precision, r, policy});
  }
  // emu rows: the same plans re-made for links throttled to emu_gbps (the profile counts
  // the weights, gradients and activations the emu moves).
  PlanRequest emu_req = req;
  emu_req.hardware.h2d_bw = emu_req.hardware.d2h_bw = a.emu_gbps * 1e9;
  emu_req.hardware.backend = "emu";
  const std::vector<const char*> emu_policies = all ? std::vector<const char*>{"keep-all", "megatrain", "milp"}
                                                    : std::vector<const char*>{"milp"};
  for (const char* policy : emu_policies)
    rows.push_back({"emu" + tag + " " + policy, make_plan(emu_req, policy), a.emu_gbps, precision, emu_req, policy});
}

void run_predict(const StreamingBenchArgs& a) {
  if (a.kernel_threads > 0) set_num_threads(a.kernel_threads);
  PlanRequest req = bench_request(a, "this machine (bench predict)");
  const HardwareProfile& hw = req.hardware;
  std::printf("bench predict: %s, batch %d, seq %d; memcpy %.1f GB/s, NVMe store read %.2f GB/s, write %.2f GB/s\n",
              req.model_name.c_str(), a.batch, a.seq, hw.h2d_bw / 1e9, hw.nvme_read_bw / 1e9, hw.nvme_write_bw / 1e9);

  // Profile: a keep-all step gives the layer times every prediction uses, one per precision.
  const Measured probe32 = measure_layer_times(req, a);
  if (a.step_times) print_step_times("probe fp32", probe32);
  std::printf("measured fp32: forward %.2f ms, backward %.2f ms, head %.2f ms per layer step\n",
              req.measured.forward_s * 1e3, req.measured.backward_s * 1e3, req.measured.head_s * 1e3);
  StreamingBenchArgs a16 = a;
  a16.precision = Precision::BF16;
  PlanRequest req16 = req;
  req16.hardware.name += ", bf16";
  req16.hardware.weight_bytes = 2;  // the emu moves bf16 weight matrices (its fp32 norms are a few KB)
  req16.scratch = executor_scratch(req.model, req.batch, req.seq, cpu_kernel_table(), Precision::BF16);
  const Measured probe16 = measure_layer_times(req16, a16);
  if (a.step_times) print_step_times("probe bf16", probe16);
  std::printf("measured bf16: forward %.2f ms, backward %.2f ms, head %.2f ms per layer step\n",
              req16.measured.forward_s * 1e3, req16.measured.backward_s * 1e3, req16.measured.head_s * 1e3);

  std::vector<Row> rows;
  add_rows(rows, req, a, Precision::F32, true);
  add_rows(rows, req16, a16, Precision::BF16, false);
  std::printf("%-22s %12s %10s %12s %8s %8s %14s %14s\n", "plan", "predicted_s", "events_s", "measured_s", "error",
              "ev_error", "planned_peak", "measured_peak");
  double max_err = 0, events_max_err = 0;
  bool peak_ok = true;
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& row = rows[i];
    const bool bf16 = row.precision == Precision::BF16;
    Plan p = row.plan;
    if (a.probe_each) {
      // The profile measured again just before the row runs, and the row planned from it:
      // the machine's speed drifts over a bench (neighbours, clocks), and a prediction from
      // a profile taken many seconds earlier errs by that drift, not by the cost model.
      PlanRequest probe = bf16 ? req16 : req;
      const Measured fresh = measure_layer_times(probe, bf16 ? a16 : a);
      if (a.step_times) print_step_times("probe", fresh);
      PlanRequest r = row.req;
      r.measured = probe.measured;
      p = make_plan(r, row.policy);
      p.policy = row.plan.policy;
    }
    if (!p.feasible) {
      std::printf("%-22s infeasible: %s\n", row.label.c_str(), p.infeasible_reason.c_str());
      continue;
    }
    const EventSimResult ev = simulate_events(p);
    const Measured m = run_plan(p, bf16 ? a16 : a, row.emu);
    const double err = std::abs(m.step_s - p.predicted_step_s) / m.step_s;
    const double ev_err = std::abs(m.step_s - ev.step_s) / m.step_s;
    max_err = std::max(max_err, err);
    events_max_err = std::max(events_max_err, ev_err);
    peak_ok = peak_ok && static_cast<double>(m.peak) <= p.predicted_peak.gpu;
    const Plan::TierCounts tc = p.tier_counts();
    std::printf("%-22s %12.4f %10.4f %12.4f %7.1f%% %7.1f%% %14.0f %14zu   (gpu %.1f cpu %.1f nvme %.1f rc %.0f)%s\n",
                row.label.c_str(), p.predicted_step_s, ev.step_s, m.step_s, 100 * err, 100 * ev_err,
                p.predicted_peak.gpu, m.peak, tc.gpu, tc.cpu, tc.nvme, tc.recompute,
                ev.violations.empty() ? "" : ("  event violations: " + ev.violations.front()).c_str());
    if (a.step_times) print_step_times(row.label.c_str(), m);
    if (a.windows || a.events) print_windows(m.fastest, p, a.events);
    if (!a.trace.empty() && i + 1 == rows.size()) write_chrome_trace(to_sim(m.fastest), p, a.trace);
  }
  std::printf("RESULT predict max_err=%.3f peak_ok=%s events_max_err=%.3f\n", max_err, peak_ok ? "true" : "false",
              events_max_err);
}

}  // namespace

void add_bench_predict_command(CLI::App& app) {
  CLI::App* parent = bench_command(app);
  auto a = std::make_shared<StreamingBenchArgs>();
  CLI::App* cmd = parent->add_subcommand("predict", "Planner predictions vs real steps on this machine");
  cmd->add_option("--layers", a->layers, "decoder layers of the bench model");
  cmd->add_option("--hidden", a->hidden, "hidden size of the bench model");
  cmd->add_option("--seq", a->seq, "sequence length");
  cmd->add_option("--batch", a->batch, "batch size");
  cmd->add_option("--steps", a->steps, "measured steps per plan (the fastest counts)");
  cmd->add_option("--emu-gbps", a->emu_gbps, "link rate of the emu rows, GB/s");
  cmd->add_option("--kernel-threads", a->kernel_threads, "kernel threads while measuring (0: --threads)");
  cmd->add_option("--offload-dir", a->offload_dir, "directory for the NVMe tier");
  cmd->add_option("--trace", a->trace, "Chrome trace of the last plan's real step");
  cmd->add_flag("!--no-direct-io", a->direct_io, "buffered I/O (filesystems without O_DIRECT)");
  cmd->add_flag("--windows", a->windows, "per-window measured vs planned times of every row");
  cmd->add_flag("--events", a->events, "--windows, with each window's events");
  cmd->add_flag("--step-times", a->step_times, "every run's warm-up and measured step times");
  cmd->add_flag("!--probe-once", a->probe_each,
                "plan every row from the first profile (default: measure it again before each row)");
  cmd->callback([a] { run_predict(*a); });
}

}  // namespace lt::cli
