// Each `lazytrain` subcommand lives in its own cli/cmd_*.cpp and registers itself on the
// app through one of these functions (called from main.cpp, in help order).
#pragma once

#include <CLI/CLI.hpp>

namespace lt::cli {

// The main job: `lazytrain` with no subcommand runs it on its embedded default.
void add_step_command(CLI::App& app);
// Helpers' subcommands are added here, one line each.

}  // namespace lt::cli
