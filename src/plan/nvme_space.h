// The NVMe tier's budget against the disk it will live on: a plan that needs more bytes
// than the offload directory's file system has free is refused at plan time (before any
// training step), not discovered when the store preallocates its files.
#pragma once

#include <string>

#include "plan/plan.h"
#include "plan/plan_request.h"

namespace lt {

// Bytes an unprivileged writer can still allocate under `dir`; lt::Error if it is not a
// directory. `where` names the setting that chose dir (e.g. "--offload-dir").
double free_disk_bytes(const std::string& dir, const std::string& where);

// Makes the request plan within `free_bytes` of NVMe: an explicit activation budget above
// it is an lt::Error; otherwise the profile's NVMe capacity is lowered to it (the states
// that page and the activations then share what is free).
void limit_nvme_to_free_space(PlanRequest& req, double free_bytes, const std::string& dir, const std::string& where);

// lt::Error when the plan's NVMe bytes (offloaded activations at their peak plus paged
// optimizer states) exceed free_bytes.
void check_plan_nvme_fits(const Plan& plan, double free_bytes, const std::string& dir, const std::string& where);

}  // namespace lt
