// Plan validation: the rules a plan must satisfy before the executor runs it. Returns the
// problems found (empty: valid). Checks structure (tiers, blocks), that every activation
// part moves exactly its bytes, in order (D2H before NVMe write before NVMe read before
// H2D, each in a strictly earlier window), reloads complete before the window that needs
// them, host updates before the weight load that needs them, and capacities of every tier.
#pragma once

#include <string>
#include <vector>

#include "plan/plan.h"

namespace lt {

std::vector<std::string> validate_plan(const Plan& p);
// Only the capacity checks (compute-tier cap, host activation budget for the cpu parts,
// NVMe budget, host memory for state + activations + NVMe staging), each problem naming the
// budget and the shortfall in GB.
std::vector<std::string> capacity_problems(const Plan& p);

// For a plan read from a file (`train --plan`, `simulate`): throws an Error naming `source`
// and the first problems validate_plan finds, telling the user to re-run `lazytrain plan`.
// A plan file may be hand-edited or written for an older version of these rules; the
// executor trusts the plan it runs, so it is checked once, where it enters.
void require_valid_plan(const Plan& p, const std::string& source);

// Bytes as the problems above print them: "12.345 GB".
std::string fmt_gb(double bytes);

}  // namespace lt
