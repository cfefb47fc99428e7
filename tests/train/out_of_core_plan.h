// A streamed plan for the trainer's tests: shared by the one-process and the data-parallel
// streamed-training tests.
#pragma once

#include <cstdint>

#include "model/config.h"
#include "plan/cost_model.h"
#include "plan/planner.h"
#include "../exec/streaming_test_util.h"

namespace lt::test {

// A MILP plan for `model` at batch x seq on the streaming cpu profile (in the executors'
// fp32 sizes), under the smallest compute cap, from half the keep-all peak up in 5% steps,
// that has one: it offloads boundaries to host memory and NVMe (half a boundary's worth of
// host activations). page_states: the host is short of the whole host state by one and a
// half layers' optimizer states, so the plan pages the top layers' states from NVMe too.
// An infeasible Plan when no cap has one. ranks > 1: a plan that counts the exchange of
// that many data-parallel ranks (plan/data_parallel.h) over a 1 GB/s link. page_master:
// the paged layers' matrices' fp32 masters page with their states (bf16 runs).
inline Plan out_of_core_plan(const ModelConfig& model, int64_t batch, int64_t seq, bool page_states, int ranks = 1,
                             bool sharded = true, bool page_master = false) {
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
  req.page_master = page_master;
  const CostModel cm = build_cost_model(req);
  if (page_states) req.hardware.host_memory_bytes = (cm.host_state_bytes - 1.5 * cm.layer(0).paged_bytes()) / 0.9;
  req.cpu_act_budget_bytes = 0.5 * cm.boundary_bytes;
  const Plan keep = make_plan(req, "keep-all");
  for (double f = 0.5; f <= 1.0; f += 0.05) {
    req.gpu_cap_bytes = keep.predicted_peak.gpu * f;
    Plan p = make_plan(req, "milp");
    if (p.feasible) return p;
  }
  Plan none;
  none.feasible = false;
  none.infeasible_reason = "no compute cap from half the keep-all peak up has a plan";
  return none;
}

}  // namespace lt::test
