// Plan <-> JSON (schema in plan/plan.h), and the --json summary `lazytrain plan` prints.
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "plan/plan.h"

namespace lt {

nlohmann::json plan_to_json(const Plan& p);
Plan plan_from_json(const nlohmann::json& j, const std::string& where);
void save_plan(const Plan& p, const std::string& path);
Plan load_plan(const std::string& path);

// One object: feasible, policy, batch, seq, predicted_step_s, tokens_per_s, tflops,
// solve_s, mip_gap, boundaries {gpu, cpu, nvme, recompute}, peak_bytes {gpu, cpu, nvme}.
nlohmann::json plan_summary_json(const Plan& p);

}  // namespace lt
