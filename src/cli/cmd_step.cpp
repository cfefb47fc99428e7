#include "cli/commands.h"

#include <cstdio>

namespace lt::cli {

void add_step_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("step", "Forward and backward of a tiny generated model (placeholder main job)");
  cmd->callback([] { std::printf("lazytrain: model core not built yet\n"); });
}

}  // namespace lt::cli
