// A bf16 run takes, per matmul layout, the bf16 GEMM path its hardware profile measured as
// faster on this CPU, records the paths in each checkpoint, and a resume keeps the
// recorded paths whatever the profile says by then (train/bf16_gemm_paths.h).
#include "train/bf16_gemm_paths.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/cpu_features.h"
#include "kernels/cpu/matmul.h"
#include "plan/hardware_profile.h"
#include "train/trainer.h"
#include "test_util.h"
#include "train_test_util.h"

namespace lt {
namespace {

// The h800 profile as if `lazytrain profile` had measured this CPU's bf16 paths: native
// faster for the layouts in native_for, widened for the others (or another CPU's).
std::string write_profile(const std::string& path, const std::vector<std::string>& native_for,
                          const std::string& cpu = cpu_summary()) {
  HardwareProfile hw = load_hardware_profile("h800");
  hw.cpu = cpu;
  for (int l = 0; l < kMatmulLayouts; ++l) {
    const std::string name = matmul_layout_name(static_cast<MatmulLayout>(l));
    const bool native = std::find(native_for.begin(), native_for.end(), name) != native_for.end();
    hw.bf16_gemm_rates[name] = {native ? 400.0 : 100.0, native ? 100.0 : 400.0};
  }
  std::ofstream(path) << hardware_profile_to_json(hw).dump(2);
  return path;
}

nlohmann::json recorded(const std::string& checkpoint) {
  return nlohmann::json::parse(test::read_file(checkpoint + "/trainer_state.json")).at("bf16_gemm");
}

TEST(Bf16GemmPaths, ARunTakesTheProfilesFasterPathsAndItsResumeKeepsThem) {
  if (active_isa() < Isa::Avx512) GTEST_SKIP() << "kernels below the avx512 level: every bf16 matmul widens";
  if (const char* e = std::getenv("LT_BF16_GEMM"); e && *e) GTEST_SKIP() << "LT_BF16_GEMM fixes the path";
  test::TempDir dir("bf16-gemm-paths");
  const std::string a = write_profile(dir.str() + "/a.json", {"x.W^T"});
  const std::string b = write_profile(dir.str() + "/b.json", {"dy.W", "dy^T.x"});
  const nlohmann::json a_paths = {{"x.W^T", "native"}, {"dy.W", "widened"}, {"dy^T.x", "widened"}};
  const nlohmann::json b_paths = {{"x.W^T", "widened"}, {"dy.W", "native"}, {"dy^T.x", "native"}};
  auto config = [&](const std::string& out, const std::string& profile) {
    TrainConfig c = test::tiny_config(dir.str() + "/" + out);
    c.precision = "bf16";
    c.hardware = profile;
    return c;
  };
  const TrainSummary straight = run_training(config("straight", a));
  EXPECT_EQ(recorded(straight.checkpoint_dir), a_paths);
  EXPECT_NE(matmul_bf16_path().find("measured by lazytrain profile"), std::string::npos) << matmul_bf16_path();
  const TrainSummary other = run_training(config("other", b));
  EXPECT_EQ(recorded(other.checkpoint_dir), b_paths);
  // The paths sum in other orders: the resume below would show a switch.
  ASSERT_NE(test::final_weights(straight.checkpoint_dir), test::final_weights(other.checkpoint_dir));

  // Ten steps with profile a, then a resume while the profile says b: a's paths, a's bits.
  TrainConfig first = config("split", a);
  first.save_every = 10;
  run_training(first);
  std::filesystem::remove_all(first.output_dir + "/checkpoint-000020");
  TrainConfig second = config("split", b);
  second.save_every = 10;
  second.resume = true;
  const TrainSummary resumed = run_training(second);
  EXPECT_EQ(recorded(resumed.checkpoint_dir), a_paths);
  EXPECT_EQ(test::final_weights(resumed.checkpoint_dir), test::final_weights(straight.checkpoint_dir));

  // A profile measured on another CPU (or kernel level) says nothing about this one: the
  // paths measured at startup (or the rule, where nothing is measured).
  const TrainSummary foreign =
      run_training(config("foreign", write_profile(dir.str() + "/c.json", {"x.W^T"}, "another CPU")));
  const std::optional<std::vector<Bf16PathRates>> rates = startup_bf16_gemm_rates();
  if (rates) {
    EXPECT_NE(matmul_bf16_path().find("measured at first use"), std::string::npos) << matmul_bf16_path();
  }
  set_measured_bf16_gemm_paths(std::nullopt);
  nlohmann::json expected;
  for (int l = 0; l < kMatmulLayouts; ++l) {
    const auto layout = static_cast<MatmulLayout>(l);
    const bool native = rates ? (*rates)[l].native >= kStartupNativeMargin * (*rates)[l].widened
                              : bf16_gemm_choice(layout).path == Bf16GemmPath::Native;
    expected[matmul_layout_name(layout)] = native ? "native" : "widened";
  }
  EXPECT_EQ(recorded(foreign.checkpoint_dir), expected);
}

// Without a profile of this CPU a bf16 run measures both paths at startup where oneDNN has
// a bf16 matmul of its own (once per process), and takes the faster by the margin.
TEST(Bf16GemmPaths, WithoutAProfileABf16RunMeasuresAtStartup) {
  if (active_isa() < Isa::Avx512) GTEST_SKIP() << "kernels below the avx512 level: every bf16 matmul widens";
  if (const char* e = std::getenv("LT_BF16_GEMM"); e && *e) GTEST_SKIP() << "LT_BF16_GEMM fixes the path";
  const CpuFeatures& f = cpu_features();
  const std::optional<std::vector<Bf16PathRates>> rates = startup_bf16_gemm_rates();
  if (!f.avx512bf16 && !f.amx_bf16) {
    EXPECT_FALSE(rates) << "measured, though oneDNN has no bf16 matmul of its own on this CPU";
    GTEST_SKIP() << "no AVX512-BF16 or AMX-BF16: the rule (widened), nothing to measure";
  }
  ASSERT_TRUE(rates);
  ASSERT_EQ(rates->size(), static_cast<size_t>(kMatmulLayouts));
  for (const Bf16PathRates& r : *rates) {
    EXPECT_GT(r.native, 0) << r.layout;
    EXPECT_GT(r.widened, 0) << r.layout;
    std::printf("startup measurement %s: native %.0f, widened %.0f GFLOP/s\n", r.layout, r.native, r.widened);
  }
  EXPECT_EQ(startup_bf16_gemm_rates()->front().native, rates->front().native) << "measured again";
  // Cached for later runs on this machine (unless there is no writable cache directory).
  if (const std::string file = bf16_gemm_cache_file(); !file.empty() && std::filesystem::exists(file)) {
    const nlohmann::json cache = nlohmann::json::parse(test::read_file(file));
    ASSERT_TRUE(cache.contains(cpu_summary())) << file;
    for (const Bf16PathRates& r : *rates)
      EXPECT_EQ(cache.at(cpu_summary()).at(r.layout).at("native_gflops").get<double>(), r.native) << r.layout;
  }
  choose_bf16_gemm_paths("no-such-profile", nullptr, "", /*bf16_run=*/true);
  for (int l = 0; l < kMatmulLayouts; ++l) {
    const Bf16GemmChoice c = bf16_gemm_choice(static_cast<MatmulLayout>(l));
    const Bf16PathRates& r = (*rates)[l];
    EXPECT_EQ(c.path == Bf16GemmPath::Native, r.native >= kStartupNativeMargin * r.widened) << r.layout;
    EXPECT_NE(c.reason.find("measured at first use"), std::string::npos) << c.reason;
  }
  // An fp32 run measures nothing and keeps the rule.
  choose_bf16_gemm_paths("no-such-profile", nullptr, "", /*bf16_run=*/false);
  EXPECT_EQ(bf16_gemm_choice(MatmulLayout::Forward).reason.find("measured at first use"), std::string::npos);
  set_measured_bf16_gemm_paths(std::nullopt);
}

// Each layout's matmuls take its own measured path.
TEST(Bf16GemmPaths, EachLayoutTakesItsOwnPath) {
  if (active_isa() < Isa::Avx512) GTEST_SKIP() << "kernels below the avx512 level: every bf16 matmul widens";
  if (const char* e = std::getenv("LT_BF16_GEMM"); e && *e) GTEST_SKIP() << "LT_BF16_GEMM fixes the path";
  Bf16GemmMeasured m{{Bf16GemmPath::Native, Bf16GemmPath::Widened, Bf16GemmPath::Native}, "this test"};
  set_measured_bf16_gemm_paths(m);
  MatmulContext ctx;
  auto widened = [&](bool trans_a, bool trans_b) {
    return ctx.impl_name(64, 64, 64, trans_a, trans_b, Precision::BF16).find("widened") != std::string::npos;
  };
  const bool forward_widened = widened(false, true), input_widened = widened(false, false),
             weight_widened = widened(true, false);
  set_measured_bf16_gemm_paths(std::nullopt);
  if (forward_widened) GTEST_SKIP() << "oneDNN has no bf16 matmul for this CPU (it widens every product)";
  EXPECT_TRUE(input_widened);
  EXPECT_FALSE(weight_widened);
}

}  // namespace
}  // namespace lt
