// `lazytrain plan`: a training-step plan for a model on a machine (plan/planner.h).
// Exit codes: 0 a feasible plan, 1 a user error (lt::Error, via main), 2 no feasible plan
// (the message names the short budget, by how much, and the largest batch that fits).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <cstdlib>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "plan/model_preset.h"
#include "plan/plan_json.h"
#include "plan/nvme_space.h"
#include "plan/planner.h"

namespace lt::cli {
namespace {

// Exit status for an infeasible request, distinct from main's 1 for input errors.
constexpr int kExitInfeasible = 2;

struct PlanArgs {
  std::string model, hardware = "h800", policy = "milp", out, act_budget, offload_dir;
  int64_t batch = 1, seq = 1024;
  int nvme_state_layers = -1, ranks = 1;
  std::string shard_optimizer = "on";
  std::string gradient_sums;  // slots | host; empty: train's rule for the profile's backend
  double network_gbps = 0;
  double gpu_cap_gb = 0, host_budget_gb = 0, time_limit_s = 10, gap = 0.002;
  bool max_batch = false, json = false;
};

// "cpu=15,nvme=32" (GB) into the request.
void parse_act_budget(const std::string& s, PlanRequest& req) {
  size_t pos = 0;
  while (pos < s.size()) {
    size_t comma = s.find(',', pos);
    std::string item = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    size_t eq = item.find('=');
    if (eq == std::string::npos) throw Error("expected tier=GB, got '" + item + "'", "--act-budget", "e.g. --act-budget cpu=15,nvme=32");
    std::string tier = item.substr(0, eq);
    double gb = 0;
    try {
      gb = std::stod(item.substr(eq + 1));
    } catch (...) {
      throw Error("not a number: '" + item.substr(eq + 1) + "'", "--act-budget", "e.g. --act-budget cpu=15,nvme=32");
    }
    if (gb < 0) throw Error("budgets must be >= 0", "--act-budget", "");
    if (tier == "cpu") req.cpu_act_budget_bytes = gb * 1e9;
    else if (tier == "nvme") req.nvme_act_budget_bytes = gb * 1e9;
    else throw Error("unknown tier '" + tier + "'", "--act-budget", "tiers are cpu and nvme");
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
}

void print_table(const Plan& p) {
  auto tc = p.tier_counts();
  std::printf("plan: %s for %s on %s, batch %lld, seq %lld\n", p.policy.c_str(), p.model_name.c_str(),
              p.hardware.name.c_str(), static_cast<long long>(p.batch), static_cast<long long>(p.seq));
  if (p.model.hybrid()) {
    const auto linear = std::count(p.model.layer_kinds.begin(), p.model.layer_kinds.end(), LayerKind::LinearAttention);
    std::printf("  %-24s %lld Gated DeltaNet, %lld gated full attention (%.2fB parameters)\n", "decoder layers",
                static_cast<long long>(linear), static_cast<long long>(p.model.num_layers - linear),
                p.num_params / 1e9);
  }
  if (p.model.has_moe()) {
    int64_t sparse = 0;
    for (int64_t l = 0; l < p.model.num_layers; ++l) sparse += p.model.layer_is_sparse(l);
    std::printf("  %-24s %lld sparse (%lld experts, top %lld), %lld dense (%.2fB parameters, %.2fB active)\n",
                "decoder layers", static_cast<long long>(sparse), static_cast<long long>(p.model.moe.num_experts),
                static_cast<long long>(p.model.moe.experts_per_token),
                static_cast<long long>(p.model.num_layers - sparse), p.num_params / 1e9, p.num_active_params / 1e9);
  }
  std::printf("  %-24s %s\n", "feasible", p.feasible ? "yes" : ("no: " + p.infeasible_reason).c_str());
  std::printf("  %-24s %.4f s\n", "predicted step", p.predicted_step_s);
  std::printf("  %-24s %.1f\n", "tokens/s", p.tokens_per_s());
  std::printf("  %-24s %.2f (6 * N%s * tokens / step)\n", "TFLOPS", p.tflops(), p.model.has_moe() ? " active" : "");
  if (p.policy == "milp")
    std::printf("  %-24s %.3f s wall, %.3f s cpu, gap %.4f%% (%s, %d columns, %d rows)\n", "solve", p.solve.solve_s,
                p.solve.solve_cpu_s, 100 * p.solve.mip_gap, p.solve.status.c_str(), p.solve.columns, p.solve.rows);
  std::printf("  %-24s gpu %.2f  cpu %.2f  nvme %.2f  recompute %.0f\n", "boundaries", tc.gpu, tc.cpu, tc.nvme,
              tc.recompute);
  std::printf("  %-24s gpu %.3f GB (cap %.3f)  cpu %.3f GB (host %.3f)  nvme %.3f GB\n", "peak",
              p.predicted_peak.gpu / 1e9, p.gpu_cap_bytes / 1e9, p.predicted_peak.cpu / 1e9,
              p.hardware.host_memory_bytes / 1e9, p.predicted_peak.nvme / 1e9);
  std::printf("  %-24s %zu resident, %zu keep internals, optimizer %s\n", "layers", p.resident_layers.size(),
              p.keep_internals.size(), p.lazy_optimizer ? "lazy (overlapped with forward)" : "after backward");
  if (!p.nvme_state_layers.empty()) {
    // "with their ..." where every paged layer's part pages, "N with their ..." otherwise.
    std::string parts;
    for (auto [layers, what] : {std::pair{&p.nvme_master_layers, "matrices' fp32 masters"},
                                std::pair{&p.nvme_grad_layers, "gradients"}})
      if (!layers->empty())
        parts += (parts.empty() ? ", " : "; ") +
                 (layers->size() == p.nvme_state_layers.size() ? std::string("all") : std::to_string(layers->size())) +
                 " with their " + what;
    std::printf("  %-24s %zu layers (%d..%d) page from NVMe%s, %.3f GB\n", "optimizer states",
                p.nvme_state_layers.size(), p.nvme_state_layers.front(), p.nvme_state_layers.back(), parts.c_str(),
                static_cast<double>(p.nvme_state_layers.size()) * p.state_bytes_per_layer / 1e9);
  }
  if (!p.nvme_copy_layers.empty())
    std::printf("  %-24s %zu layers' (%d..%d) page to NVMe between their forward and backward, %.3f GB\n",
                "bf16 copies", p.nvme_copy_layers.size(), p.nvme_copy_layers.front(), p.nvme_copy_layers.back(),
                static_cast<double>(p.nvme_copy_layers.size()) * p.copy_bytes_per_layer / 1e9);
  if (p.ranks > 1) {
    double bytes = 0;
    for (const Window& w : p.windows)
      for (const Transfer& x : w.transfers)
        if (x.link == Link::Net) bytes += x.bytes;
    const double net_s = bytes / p.hardware.network_bw;  // the link's busy time
    std::printf("  %-24s %d ranks x batch %lld, optimizer %s; %.3f GB a step over %.2f GB/s (%.4f s)\n",
                "data parallel", p.ranks, static_cast<long long>(p.batch),
                p.shard_optimizer ? "sharded (each rank updates its part in P0)" : "on every rank", bytes / 1e9,
                p.hardware.network_bw / 1e9, net_s);
    std::printf("  %-24s %s\n", "gradient sums",
                p.slot_sums ? "in the compute-tier slots, between each layer's backward and its drain"
                            : "on the host, after each target's gradient drains");
    std::printf("  %-24s %.1f\n", "tokens/s (all ranks)", p.ranks * p.tokens_per_s());
  }
}

void run_plan(const PlanArgs& a) {
  PlanRequest req;
  ResolvedModel m = resolve_model(a.model);
  req.model_name = m.name;
  req.model = m.config;
  req.hardware = load_hardware_profile(a.hardware);
  req.batch = a.batch;
  req.seq = a.seq;
  if (a.batch <= 0 || a.seq <= 0) throw Error("batch and seq must be positive", "--batch/--seq", "");
  if (!(a.gpu_cap_gb >= 0)) throw Error("--gpu-cap must not be negative", "--gpu-cap", "give GB, or 0 for the profile's cap");
  if (!(a.time_limit_s > 0)) throw Error("--time-limit must be positive", "--time-limit", "e.g. 10 (seconds)");
  if (!(a.gap >= 0 && a.gap < 1)) throw Error("--gap must lie in [0, 1)", "--gap", "e.g. 0.002");
  req.gpu_cap_bytes = a.gpu_cap_gb * 1e9;
  if (!(a.host_budget_gb >= 0))
    throw Error("--host-budget-gb must not be negative", "--host-budget-gb", "give GB, or 0 for the profile's host memory");
  if (a.host_budget_gb > 0) req.hardware.host_memory_bytes = a.host_budget_gb * 1e9;
  req.time_limit_s = a.time_limit_s;
  req.target_gap = a.gap;
  req.nvme_state_layers = a.nvme_state_layers;
  // A profile whose compute tier gets bf16 weights (a GPU's) computes from bf16 copies of
  // the matrices: their fp32 masters page with the optimizer states. The cpu and emu
  // profiles' fp32 compute reads the masters themselves (train plans bf16 runs on them
  // with paged masters itself, train/streamed_training.cpp).
  req.page_master = req.hardware.weight_bytes < static_cast<int>(sizeof(float));
  // Paged layers' gradients page too on one process (train then needs --grad-accum 1; data-
  // parallel ranks sum the host's gradients after backward).
  req.page_grads = a.ranks == 1;
  // And their bf16 copies, written from the paged masters.
  req.page_copy = req.page_master && a.ranks == 1;
  if (a.ranks < 1) throw Error("--ranks must be at least 1", "--ranks", "e.g. --ranks 2");
  req.ranks = a.ranks;
  req.shard_optimizer = a.shard_optimizer == "on";
  // As train sums them with --grad-accum 1: in the slots wherever the compute tier is not
  // host memory the cpu backend computes in.
  req.slot_sums = a.ranks > 1 && (a.gradient_sums.empty() ? req.hardware.backend != "cpu" : a.gradient_sums == "slots");
  if (!(a.network_gbps >= 0))
    throw Error("--network-gbps must not be negative", "--network-gbps", "e.g. 12.5 (100 Gbit/s)");
  if (a.network_gbps > 0) req.hardware.network_bw = a.network_gbps * 1e9;
  if (!a.act_budget.empty()) parse_act_budget(a.act_budget, req);
  if (!a.offload_dir.empty())
    limit_nvme_to_free_space(req, free_disk_bytes(a.offload_dir, "--offload-dir"), a.offload_dir, "--offload-dir");

  nlohmann::json extra;
  if (a.max_batch) {
    BatchSearchResult r = search_batch(req, a.policy);
    extra["max_batch"] = r.largest_feasible;
    extra["best_batch"] = r.best_batch;
    extra["best_tokens_per_s"] = r.best_tokens_per_s;
    if (!a.json) {
      std::printf("batch search (%s): largest feasible batch %lld, most tokens/s at batch %lld (%.1f tokens/s)\n",
                  a.policy.c_str(), static_cast<long long>(r.largest_feasible), static_cast<long long>(r.best_batch),
                  r.best_tokens_per_s);
      for (const auto& pt : r.tried)
        std::printf("  batch %6lld  %s  step %.4f s  %.1f tokens/s\n", static_cast<long long>(pt.batch),
                    pt.feasible ? "fits  " : "no fit", pt.step_s, pt.tokens_per_s);
    }
    if (r.largest_feasible > 0) req.batch = r.largest_feasible;
  }
  Plan p = make_plan(req, a.policy);
  if (!p.feasible) {
    InfeasibleReport rep = diagnose_infeasible(req, a.policy, p);
    if (a.json) {
      nlohmann::json j = plan_summary_json(p);
      j["message"] = rep.message;
      j["largest_feasible_batch"] = rep.largest_batch;
      for (auto& [k, v] : extra.items()) j[k] = v;
      std::printf("%s\n", j.dump().c_str());
    }
    std::fprintf(stderr, "lazytrain plan: %s\n", rep.message.c_str());
    std::fflush(stdout);
    std::exit(kExitInfeasible);
  }
  if (!a.out.empty()) save_plan(p, a.out);
  if (a.json) {
    nlohmann::json j = plan_summary_json(p);
    for (auto& [k, v] : extra.items()) j[k] = v;
    std::printf("%s\n", j.dump().c_str());
  } else {
    print_table(p);
    if (!a.out.empty()) std::printf("  %-24s %s\n", "written", a.out.c_str());
  }
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("plan", "Plan a training step: checkpoint tiers, recompute, transfer windows (MILP)");
  auto a = std::make_shared<PlanArgs>();
  cmd->add_option("--model", a->model, "Preset name (presets/*.json), config.json or Hugging Face directory")->required();
  cmd->add_option("--hardware", a->hardware, "Profile name (profiles/*.json) or file")->capture_default_str();
  cmd->add_option("--batch", a->batch, "Sequences per step")->capture_default_str();
  cmd->add_option("--seq", a->seq, "Tokens per sequence")->capture_default_str();
  cmd->add_option("--policy", a->policy, "milp, megatrain, megatrain-code, keep-all, recompute-all or greedy")
      ->capture_default_str()
      ->check(CLI::IsMember(plan_policies()));
  cmd->add_option("--gpu-cap", a->gpu_cap_gb, "Compute-tier cap in GB (default: the profile's)");
  cmd->add_option("--host-budget-gb", a->host_budget_gb,
                  "Host memory the plan may use, GB; optimizer states (with the fp32 masters of the "
                  "matrices on GPU profiles) page to NVMe to stay within it "
                  "(default: the profile's host memory)");
  cmd->add_option("--act-budget", a->act_budget, "Activation budgets in GB, e.g. cpu=15,nvme=32");
  cmd->add_option("--offload-dir", a->offload_dir,
                  "Where training will put the NVMe tier: plan within its free space (a larger nvme budget is an "
                  "error)");
  cmd->add_option("--nvme-state-layers", a->nvme_state_layers,
                  "Layers whose optimizer states page from NVMe (default: as few as host memory needs)");
  cmd->add_option("--ranks", a->ranks,
                  "Data-parallel ranks (mpirun -np N), each running this plan on --batch rows of its own")
      ->capture_default_str();
  cmd->add_option("--shard-optimizer", a->shard_optimizer,
                  "on: each rank keeps and updates 1/N of the optimizer (as train)")
      ->capture_default_str()
      ->check(CLI::IsMember({"on", "off"}));
  cmd->add_option("--gradient-sums", a->gradient_sums,
                  "Where the ranks sum the gradients: slots (on the compute tier before they drain, as train does with "
                  "--grad-accum 1 on emu and cuda) or host (after they drain, as on cpu or with --grad-accum > 1); "
                  "default: by the profile's backend")
      ->check(CLI::IsMember({"slots", "host"}));
  cmd->add_option("--network-gbps", a->network_gbps,
                  "GB/s between the ranks (default: the profile's links.network_gbps)");
  cmd->add_flag("--max-batch", a->max_batch, "Search the largest feasible batch and the batch with the most tokens/s; plan the largest");
  cmd->add_option("--time-limit", a->time_limit_s, "MILP time limit, seconds")->capture_default_str();
  cmd->add_option("--gap", a->gap, "MILP relative gap to stop at")->capture_default_str();
  cmd->add_option("--out", a->out, "Write the plan JSON here");
  cmd->add_flag("--json", a->json, "Print one JSON object instead of tables");
  cmd->callback([a] { run_plan(*a); });
}

}  // namespace lt::cli
