// Which bf16 GEMM path each matmul layout takes in a training run (kernels/cpu/matmul.h:
// native bf16, or bf16 widened to fp32). Fixed for the run so that its results are
// reproducible: the path the resumed checkpoint recorded (a resume computes as the run it
// continues, even after the machine was profiled again), else the faster one as the
// hardware profile measured it on this CPU (`lazytrain profile`), else the rule.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace lt {

// Applies the run's choice to the process (LT_BF16_GEMM still wins over it). `hardware`:
// the run's profile name or file (absent or unreadable: no measurement); resumed: the
// trainer state of the checkpoint the run continues from (null: none) and its directory.
void choose_bf16_gemm_paths(const std::string& hardware, const nlohmann::json* resumed = nullptr,
                            const std::string& resumed_dir = "");

// What each layout takes now, for a checkpoint's trainer state:
// {"x.W^T": "native" | "widened", "dy.W": ..., "dy^T.x": ...}.
nlohmann::json bf16_gemm_paths_in_use();

}  // namespace lt
