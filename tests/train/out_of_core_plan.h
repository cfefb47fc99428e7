// A streamed plan for the trainer's tests: shared by the one-process and the data-parallel
// streamed-training tests.
#pragma once

#include <cstdint>
#include <string>

#include "model/config.h"
#include "plan/cost_model.h"
#include "plan/planner.h"
#include "plan/state_paging.h"
#include "../exec/streaming_test_util.h"

namespace lt::test {

// A MILP plan for `model` at batch x seq on the streaming cpu profile (in the executors'
// fp32 sizes), under the smallest compute cap, from half the keep-all peak up in 5% steps,
// that has one: it offloads boundaries to host memory and NVMe (half a boundary's worth of
// host activations). page_states: the host is short of the whole host state by one and a
// half layers' optimizer states, so the plan pages the top layers' states from NVMe too.
// An infeasible Plan when no cap has one. ranks > 1: a plan that counts the exchange of
// that many data-parallel ranks (plan/data_parallel.h) over a 1 GB/s link. page_master,
// page_grads: the paged layers' matrices' fp32 masters (bf16 runs) and gradients page with
// their states, on a host between what paging with one part fewer and with them frees.
inline Plan out_of_core_plan(const ModelConfig& model, int64_t batch, int64_t seq, bool page_states, int ranks = 1,
                             bool sharded = true, bool page_master = false, bool page_grads = false) {
  const auto none = [](const std::string& why) {
    Plan p;
    p.feasible = false;
    p.infeasible_reason = why;
    return p;
  };
  PlanRequest req;
  req.model_name = "streamed-training-test";
  req.model = model;
  req.hardware = streaming_cpu_profile();
  req.hardware.act_bytes = 4;
  req.batch = batch;
  req.seq = seq;
  req.ranks = ranks;
  req.shard_optimizer = sharded;
  if (ranks > 1) req.hardware.network_bw = 1e9;
  const CostModel cm = build_cost_model(req);
  if (page_states) req.hardware.host_memory_bytes = (cm.host_state_bytes - 1.5 * cm.layer(0).state_bytes) / 0.9;
  if (page_master || page_grads) {
    // The host state with every layer that can page paged, with these parts and without the last.
    const auto least_host_state = [&](bool master, bool grads) {
      PlanRequest r = req;
      r.page_master = master;
      r.page_grads = grads;
      r.nvme_state_layers = model.num_layers - 2;
      return plan_state_paging(r, build_cost_model(r), true).host_state_bytes;
    };
    const double with = least_host_state(page_master, page_grads);
    const double without = least_host_state(page_grads && page_master, false);
    if (!(with < without)) return none("paging these parts frees no more than paging fewer");
    req.hardware.host_memory_bytes = (with + without) / 2 / 0.9;
    req.page_master = page_master;
    req.page_grads = page_grads;
  }
  req.cpu_act_budget_bytes = 0.5 * cm.boundary_bytes;
  const Plan keep = make_plan(req, "keep-all");
  for (double f = 0.5; f <= 1.0; f += 0.05) {
    req.gpu_cap_bytes = keep.predicted_peak.gpu * f;
    Plan p = make_plan(req, "milp");
    if (p.feasible) return p;
  }
  return none("no compute cap from half the keep-all peak up has a plan");
}

}  // namespace lt::test
