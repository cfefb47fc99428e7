#include "sim/chrome_trace.h"

#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace lt {

nlohmann::json chrome_trace_json(const SimResult& r, const Plan& p) {
  using nlohmann::json;
  constexpr double kUs = 1e6;  // trace timestamps are microseconds
  json ev = json::array();
  ev.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 1},
                {"args", {{"name", "lazytrain " + p.policy + " " + p.model_name + " batch " + std::to_string(p.batch)}}}});
  for (SimLane l : {SimLane::Compute, SimLane::H2D, SimLane::D2H, SimLane::Nvme, SimLane::Host, SimLane::Net})
    ev.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", static_cast<int>(l)},
                  {"args", {{"name", sim_lane_name(l)}}}});
  for (const auto& e : r.events) {
    json args = {{"window", e.window}};
    if (e.bytes > 0) args["bytes"] = e.bytes;
    ev.push_back({{"name", e.name}, {"cat", sim_lane_name(e.lane)}, {"ph", "X"}, {"pid", 1},
                  {"tid", static_cast<int>(e.lane)}, {"ts", e.start * kUs}, {"dur", (e.end - e.start) * kUs},
                  {"args", args}});
  }
  for (auto [t, bytes] : r.gpu_memory)
    ev.push_back({{"name", "compute-tier GB"}, {"ph", "C"}, {"pid", 1}, {"ts", t * kUs}, {"args", {{"GB", bytes / 1e9}}}});
  return {{"traceEvents", ev}, {"displayTimeUnit", "ms"}};
}

void write_chrome_trace(const SimResult& r, const Plan& p, const std::string& path) {
  std::ofstream f(path);
  if (!f) throw Error("cannot write trace", path, "check the directory exists and is writable");
  f << chrome_trace_json(r, p).dump() << "\n";
}

}  // namespace lt
