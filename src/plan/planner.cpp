#include "plan/planner.h"

#include <algorithm>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/error.h"
#include "plan/baselines.h"
#include "plan/cost_model.h"
#include "plan/milp_planner.h"
#include "plan/plan_validate.h"
#include "plan/state_paging.h"

namespace lt {
namespace {

// Batch-search solves are feasibility checks: a short limit finds an incumbent when one
// exists for the models here (the LP relaxation already places most boundaries).
constexpr double kSearchTimeLimit = 3;

}  // namespace

const std::vector<std::string>& plan_policies() {
  static const std::vector<std::string> p{"milp", "megatrain", "megatrain-code", "keep-all", "recompute-all", "greedy"};
  return p;
}

namespace {

// The parts paged layers may move, of those the request allows (PlanRequest::page_master,
// page_grads, page_copy): the fewest with which the rule's paging brings the host state
// within its share: the optimizer state alone, then with the masters, then with the
// gradients, then with the bf16 copies too (those counted as if every paged layer that
// may page its copy did). A larger blob per layer frees the same host bytes per NVMe
// byte, but each staging slot holds more, the gradients' writes fall in backward and the
// copies cross NVMe twice a step: a host that fits with less pages less. (Of the parts
// allowed, the MILP chooses which layers' page; the rule policies page them all.)
PlanRequest with_fewest_paged_parts(const PlanRequest& req) {
  if ((!req.page_master && !req.page_grads && !req.page_copy) || req.keep_paged) return req;
  std::vector<PlanRequest> steps;  // one more part each
  PlanRequest r = req;
  r.page_master = r.page_grads = r.page_copy = false;
  steps.push_back(r);
  if (req.page_master) steps.push_back((r.page_master = true, r));
  if (req.page_grads) steps.push_back((r.page_grads = true, r));
  if (req.page_copy && req.page_master) steps.push_back((r.page_copy = true, r));
  for (size_t k = 0; k + 1 < steps.size(); ++k) {
    const CostModel cm = build_cost_model(steps[k]);
    const StatePaging p = plan_state_paging(steps[k], cm, /*lazy_optimizer=*/true);
    if (p.host_state_bytes <= kHostStateShare * req.hardware.host_memory_bytes) return steps[k];
  }
  return steps.back();
}

}  // namespace

Plan make_plan(const PlanRequest& request, const std::string& policy) {
  const PlanRequest req = with_fewest_paged_parts(request);
  CostModel cm = build_cost_model(req);
  if (policy == "milp") return plan_milp(req, cm);
  if (policy == "megatrain") return plan_megatrain(req, cm);
  if (policy == "megatrain-code") return plan_megatrain_code(req, cm);
  if (policy == "keep-all") return plan_keep_all(req, cm);
  if (policy == "recompute-all") return plan_recompute_all(req, cm);
  if (policy == "greedy") return plan_greedy(req, cm);
  throw Error("unknown policy '" + policy + "'", "--policy",
              "use milp, megatrain, megatrain-code, keep-all, recompute-all or greedy");
}

namespace {

Plan plan_at(PlanRequest req, const std::string& policy, int64_t batch) {
  req.batch = batch;
  if (req.scratch_at) req.scratch = req.scratch_at(batch);
  if (policy == "milp") req.time_limit_s = std::min(req.time_limit_s, kSearchTimeLimit);
  return make_plan(req, policy);
}

}  // namespace

int64_t largest_feasible_batch(const PlanRequest& req, const std::string& policy, int64_t limit) {
  if (!plan_at(req, policy, 1).feasible) return 0;
  int64_t lo = 1, hi = 2;
  while (hi <= limit && plan_at(req, policy, hi).feasible) {
    lo = hi;
    hi *= 2;
  }
  hi = std::min(hi, limit + 1);
  while (hi - lo > 1) {  // lo feasible, hi infeasible (or past the limit)
    int64_t mid = lo + (hi - lo) / 2;
    if (plan_at(req, policy, mid).feasible) lo = mid;
    else hi = mid;
  }
  return lo;
}

BatchSearchResult search_batch(const PlanRequest& req, const std::string& policy, int64_t limit) {
  BatchSearchResult r;
  r.largest_feasible = largest_feasible_batch(req, policy, limit);
  std::vector<int64_t> candidates;
  for (int64_t b = 1; b < r.largest_feasible; b *= 2) candidates.push_back(b);
  if (r.largest_feasible > 0) candidates.push_back(r.largest_feasible);
  if (r.largest_feasible > 2) candidates.push_back(r.largest_feasible - 1);
  std::sort(candidates.begin(), candidates.end());
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
  for (int64_t b : candidates) {
    PlanRequest q = req;
    q.batch = b;
    if (q.scratch_at) q.scratch = q.scratch_at(b);
    Plan p = make_plan(q, policy);
    BatchPoint pt{b, p.feasible, p.predicted_step_s, p.feasible ? p.tokens_per_s() : 0};
    r.tried.push_back(pt);
    if (pt.feasible && pt.tokens_per_s > r.best_tokens_per_s) {
      r.best_tokens_per_s = pt.tokens_per_s;
      r.best_batch = b;
    }
  }
  return r;
}

namespace {

std::string stay_on_host(const PlanRequest& req) {
  if (req.page_master && req.page_grads && req.page_copy)
    return "norms, the embedding and head, and the bf16 copies of layers whose copy cannot page";
  if (req.page_master && req.page_grads) return "the bf16 copy, norms and the embedding and head";
  if (req.page_master) return "the bf16 copy, gradients, norms and the embedding and head";
  if (req.page_grads) return "master weights, the bf16 copy and the embedding and head";
  return "master weights, the bf16 copy and gradients";
}

}  // namespace

InfeasibleReport diagnose_infeasible(const PlanRequest& req, const std::string& policy, const Plan& failed) {
  InfeasibleReport rep;
  std::vector<std::string> problems = failed.windows.empty() ? std::vector<std::string>{} : capacity_problems(failed);
  if (problems.empty()) {
    // No plan to measure (the MILP proved infeasibility): the plan that needs the least
    // compute-tier memory among the simple ones tells which budget is short and by how much.
    CostModel cm = build_cost_model(req);
    Plan best = plan_greedy(req, cm);
    Plan rc = plan_recompute_all(req, cm);
    if (rc.predicted_peak.gpu < best.predicted_peak.gpu) best = rc;
    problems = capacity_problems(best);
    // Those plans recompute, so no bf16 copy of theirs pages (a paged copy's boundary is
    // stored): keep-all's host shortage is smaller where copies may page, or it has none
    // (the MILP keeps the state within its share of the host, kHostStateShare).
    if (req.page_copy && !problems.empty() && problems.front().rfind("host memory short", 0) == 0) {
      const Plan keep = plan_keep_all(req, cm);
      const std::vector<std::string> kept = capacity_problems(keep);
      if (kept.empty())
        problems = {"host memory short for the MILP, which keeps the training state within " +
                    std::to_string(static_cast<int>(kHostStateShare * 100)) +
                    "% of the host; the keep-all plan fits (" + fmt_gb(keep.predicted_peak.cpu) + " of " +
                    fmt_gb(req.hardware.host_memory_bytes) + "): plan with --policy keep-all"};
      else if (keep.predicted_peak.cpu < best.predicted_peak.cpu && kept.front().rfind("host memory short", 0) == 0)
        problems = kept;
    }
    // The host's share for the persistent state (state_paging.h), with every optimizer
    // state that can page on NVMe.
    const StatePaging paged = problems.empty() && req.nvme_state_layers < 0
                                  ? plan_state_paging(req, cm, /*lazy_optimizer=*/true)
                                  : StatePaging{};
    if (paged.host_state_bytes > kHostStateShare * req.hardware.host_memory_bytes * (1 + 1e-9))
      problems.push_back("host memory short: the training state takes " + fmt_gb(paged.host_state_bytes) +
                         " of host memory with the optimizer states of layers 2.." +
                         std::to_string(cm.num_layers - 1) + " on NVMe, over " +
                         std::to_string(static_cast<int>(kHostStateShare * 100)) + "% of its " +
                         fmt_gb(req.hardware.host_memory_bytes) + " (" + stay_on_host(req) + " stay on the host)");
  }
  if (!problems.empty())
    rep.shortage = problems.front();
  else if (failed.infeasible_reason.find("time limit") != std::string::npos)
    rep.shortage = "no budget is short, but no plan was found in the time limit (raise --time-limit)";
  else  // proven: the MILP's memory rows count some buffers longer than its plans hold them
    rep.shortage = "no budget is short for the simple plans (greedy or recompute-all fit), but " + policy +
                   " has none (" + failed.infeasible_reason + "; its memory model is stricter than theirs): plan "
                   "with --policy megatrain or greedy";
  rep.largest_batch = largest_feasible_batch(req, policy, std::max<int64_t>(req.batch - 1, 1));
  if (rep.largest_batch >= req.batch) rep.largest_batch = req.batch - 1;
  rep.message = "no feasible " + policy + " plan for batch " + std::to_string(req.batch) + ", seq " +
                std::to_string(req.seq) + ": " + rep.shortage + "; largest batch that fits: " +
                (rep.largest_batch > 0 ? std::to_string(rep.largest_batch) : std::string("none (not even batch 1)"));
  return rep;
}

}  // namespace lt
