// Chrome trace JSON (the "traceEvents" format that Perfetto and chrome://tracing load) of a
// simulated step: one track per lane (compute, h2d, d2h, nvme, host) and a counter track
// of compute-tier bytes.
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "sim/simulator.h"

namespace lt {

nlohmann::json chrome_trace_json(const SimResult& r, const Plan& p);
void write_chrome_trace(const SimResult& r, const Plan& p, const std::string& path);

}  // namespace lt
