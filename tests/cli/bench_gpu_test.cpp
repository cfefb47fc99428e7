// `lazytrain bench gpu` without a GPU: the same command on the emu backend (a separate
// compute tier with copy threads, the cuda backend's part that runs here), on a tiny
// Qwen2-shaped model cut to fewer layers, plans and trains with the MILP and the megatrain
// rule under one budget (layer times from a probe step on the backend), and reports both
// rows and its RESULT line with every measured peak within the planned one. Its speed and
// prediction figures are measurements for the reader, not checked here (a benchmark, not a
// timed test). On a GPU, scripts/gpu_check.sh runs it on the cuda backend at the
// Qwen2.5-7B shape.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "exec/backend_cuda.h"
#include "test_util.h"

namespace lt {
namespace {

std::string write_tiny_qwen2(const test::TempDir& dir) {
  const std::string path = dir.str() + "/config.json";
  std::ofstream(path) << R"({"model_type": "qwen2", "hidden_size": 128, "num_hidden_layers": 4,
    "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 384, "vocab_size": 1024,
    "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
    "tie_word_embeddings": false})";
  return path;
}

std::string bench_gpu(const std::string& flags) {
  return "timeout 300 '" + std::string(LT_BINARY_DIR) + "/lazytrain' --threads 1 bench gpu " + flags + " 2>&1";
}

TEST(BenchGpu, RunsBothPlansOnTheEmuBackendAndReports) {
  test::TempDir dir("bench_gpu");
  const std::string model = write_tiny_qwen2(dir);
  const test::ShellResult r = test::run_shell(
      bench_gpu("--backend emu --model " + model + " --layers 2 --seq 32 --compute-budget-gb 0.004 --steps 2 "
                "--max-batch 4 --offload-dir " + dir.str() + " --no-direct-io"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("(2 layers) on the emu backend"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rates (emu, measured now)"), std::string::npos) << r.output;
  // The plans' layer times are measured on the backend before planning.
  EXPECT_NE(r.output.find("layer times (probe: keep-all step of 2 layers on the backend)"), std::string::npos)
      << r.output;
  for (const char* row : {"\nmilp ", "\nmegatrain "}) EXPECT_NE(r.output.find(row), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("RESULT gpu tflops_milp="), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("peak_ok=true"), std::string::npos) << r.output;
}

TEST(BenchGpu, WhatItCannotRunIsAClearError) {
  test::TempDir dir("bench_gpu_errors");
  const std::string model = write_tiny_qwen2(dir);
  const std::string base = "--model " + model + " --seq 32 --offload-dir " + dir.str() + " --no-direct-io ";
  const test::ShellResult no_budget = test::run_shell(bench_gpu(base + "--backend emu"));
  EXPECT_NE(no_budget.exit_code, 0);
  EXPECT_NE(no_budget.output.find("give --compute-budget-gb"), std::string::npos) << no_budget.output;
  const test::ShellResult precision = test::run_shell(bench_gpu(base + "--backend emu --precision fp16"));
  EXPECT_NE(precision.exit_code, 0);
  EXPECT_NE(precision.output.find("unknown precision 'fp16' (in --precision)"), std::string::npos)
      << precision.output;
  EXPECT_NE(precision.output.find("use bf16 or f32"), std::string::npos)  // as train and step spell it
      << precision.output;
  // The cuda backend where it cannot run: its reason (no CUDA, no device, or no trial asked for).
  if (const std::string why = cuda_backend_unavailable_reason(); !why.empty()) {
    const test::ShellResult cuda = test::run_shell(bench_gpu(base + "--backend cuda"));
    EXPECT_NE(cuda.exit_code, 0);
    EXPECT_NE(cuda.output.find(why), std::string::npos) << cuda.output;
  }
}

}  // namespace
}  // namespace lt
