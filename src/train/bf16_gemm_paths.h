// Which bf16 GEMM path each matmul layout takes in a training run (kernels/cpu/matmul.h:
// native bf16, or bf16 widened to fp32). Fixed for the run so that its results are
// reproducible: the path the resumed checkpoint recorded (a resume computes as the run it
// continues, even after the machine was profiled again), else the faster one as the
// hardware profile measured it on this CPU (`lazytrain profile`), else, for a bf16 run on
// a CPU where oneDNN has a bf16 matmul of its own (AVX512-BF16 or AMX-BF16 at the avx512
// level), the faster one as measured at its first use on this machine (about a fifth of a
// second, then cached per CPU and kernel level in bf16_gemm_cache_file(), so that every
// later run takes the same paths; native only where it is at least kStartupNativeMargin
// faster), else the rule (kernels/cpu/matmul.h). The rule alone was wrong for some CPUs:
// an AMD Zen 4 (AVX512-BF16, no AMX) runs oneDNN's native bf16 GEMM at 1.8x its fp32 one,
// where the Intel CPU of issue 31 ran it at 0.6x. Data-parallel ranks take rank 0's
// choice (the trainer broadcasts it).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dist/communicator.h"

namespace lt {

// Applies the run's choice to the process (LT_BF16_GEMM still wins over it). `hardware`:
// the run's profile name or file (absent or unreadable: no measurement); resumed: the
// trainer state of the checkpoint the run continues from (null: none) and its directory;
// bf16_run: whether the run's matmuls are bf16 (an fp32 run measures nothing at startup).
void choose_bf16_gemm_paths(const std::string& hardware, const nlohmann::json* resumed = nullptr,
                            const std::string& resumed_dir = "", bool bf16_run = true);

// The startup measurement's margin: native where it runs at least this much faster.
constexpr double kStartupNativeMargin = 1.1;

// Both bf16 paths side by side at a linear layer's three layouts: an n x n x n product of
// bf16 operands (as the step has them), GFLOP/s over `reps` runs of each after a warm-up,
// the two paths interleaved, the median (best: the largest, what the path reaches when
// nothing else runs), in MatmulLayout order. Clears set_bf16_gemm_path.
struct Bf16PathRates {
  const char* layout;
  double native = 0, widened = 0;
};
std::vector<Bf16PathRates> measure_bf16_gemm_paths(int64_t n, int reps, bool best = false);

// The first-use measurement's cache: $LT_CACHE_DIR/bf16-gemm-paths.json, else
// $XDG_CACHE_HOME/lazytrain/..., else ~/.cache/lazytrain/... ("" without a home). One
// entry per CPU and kernel level (cpu_summary()); delete it to measure again.
std::string bf16_gemm_cache_file();

// This CPU's first-use rates (from the cache, else measured now and cached; read once per
// process), or nullopt where nothing is measured (oneDNN has no bf16 matmul of its own
// here, or LT_BF16_GEMM fixes the path).
std::optional<std::vector<Bf16PathRates>> startup_bf16_gemm_rates();

// Data parallelism: every rank takes rank 0's paths (the ranks' results must agree bit for
// bit), which rank 0 chose with choose_bf16_gemm_paths before this call; the others call
// only this (they do not measure beside it).
void take_rank0_bf16_gemm_paths(Communicator& comm);

// What each layout takes now, for a checkpoint's trainer state:
// {"x.W^T": "native" | "widened", "dy.W": ..., "dy^T.x": ...}.
nlohmann::json bf16_gemm_paths_in_use();

}  // namespace lt
