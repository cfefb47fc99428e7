#include "plan/hardware_profile.h"

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace lt {
namespace {

constexpr double kGB = 1e9;

// Reads one number (bare, or {"value", "source"}) and records its source.
double read_number(const nlohmann::json& j, const char* section, const char* key, HardwareProfile& p,
                   const std::string& where) {
  std::string field = std::string(section) + "." + key;
  if (!j.contains(section) || !j[section].contains(key))
    throw Error("missing field " + field, where, "add it (see profiles/h800.json for the layout)");
  const auto& v = j[section][key];
  if (v.is_number()) {
    p.sources[field] = "unspecified";
    return v.get<double>();
  }
  if (v.is_object() && v.contains("value") && v["value"].is_number()) {
    p.sources[field] = v.contains("source") && v["source"].is_string() ? v["source"].get<std::string>() : "unspecified";
    return v["value"].get<double>();
  }
  throw Error("field " + field + " is not a number or {\"value\": number}", where, "fix the profile");
}

// An optional small integer field (bytes per element): 2 or 4 when right, so a float, a
// string or a huge number is an error here, not a conversion (undefined for a float
// out of int's range).
int read_element_bytes(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.contains(key)) return 2;
  const auto& v = j[key];
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 64)
    throw Error(std::string(key) + " must be 2 (bf16) or 4 (fp32), got " + v.dump(), where, "fix the profile");
  return static_cast<int>(v.get<int64_t>());
}

// An optional string field.
std::string read_string(const nlohmann::json& j, const char* key, const std::string& def, const std::string& where) {
  if (!j.contains(key)) return def;
  if (!j[key].is_string()) throw Error(std::string(key) + " must be a string", where, "fix the profile");
  return j[key].get<std::string>();
}

std::filesystem::path resolve(const std::string& name_or_path) {
  namespace fs = std::filesystem;
  if (fs::exists(name_or_path) && fs::is_regular_file(name_or_path)) return name_or_path;
  for (const fs::path& dir : {fs::path(LT_SOURCE_DIR) / "profiles", fs::path("profiles")}) {
    fs::path f = dir / (name_or_path + ".json");
    if (fs::exists(f)) return f;
  }
  throw Error("unknown hardware profile '" + name_or_path + "'", "--hardware",
              "give a profile file, or one of profiles/*.json (h800, rtx3090, h200, local)");
}

}  // namespace

HardwareProfile parse_hardware_profile(const nlohmann::json& j, const std::string& where) {
  HardwareProfile p;
  if (!j.is_object()) throw Error("a hardware profile must be a JSON object", where, "fix the profile");
  p.name = read_string(j, "name", "unnamed", where);
  p.description = read_string(j, "description", "", where);
  p.backend = read_string(j, "backend", "cuda", where);
  p.act_bytes = read_element_bytes(j, "act_bytes", where);
  p.weight_bytes = read_element_bytes(j, "weight_bytes", where);
  p.grad_bytes = read_element_bytes(j, "grad_bytes", where);
  p.compute_memory_bytes = read_number(j, "compute", "memory_gb", p, where) * kGB;
  p.default_cap_bytes = read_number(j, "compute", "default_cap_gb", p, where) * kGB;
  p.peak_flops = read_number(j, "compute", "peak_tflops", p, where) * 1e12;
  p.efficiency = read_number(j, "compute", "efficiency", p, where);
  if (j.contains("compute") && j["compute"].contains("bf16_peak_tflops"))
    p.bf16_peak_flops = read_number(j, "compute", "bf16_peak_tflops", p, where) * 1e12;
  p.h2d_bw = read_number(j, "links", "h2d_gbps", p, where) * kGB;
  p.d2h_bw = read_number(j, "links", "d2h_gbps", p, where) * kGB;
  if (j.contains("links") && j["links"].contains("network_gbps")) {
    p.network_bw = read_number(j, "links", "network_gbps", p, where) * kGB;
    if (!(p.network_bw > 0))
      throw Error("links.network_gbps must be positive", where, "fix the profile, or leave it out");
  }
  p.nvme_read_bw = read_number(j, "nvme", "read_gbps", p, where) * kGB;
  p.nvme_write_bw = read_number(j, "nvme", "write_gbps", p, where) * kGB;
  p.nvme_capacity_bytes = read_number(j, "nvme", "capacity_gb", p, where) * kGB;
  p.host_memory_bytes = read_number(j, "host", "memory_gb", p, where) * kGB;
  p.host_optimizer_params_per_s = read_number(j, "host", "optimizer_gparams_per_s", p, where) * 1e9;
  p.host_memory_bw = read_number(j, "host", "memory_bandwidth_gbps", p, where) * kGB;
  if (j.contains("host") && j["host"].contains("threads")) {
    const double t = read_number(j, "host", "threads", p, where);
    if (!(t >= 1 && t <= 1 << 20 && t == std::floor(t)))
      throw Error("host.threads must be a whole number of threads, got " + std::to_string(t), where,
                  "fix the profile, or leave it out");
    p.threads = static_cast<int>(t);
  }
  p.cpu = read_string(j, "cpu", "", where);
  if (j.contains("bf16_gemm_paths")) {
    const auto& paths = j["bf16_gemm_paths"];
    if (!paths.is_object()) throw Error("bf16_gemm_paths must be an object", where, "fix the profile, or leave it out");
    // Not a structured binding: the lambda below captures these (clang 14 cannot capture
    // structured bindings).
    for (auto it = paths.begin(); it != paths.end(); ++it) {
      const std::string layout = it.key();
      const nlohmann::json& v = it.value();
      if (!v.is_object()) continue;  // "chosen", "reason": what profile printed, not rates
      const auto rate = [&](const char* key) {
        if (!v.contains(key) || !v[key].is_number() || !(v[key].get<double>() > 0))
          throw Error("bf16_gemm_paths." + layout + "." + key + " must be a positive number", where,
                      "rerun `lazytrain profile`, or leave bf16_gemm_paths out");
        return v[key].get<double>();
      };
      p.bf16_gemm_rates[layout] = {rate("native_gflops"), rate("widened_gflops")};
    }
  }
  if (p.act_bytes != 2 && p.act_bytes != 4)
    throw Error("act_bytes must be 2 (bf16) or 4 (fp32)", where, "fix the profile");
  if (p.weight_bytes != 2 && p.weight_bytes != 4)
    throw Error("weight_bytes must be 2 (bf16) or 4 (fp32)", where, "fix the profile");
  if (p.grad_bytes != 2 && p.grad_bytes != 4)
    throw Error("grad_bytes must be 2 (bf16) or 4 (fp32)", where, "fix the profile");
  struct Positive {
    const char* name;
    double v;
  };
  for (const Positive& f : {Positive{"compute.memory_gb", p.compute_memory_bytes},
                            Positive{"compute.default_cap_gb", p.default_cap_bytes},
                            Positive{"compute.peak_tflops", p.peak_flops},
                            Positive{"compute.efficiency", p.efficiency},
                            Positive{"links.h2d_gbps", p.h2d_bw}, Positive{"links.d2h_gbps", p.d2h_bw},
                            Positive{"nvme.read_gbps", p.nvme_read_bw},
                            Positive{"nvme.write_gbps", p.nvme_write_bw},
                            Positive{"host.memory_gb", p.host_memory_bytes},
                            Positive{"host.optimizer_gparams_per_s", p.host_optimizer_params_per_s},
                            Positive{"host.memory_bandwidth_gbps", p.host_memory_bw}})
    if (!(f.v > 0)) throw Error(std::string("field ") + f.name + " must be > 0", where, "fix the profile");
  if (p.efficiency > 1) throw Error("compute.efficiency must be <= 1", where, "fix the profile");
  return p;
}

HardwareProfile load_hardware_profile(const std::string& name_or_path) {
  auto path = resolve(name_or_path);
  std::ifstream f(path);
  if (!f) throw Error("cannot open hardware profile", path.string(), "check the path");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("invalid JSON: ") + e.what(), path.string(), "fix the file");
  }
  return parse_hardware_profile(j, path.string());
}

nlohmann::json hardware_profile_to_json(const HardwareProfile& p) {
  auto num = [&](const std::string& field, double v) {
    auto it = p.sources.find(field);
    return nlohmann::json{{"value", v}, {"source", it == p.sources.end() ? "unspecified" : it->second}};
  };
  nlohmann::json j;
  j["name"] = p.name;
  j["description"] = p.description;
  j["backend"] = p.backend;
  j["act_bytes"] = p.act_bytes;
  j["weight_bytes"] = p.weight_bytes;
  j["grad_bytes"] = p.grad_bytes;
  j["compute"] = {{"memory_gb", num("compute.memory_gb", p.compute_memory_bytes / kGB)},
                  {"default_cap_gb", num("compute.default_cap_gb", p.default_cap_bytes / kGB)},
                  {"peak_tflops", num("compute.peak_tflops", p.peak_flops / 1e12)},
                  {"efficiency", num("compute.efficiency", p.efficiency)}};
  if (p.bf16_peak_flops > 0) j["compute"]["bf16_peak_tflops"] = num("compute.bf16_peak_tflops", p.bf16_peak_flops / 1e12);
  j["links"] = {{"h2d_gbps", num("links.h2d_gbps", p.h2d_bw / kGB)},
                {"d2h_gbps", num("links.d2h_gbps", p.d2h_bw / kGB)}};
  if (p.network_bw > 0) j["links"]["network_gbps"] = num("links.network_gbps", p.network_bw / kGB);
  j["nvme"] = {{"read_gbps", num("nvme.read_gbps", p.nvme_read_bw / kGB)},
               {"write_gbps", num("nvme.write_gbps", p.nvme_write_bw / kGB)},
               {"capacity_gb", num("nvme.capacity_gb", p.nvme_capacity_bytes / kGB)}};
  j["host"] = {{"memory_gb", num("host.memory_gb", p.host_memory_bytes / kGB)},
               {"optimizer_gparams_per_s", num("host.optimizer_gparams_per_s", p.host_optimizer_params_per_s / 1e9)},
               {"memory_bandwidth_gbps", num("host.memory_bandwidth_gbps", p.host_memory_bw / kGB)}};
  if (p.threads > 0) j["host"]["threads"] = num("host.threads", p.threads);
  if (!p.cpu.empty()) j["cpu"] = p.cpu;
  for (const auto& [layout, r] : p.bf16_gemm_rates)
    j["bf16_gemm_paths"][layout] = {{"native_gflops", r.native_gflops}, {"widened_gflops", r.widened_gflops}};
  return j;
}

}  // namespace lt
