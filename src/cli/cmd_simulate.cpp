// `lazytrain simulate`: replays a plan event by event (sim/simulator.h) and reports the
// step time, exposed communication, compute idle time and peak bytes per tier.
#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "plan/plan_json.h"
#include "sim/chrome_trace.h"
#include "sim/simulator.h"
#include "sim/svg_timeline.h"

namespace lt::cli {
namespace {

struct SimulateArgs {
  std::string plan, hardware, trace, svg;
  bool json = false;
};

void run_simulate(const SimulateArgs& a) {
  Plan p = load_plan(a.plan);
  HardwareProfile hw = a.hardware.empty() ? p.hardware : load_hardware_profile(a.hardware);
  SimResult r = simulate_plan(p, hw);
  if (!a.trace.empty()) write_chrome_trace(r, p, a.trace);
  if (!a.svg.empty()) write_svg_timeline(r, p, a.svg);
  double tokens_per_s = r.step_s > 0 ? p.tokens() / r.step_s : 0;
  if (a.json) {
    nlohmann::json j = {{"step_s", r.step_s},
                        {"tokens_per_s", tokens_per_s},
                        {"exposed_comm_s", r.exposed_comm_s},
                        {"compute_idle_s", r.compute_idle_s},
                        {"peak_bytes", {{"gpu", r.peak.gpu}, {"cpu", r.peak.cpu}, {"nvme", r.peak.nvme}}}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("simulate: %s plan for %s, batch %lld, seq %lld, on %s\n", p.policy.c_str(), p.model_name.c_str(),
                static_cast<long long>(p.batch), static_cast<long long>(p.seq), hw.name.c_str());
    std::printf("  %-22s %.4f s (plan predicted %.4f s)\n", "step", r.step_s, p.predicted_step_s);
    std::printf("  %-22s %.1f\n", "tokens/s", tokens_per_s);
    std::printf("  %-22s %.4f s\n", "exposed communication", r.exposed_comm_s);
    std::printf("  %-22s %.4f s (host work %.4f s)\n", "compute idle", r.compute_idle_s, r.exposed_host_s);
    std::printf("  %-22s gpu %.3f GB (cap %.3f)  cpu %.3f GB  nvme %.3f GB\n", "peak", r.peak.gpu / 1e9,
                p.gpu_cap_bytes / 1e9, r.peak.cpu / 1e9, r.peak.nvme / 1e9);
    std::printf("  %-22s %zu\n", "violations", r.violations.size());
    for (size_t i = 0; i < r.violations.size() && i < 10; ++i) std::printf("    %s\n", r.violations[i].c_str());
  }
}

}  // namespace

void add_simulate_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("simulate", "Replay a plan event by event: step time, idle, peak memory, trace");
  auto a = std::make_shared<SimulateArgs>();
  cmd->add_option("plan", a->plan, "Plan JSON written by `lazytrain plan --out`")->required();
  cmd->add_option("--hardware", a->hardware, "Replay on this profile instead of the plan's");
  cmd->add_option("--trace", a->trace, "Write a Chrome trace JSON (Perfetto) here");
  cmd->add_option("--svg", a->svg, "Write an SVG timeline and boundary map here");
  cmd->add_flag("--json", a->json, "Print one JSON object instead of a table");
  cmd->callback([a] { run_simulate(*a); });
}

}  // namespace lt::cli
