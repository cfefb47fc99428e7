// lazytrain: train language models that do not fit in fast memory.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <new>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "core/cpu_features.h"
#include "core/error.h"
#include "core/threads.h"

namespace {
// What `lazytrain` runs with no subcommand.
constexpr const char* kDefaultCommand = "train";
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"lazytrain: train language models that do not fit in fast memory"};
  int threads = 0;
  if (const char* env = std::getenv("LT_THREADS")) threads = std::atoi(env);
  app.add_option("--threads", threads, "CPU threads for kernels (default: all cores; env LT_THREADS)");
  app.parse_complete_callback([&] {
    lt::set_num_threads(threads);
    (void)lt::isa_cap();  // a bad LT_CPU is an error now, not inside the first kernel
  });

  lt::cli::add_train_command(app);
  lt::cli::add_eval_command(app);
  lt::cli::add_generate_command(app);
  lt::cli::add_step_command(app);
  lt::cli::add_plan_command(app);
  lt::cli::add_simulate_command(app);
  lt::cli::add_profile_command(app);
  lt::cli::add_bench_predict_command(app);
  lt::cli::add_bench_out_of_core_command(app);
  lt::cli::add_bench_gpu_command(app);
  lt::cli::add_bench_adapt_command(app);
  lt::cli::add_bench_dp_command(app);
  lt::cli::add_bench_host_budget_command(app);

  try {
    app.parse(argc, argv);
    if (app.get_subcommands().empty()) {
      // No subcommand: the main job on its embedded default.
      app.clear();
      app.parse(std::vector<std::string>{kDefaultCommand});
    }
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const lt::Error& e) {
    std::fprintf(stderr, "lazytrain: error: %s\n", e.what());
    return 1;
  } catch (const std::filesystem::filesystem_error& e) {
    // A file-system call that no caller turned into an lt::Error: the message names the
    // path(s) and the OS's reason.
    std::fprintf(stderr, "lazytrain: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr,
                 "lazytrain: error: out of memory (a size in the flags or the input may be too large; "
                 "lower --batch or --seq-len, or plan with a compute budget)\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lazytrain: internal error: %s (please report it with the command line)\n", e.what());
    return 1;
  } catch (...) {
    std::fprintf(stderr, "lazytrain: internal error: an unknown exception (please report it with the command line)\n");
    return 1;
  }
  return 0;
}
