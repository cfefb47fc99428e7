#include "plan/nvme_space.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "core/error.h"

namespace lt {

namespace {

std::string gb(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f GB", bytes / 1e9);
  return buf;
}

}  // namespace

double free_disk_bytes(const std::string& dir, const std::string& where) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    throw Error("the offload directory " + dir + " does not exist", where, "create it, or pass another --offload-dir");
  const std::filesystem::space_info s = std::filesystem::space(dir, ec);
  if (ec) throw Error("cannot read the free space of " + dir + ": " + ec.message(), where, "pass another --offload-dir");
  return static_cast<double>(s.available);
}

void limit_nvme_to_free_space(PlanRequest& req, double free_bytes, const std::string& dir, const std::string& where) {
  if (req.nvme_act_budget_bytes > free_bytes)
    throw Error("the NVMe activation budget of " + gb(req.nvme_act_budget_bytes) + " exceeds the " + gb(free_bytes) +
                    " free in " + dir,
                where, "lower --act-budget nvme=..., free space there, or pass an --offload-dir on a larger disk");
  req.hardware.nvme_capacity_bytes = std::min(req.hardware.nvme_capacity_bytes, free_bytes);
}

void check_plan_nvme_fits(const Plan& plan, double free_bytes, const std::string& dir, const std::string& where) {
  const double need = plan.predicted_peak.nvme + plan.nvme_state_bytes();
  if (need > free_bytes)
    throw Error("the plan puts " + gb(need) + " on NVMe (activations " + gb(plan.predicted_peak.nvme) +
                    ", optimizer states " + gb(plan.nvme_state_bytes()) + ") but " + dir + " has " + gb(free_bytes) +
                    " free",
                where,
                "free space there, pass an --offload-dir on a larger disk, or re-plan with `lazytrain plan "
                "--offload-dir " + dir + "` (it plans within the free space)");
}

}  // namespace lt
