// A bf16 run takes, per matmul layout, the bf16 GEMM path its hardware profile measured as
// faster on this CPU, records the paths in each checkpoint, and a resume keeps the
// recorded paths whatever the profile says by then (train/bf16_gemm_paths.h).
#include "train/bf16_gemm_paths.h"

#include <algorithm>
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

  // A profile measured on another CPU (or kernel level) says nothing about this one.
  const TrainSummary foreign =
      run_training(config("foreign", write_profile(dir.str() + "/c.json", {"x.W^T"}, "another CPU")));
  set_measured_bf16_gemm_paths(std::nullopt);
  nlohmann::json rule;
  for (int l = 0; l < kMatmulLayouts; ++l) {
    const auto layout = static_cast<MatmulLayout>(l);
    rule[matmul_layout_name(layout)] = bf16_gemm_choice(layout).path == Bf16GemmPath::Native ? "native" : "widened";
  }
  EXPECT_EQ(recorded(foreign.checkpoint_dir), rule);
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
