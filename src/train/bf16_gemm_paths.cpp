#include "train/bf16_gemm_paths.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <optional>

#include "core/aligned_buffer.h"
#include "core/cpu_features.h"
#include "core/error.h"
#include "core/measure.h"
#include "io/atomic_file.h"
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

// The startup measurement's product: big enough for oneDNN's blocked kernels to reach
// their rate (2 GFLOP, a few ms), small enough that both paths at three layouts take
// about a fifth of a second.
constexpr int64_t kStartupGemmSize = 1024;
constexpr int kStartupReps = 3;

// The faster path per layout as measured at first use, with the margin.
std::optional<Bf16GemmMeasured> measured_at_startup() {
  const std::optional<std::vector<Bf16PathRates>> rates = startup_bf16_gemm_rates();
  if (!rates) return std::nullopt;
  Bf16GemmMeasured m;
  std::string text;
  for (int l = 0; l < kMatmulLayouts; ++l) {
    const Bf16PathRates& r = (*rates)[l];
    m.path[l] = r.native >= kStartupNativeMargin * r.widened ? Bf16GemmPath::Native : Bf16GemmPath::Widened;
    char buf[96];
    std::snprintf(buf, sizeof buf, "%s%s %.0f/%.0f", l ? ", " : "", r.layout, r.native, r.widened);
    text += buf;
  }
  m.source = "measured at first use on this CPU (no profile of it; cached in " + bf16_gemm_cache_file() +
             "): native/widened GFLOP/s " + text;
  return m;
}

}  // namespace

std::vector<Bf16PathRates> measure_bf16_gemm_paths(int64_t n, int reps, bool best) {
  std::vector<bf16> a(n * n), b(n * n);
  for (int64_t i = 0; i < n * n; ++i) {
    a[i] = f32_to_bf16(static_cast<float>((i % 97) - 48) / 97.f);
    b[i] = f32_to_bf16(static_cast<float>((i % 89) - 44) / 89.f);
  }
  AlignedBuffer<float> c(n * n);
  std::vector<Bf16PathRates> out;
  for (int l = 0; l < kMatmulLayouts; ++l) {
    const auto layout = static_cast<MatmulLayout>(l);
    const bool trans_a = layout == MatmulLayout::WeightGrad, trans_b = layout == MatmulLayout::Forward;
    auto gflops = [&](Bf16GemmPath path) {
      set_bf16_gemm_path(path);
      const auto t0 = std::chrono::steady_clock::now();
      matmul_bf16(c.data(), a.data(), trans_a, b.data(), trans_b, n, n, n, false);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      return 2.0 * static_cast<double>(n * n * n) / s / 1e9;
    };
    (void)gflops(Bf16GemmPath::Native);  // warm-up, and the primitives' creation
    (void)gflops(Bf16GemmPath::Widened);
    std::vector<double> native, widened;
    for (int r = 0; r < reps; ++r) {  // interleaved: a burst of load slows both paths alike
      native.push_back(gflops(Bf16GemmPath::Native));
      widened.push_back(gflops(Bf16GemmPath::Widened));
    }
    auto pick = [best](const std::vector<double>& v) { return best ? *std::max_element(v.begin(), v.end()) : median(v); };
    out.push_back({matmul_layout_name(layout), pick(native), pick(widened)});
  }
  set_bf16_gemm_path(std::nullopt);
  return out;
}

std::string bf16_gemm_cache_file() {
  const char* dir = std::getenv("LT_CACHE_DIR");
  if (dir && *dir) return std::string(dir) + "/bf16-gemm-paths.json";
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && *xdg) return std::string(xdg) + "/lazytrain/bf16-gemm-paths.json";
  const char* home = std::getenv("HOME");
  return home && *home ? std::string(home) + "/.cache/lazytrain/bf16-gemm-paths.json" : std::string();
}

namespace {

// The cache file's entry for `cpu`, when it has a whole one; `cache` gets the file's
// object (empty when there is no file, or a damaged one: it is measured over).
std::optional<std::vector<Bf16PathRates>> cached_rates(const std::string& file, const std::string& cpu,
                                                       nlohmann::json& cache) {
  cache = nlohmann::json::object();
  if (file.empty() || !std::filesystem::exists(file)) return std::nullopt;
  try {
    nlohmann::json j = nlohmann::json::parse(read_text_file(file));
    if (!j.is_object()) return std::nullopt;
    cache = std::move(j);
    if (!cache.contains(cpu)) return std::nullopt;
    std::vector<Bf16PathRates> rates;
    for (int l = 0; l < kMatmulLayouts; ++l) {
      const char* name = matmul_layout_name(static_cast<MatmulLayout>(l));
      const nlohmann::json& r = cache.at(cpu).at(name);
      rates.push_back({name, r.at("native_gflops").get<double>(), r.at("widened_gflops").get<double>()});
    }
    return rates;
  } catch (const std::exception&) {
    cache = nlohmann::json::object();
    return std::nullopt;
  }
}

}  // namespace

std::optional<std::vector<Bf16PathRates>> startup_bf16_gemm_rates() {
  static std::once_flag once;
  static std::optional<std::vector<Bf16PathRates>> rates;
  std::call_once(once, [] {
    const char* env = std::getenv("LT_BF16_GEMM");
    const CpuFeatures& f = cpu_features();
    if ((env && *env) || active_isa() < Isa::Avx512 || !(f.avx512bf16 || f.amx_bf16)) return;
    // This CPU's earlier measurement when the cache has one: every run on the machine
    // takes the same paths.
    const std::string file = bf16_gemm_cache_file(), cpu = cpu_summary();
    nlohmann::json cache;
    rates = cached_rates(file, cpu, cache);
    if (rates) return;
    rates = measure_bf16_gemm_paths(kStartupGemmSize, kStartupReps, /*best=*/true);
    if (file.empty()) return;
    for (const Bf16PathRates& r : *rates)
      cache[cpu][r.layout] = {{"native_gflops", r.native}, {"widened_gflops", r.widened}};
    try {  // a cache that cannot be written only costs the next run the measurement
      std::filesystem::create_directories(std::filesystem::path(file).parent_path());
      write_file_atomic(file, cache.dump(2) + "\n");
    } catch (const std::exception&) {
    }
  });
  return rates;
}

void choose_bf16_gemm_paths(const std::string& hardware, const nlohmann::json* resumed, const std::string& resumed_dir,
                            bool bf16_run) {
  std::optional<Bf16GemmMeasured> m = resumed ? recorded(*resumed, resumed_dir) : std::nullopt;
  if (!m) m = measured(hardware);
  if (!m && bf16_run) m = measured_at_startup();
  set_measured_bf16_gemm_paths(m);
}

void take_rank0_bf16_gemm_paths(Communicator& comm) {
  float path[kMatmulLayouts];
  for (int l = 0; l < kMatmulLayouts; ++l)
    path[l] = static_cast<float>(bf16_gemm_choice(static_cast<MatmulLayout>(l)).path);
  comm.broadcast(0, path, kMatmulLayouts);
  if (comm.is_root()) return;
  Bf16GemmMeasured m;
  for (int l = 0; l < kMatmulLayouts; ++l) m.path[l] = static_cast<Bf16GemmPath>(static_cast<int>(path[l]));
  m.source = "rank 0's choice";
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
