// Each `lazytrain` subcommand lives in its own cli/cmd_*.cpp and registers itself on the
// app through one of these functions (called from main.cpp, in help order).
#pragma once

#include <CLI/CLI.hpp>

namespace lt::cli {

// The main job: `lazytrain` with no subcommand runs `train` on its embedded default.
void add_train_command(CLI::App& app);
void add_eval_command(CLI::App& app);
void add_generate_command(CLI::App& app);
// Forward + backward of the whole model on a tiny generated model (a quick check).
void add_step_command(CLI::App& app);
// Helpers' subcommands are added here, one line each.
void add_plan_command(CLI::App& app);
void add_simulate_command(CLI::App& app);
void add_profile_command(CLI::App& app);
void add_bench_predict_command(CLI::App& app);
void add_bench_out_of_core_command(CLI::App& app);
void add_bench_gpu_command(CLI::App& app);
void add_bench_adapt_command(CLI::App& app);
void add_bench_dp_command(CLI::App& app);
void add_bench_host_budget_command(CLI::App& app);

}  // namespace lt::cli
