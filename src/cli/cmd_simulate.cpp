// `lazytrain simulate`: simulates a plan's step and reports the step time, exposed
// communication, compute idle time and peak bytes per tier, beside the plan's prediction.
// Two simulations: the event-driven one (sim/event_simulator.h, the default, --events),
// which shares no timing rule with the planner, and the window replay (sim/simulator.h,
// --windows), which follows the plan's window barrier and so matches predicted_step_s by
// construction for a valid plan. Both step times are printed; the details, --trace and
// --svg come from the one selected.
#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "plan/plan_json.h"
#include "plan/plan_validate.h"
#include "sim/chrome_trace.h"
#include "sim/event_simulator.h"
#include "sim/simulator.h"
#include "sim/svg_timeline.h"

namespace lt::cli {
namespace {

struct SimulateArgs {
  std::string plan, hardware, trace, svg;
  bool json = false;
  bool events = false, windows = false;  // which simulation's details; events unless --windows
};

// (x - predicted) / predicted, or 0 without a prediction.
double relative_to(double x, double predicted) { return predicted > 0 ? (x - predicted) / predicted : 0; }

void run_simulate(const SimulateArgs& a) {
  Plan p = load_plan(a.plan);
  require_valid_plan(p, a.plan);  // the simulators assume the plan's invariants
  HardwareProfile hw = a.hardware.empty() ? p.hardware : load_hardware_profile(a.hardware);
  const EventSimResult events = simulate_events(p, hw);
  const SimResult windows = simulate_plan(p, hw);
  const SimResult& r = a.windows ? windows : static_cast<const SimResult&>(events);
  const char* which = a.windows ? "windows" : "events";
  if (!a.trace.empty()) write_chrome_trace(r, p, a.trace);
  if (!a.svg.empty()) write_svg_timeline(r, p, a.svg);
  const double tokens_per_s = r.step_s > 0 ? p.tokens() / r.step_s : 0;
  const double predicted = p.predicted_step_s;
  if (a.json) {
    nlohmann::json j = {{"simulation", which},
                        {"step_s", r.step_s},
                        {"tokens_per_s", tokens_per_s},
                        {"exposed_comm_s", r.exposed_comm_s},
                        {"exposed_host_s", r.exposed_host_s},
                        {"compute_busy_s", r.compute_busy_s},
                        {"compute_idle_s", r.compute_idle_s},
                        {"peak_bytes", {{"gpu", r.peak.gpu}, {"cpu", r.peak.cpu}, {"nvme", r.peak.nvme}}},
                        {"violations", r.violations},
                        {"predicted_step_s", predicted},
                        {"events_step_s", events.step_s},
                        {"windows_step_s", windows.step_s},
                        {"events_vs_predicted", relative_to(events.step_s, predicted)},
                        {"windows_vs_predicted", relative_to(windows.step_s, predicted)}};
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("simulate: %s plan for %s, batch %lld, seq %lld, on %s\n", p.policy.c_str(), p.model_name.c_str(),
              static_cast<long long>(p.batch), static_cast<long long>(p.seq), hw.name.c_str());
  std::printf("  %-22s %.4f s (%+.2f%% vs predicted)%s\n", "step, event-driven", events.step_s,
              100 * relative_to(events.step_s, predicted), a.windows ? "" : "  <- details below");
  std::printf("  %-22s %.4f s (%+.2f%% vs predicted)%s\n", "step, window replay", windows.step_s,
              100 * relative_to(windows.step_s, predicted), a.windows ? "  <- details below" : "");
  std::printf("  %-22s %.4f s%s\n", "step, plan predicted", predicted,
              hw.name == p.hardware.name ? "" : (" (on " + p.hardware.name + ")").c_str());
  std::printf("  %-22s %.1f\n", "tokens/s", tokens_per_s);
  std::printf("  %-22s %.4f s\n", "compute busy", r.compute_busy_s);
  std::printf("  %-22s %.4f s\n", "exposed communication", r.exposed_comm_s);
  std::printf("  %-22s %.4f s (host work %.4f s)\n", "compute idle", r.compute_idle_s, r.exposed_host_s);
  std::printf("  %-22s gpu %.3f GB (cap %.3f)  cpu %.3f GB  nvme %.3f GB\n", "peak", r.peak.gpu / 1e9,
              p.gpu_cap_bytes / 1e9, r.peak.cpu / 1e9, r.peak.nvme / 1e9);
  std::printf("  %-22s %zu\n", "violations", r.violations.size());
  for (size_t i = 0; i < r.violations.size() && i < 10; ++i) std::printf("    %s\n", r.violations[i].c_str());
}

}  // namespace

void add_simulate_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("simulate", "Simulate a plan's step: step time, idle, peak memory, trace");
  auto a = std::make_shared<SimulateArgs>();
  cmd->add_option("plan", a->plan, "Plan JSON written by `lazytrain plan --out`")->required();
  cmd->add_option("--hardware", a->hardware, "Simulate on this profile instead of the plan's");
  auto* ev = cmd->add_flag("--events", a->events,
                           "Details from the event-driven simulation: no window barriers (the default)");
  cmd->add_flag("--windows", a->windows, "Details from the window replay (the plan's barrier rule)")->excludes(ev);
  cmd->add_option("--trace", a->trace, "Write a Chrome trace JSON (Perfetto) of the selected simulation here");
  cmd->add_option("--svg", a->svg, "Write an SVG timeline and boundary map of the selected simulation here");
  cmd->add_flag("--json", a->json, "Print one JSON object instead of a table");
  cmd->callback([a] { run_simulate(*a); });
}

}  // namespace lt::cli
