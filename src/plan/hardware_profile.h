// Hardware profiles: the rates and capacities the cost model needs, each with the source
// of the number (datasheet lead, measured here, taken from the paper, calibrated against a
// paper anchor, or assumed). Files live in profiles/<name>.json; `lazytrain profile`
// writes a measured one.
//
// JSON schema (every number is either a bare number or {"value", "source", "note"}):
//   { "name", "description", "backend": "cuda"|"emu"|"cpu", "act_bytes": 2,
//     "weight_bytes": 2, "grad_bytes": 2,
//     "compute": { "memory_gb", "default_cap_gb", "peak_tflops", "efficiency",
//                  "bf16_peak_tflops" (optional) },
//     "links":   { "h2d_gbps", "d2h_gbps" },
//     "nvme":    { "read_gbps", "write_gbps", "capacity_gb" },
//     "host":    { "memory_gb", "optimizer_gparams_per_s", "memory_bandwidth_gbps" } }
// GB means 1e9 bytes throughout the planner; rates are per second.
#pragma once

#include <map>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace lt {

struct HardwareProfile {
  std::string name;
  std::string description;
  std::string backend = "cuda";
  int act_bytes = 2;  // activation element size on the compute tier (bf16)
  // Element sizes of the weights and gradients the executor keeps on the compute tier and
  // moves over the links: bf16 (2) on GPU profiles, fp32 (4) for the cpu and emu executors.
  int weight_bytes = 2;
  int grad_bytes = 2;

  double compute_memory_bytes = 0;
  double default_cap_bytes = 0;
  double peak_flops = 0;   // FLOP/s
  double efficiency = 1;   // fraction of peak_flops the layer kernels reach
  // cpu profiles, whose peak_flops is the fp32 rate: the rate of bf16 matmuls (fp32
  // accumulation), for runs that compute in bf16. 0: not measured.
  double bf16_peak_flops = 0;
  double h2d_bw = 0;       // bytes/s, host -> compute tier
  double d2h_bw = 0;       // bytes/s, compute tier -> host
  // bytes/s one data-parallel rank moves to or from another (links.network_gbps, optional:
  // 0 = not given; plans for more than one rank need it, plan/data_parallel.h).
  double network_bw = 0;
  double nvme_read_bw = 0;
  double nvme_write_bw = 0;
  double nvme_capacity_bytes = 0;
  double host_memory_bytes = 0;
  double host_optimizer_params_per_s = 0;
  double host_memory_bw = 0;
  // The threads the compute and optimizer rates were measured on (host.threads, optional:
  // 0 = not recorded). A run on fewer threads plans at its share of them.
  int threads = 0;

  // What `lazytrain profile` measured besides (optional): the CPU it ran on (its features
  // and kernel level, core/cpu_features.h's summary) and, per matmul layout ("x.W^T",
  // "dy.W", "dy^T.x"), the two bf16 GEMM paths' rates in GFLOP/s (kernels/cpu/matmul.h).
  std::string cpu;
  struct Bf16PathRates {
    double native_gflops = 0, widened_gflops = 0;
  };
  std::map<std::string, Bf16PathRates> bf16_gemm_rates;

  // "compute.peak_tflops" -> "datasheet", ... for every number read.
  std::map<std::string, std::string> sources;

  double effective_flops() const { return peak_flops * efficiency; }
};

// `name_or_path`: a file path, or a name resolved as profiles/<name>.json in the source
// tree (LT_SOURCE_DIR) or the working directory.
HardwareProfile load_hardware_profile(const std::string& name_or_path);
HardwareProfile parse_hardware_profile(const nlohmann::json& j, const std::string& where);
nlohmann::json hardware_profile_to_json(const HardwareProfile& p);

}  // namespace lt
