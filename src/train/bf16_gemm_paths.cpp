#include "train/bf16_gemm_paths.h"

#include <cstdio>
#include <optional>

#include "core/cpu_features.h"
#include "core/error.h"
#include "kernels/cpu/matmul.h"
#include "plan/hardware_profile.h"

namespace lt {
namespace {

const char* path_name(Bf16GemmPath p) { return p == Bf16GemmPath::Native ? "native" : "widened"; }

// The checkpoint's recorded paths, when its trainer state has them (checkpoints written
// before they were recorded do not).
std::optional<Bf16GemmMeasured> recorded(const nlohmann::json& st, const std::string& dir) {
  const std::string path = dir + "/trainer_state.json";
  if (!st.is_object() || !st.contains("bf16_gemm")) return std::nullopt;
  Bf16GemmMeasured m;
  m.source = "as the resumed checkpoint's run (" + dir + ")";
  const nlohmann::json& rec = st.at("bf16_gemm");
  for (int l = 0; l < kMatmulLayouts; ++l) {
    const char* name = matmul_layout_name(static_cast<MatmulLayout>(l));
    const nlohmann::json v = rec.is_object() && rec.contains(name) ? rec.at(name) : nlohmann::json();
    if (v != "native" && v != "widened")
      throw Error(std::string("bf16_gemm.") + name + " is " + v.dump() + ", not \"native\" or \"widened\"", path,
                  "the file is damaged; use another checkpoint");
    m.path[l] = v == "native" ? Bf16GemmPath::Native : Bf16GemmPath::Widened;
  }
  return m;
}

// The faster path per layout, as the profile measured it on this CPU.
std::optional<Bf16GemmMeasured> measured(const std::string& hardware) {
  HardwareProfile hw;
  try {
    hw = load_hardware_profile(hardware);
  } catch (const Error&) {
    return std::nullopt;  // no profile: the rule
  }
  if (hw.cpu != cpu_summary() || hw.bf16_gemm_rates.empty()) return std::nullopt;  // another CPU or level
  Bf16GemmMeasured m;
  std::string rates;
  for (int l = 0; l < kMatmulLayouts; ++l) {
    const char* name = matmul_layout_name(static_cast<MatmulLayout>(l));
    const auto it = hw.bf16_gemm_rates.find(name);
    if (it == hw.bf16_gemm_rates.end()) return std::nullopt;
    const auto& r = it->second;
    m.path[l] = r.native_gflops > r.widened_gflops ? Bf16GemmPath::Native : Bf16GemmPath::Widened;
    char buf[96];
    std::snprintf(buf, sizeof buf, "%s%s %.0f/%.0f", l ? ", " : "", name, r.native_gflops, r.widened_gflops);
    rates += buf;
  }
  m.source = "measured by lazytrain profile in hardware profile '" + hw.name + "': native/widened GFLOP/s " + rates;
  return m;
}

}  // namespace

void choose_bf16_gemm_paths(const std::string& hardware, const nlohmann::json* resumed, const std::string& resumed_dir) {
  std::optional<Bf16GemmMeasured> m = resumed ? recorded(*resumed, resumed_dir) : std::nullopt;
  if (!m) m = measured(hardware);
  set_measured_bf16_gemm_paths(m);
}

nlohmann::json bf16_gemm_paths_in_use() {
  nlohmann::json j;
  for (int l = 0; l < kMatmulLayouts; ++l) {
    const auto layout = static_cast<MatmulLayout>(l);
    j[matmul_layout_name(layout)] = path_name(bf16_gemm_choice(layout).path);
  }
  return j;
}

}  // namespace lt
