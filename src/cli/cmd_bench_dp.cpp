// `lazytrain bench dp` (issue 29): data-parallel training on this machine, measured. Runs
// the same from-scratch training three times through this binary: in one process, on
// N ranks under mpirun with the optimizer sharded (the default), and on N ranks with every
// rank holding all of it (--shard-optimizer off); each run uses the same number of cores
// in all (the bench's threads, split among the ranks). Reports per run the tokens per
// second, the bytes each rank hands the others per step, the share of the collective time
// that ran under compute (backward and forward), and the optimizer states rank 0 holds;
// then the same three trainings in PyTorch (bench/dp_peer.py: one process, and N ranks of
// DistributedDataParallel over gloo with AdamW whole on every rank or sharded by
// ZeroRedundancyOptimizer), ours over theirs run for run; last line
//   RESULT dp ranks=N hidden_frac=... state_per_rank_frac=... equal=true|false ...
//          vs_torch_one=... vs_ddp_zero1=... vs_ddp=...   (nan without the peer: the
//          reason is printed)
// With --compute-budget-gb every run streams through a plan for that compute budget (each
// rank's for its rows, planned by rank 0 on the --hardware profile) instead of training in
// memory, on --backend (cpu, or emu: the ranks sum in the compute-tier slots); the RESULT
// line names it (backend=).
// state_per_rank_frac: rank 0's states sharded over those of one process; equal: the
// sharded run's final weights are bitwise the unsharded run's (the sums are the same
// rank-order sums; against one process they differ by summation order only).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/bench_streaming.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/threads.h"
#include "io/atomic_file.h"
#include "plan/plan_json.h"

namespace lt::cli {
namespace {

namespace fs = std::filesystem;

struct DpArgs {
  int ranks = 2;
  int64_t hidden = 256, layers = 8, intermediate = 704, batch = 8, seq = 128, steps = 8;
  double compute_budget_gb = 0;  // > 0: streamed runs
  std::string backend = "cpu";   // the streamed runs' (train --backend)
  std::string hardware;          // the profile to plan with ("": train's default)
  std::string output_dir = "runs/bench-dp";
  bool no_peer = false;  // skip the PyTorch peer
};

std::string format_gb(double gb) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g GB", gb);
  return buf;
}

std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');)
    if (!dir.empty() && access((dir + "/" + name).c_str(), X_OK) == 0) return dir + "/" + name;
  return {};
}

struct RunResult {
  nlohmann::json summary;
  std::string weights;  // the final checkpoint's model.safetensors, bytes
};

// Runs `command` (its output to dir.log), then reads dir's summary and final weights.
RunResult run_training_command(const std::string& command, const std::string& dir, int64_t steps) {
  const std::string log = dir + ".log";
  std::printf("  %s\n", command.c_str());
  std::fflush(stdout);
  const int rc = std::system((command + " > " + log + " 2>&1").c_str());
  if (rc != 0) {
    std::string text = read_text_file(log);
    if (text.size() > 4000) text = "..." + text.substr(text.size() - 4000);
    throw Error("the training run failed (status " + std::to_string(rc) + "):\n" + text, log,
                "run the command above by hand to see why");
  }
  char ck[32];
  std::snprintf(ck, sizeof ck, "/checkpoint-%06lld", static_cast<long long>(steps));
  return {nlohmann::json::parse(read_text_file(dir + "/summary.json")),
          read_text_file(dir + ck + "/model.safetensors")};
}

// What follows `prefix` on the first line of a run's log that has it ("" when none does).
std::string startup_line(const std::string& log, const std::string& prefix) {
  std::istringstream lines(read_text_file(log));
  for (std::string line; std::getline(lines, line);)
    if (const size_t at = line.find(prefix); at != std::string::npos) return line.substr(at + prefix.size());
  return {};
}

void print_run(const char* name, const RunResult& r) {
  const nlohmann::json& s = r.summary;
  std::printf("%-28s %9.0f tok/s  %10.0f bytes/step/rank  hidden %5.1f%%  rank 0 optimizer states %lld bytes  "
              "final loss %.6f\n",
              name, s.at("tokens_per_s").get<double>(), s.at("collective_bytes_per_step").get<double>(),
              100 * s.at("collective_hidden_frac").get<double>(),
              static_cast<long long>(s.at("optimizer_state_bytes").get<int64_t>()), s.at("final_loss").get<double>());
}

// The PyTorch peer (bench/dp_peer.py): DistributedDataParallel over gloo with AdamW whole on
// every rank, or sharded by ZeroRedundancyOptimizer, on the one-process run's config.json.
// Its JSON line, or null with the reason when no Python with torch and transformers is at
// hand (LT_PYTHON, else the source tree's .venv).
struct Peer {
  nlohmann::json one, unsharded, sharded;
  std::string unavailable;  // why there is no peer ("" when there is one)
};

nlohmann::json run_peer(const std::string& python, const std::string& args, const std::string& log) {
  const std::string command = python + " " + LT_SOURCE_DIR "/bench/dp_peer.py " + args + " 2> " + log;
  std::printf("  %s\n", command.c_str());
  std::fflush(stdout);
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return nullptr;
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  if (pclose(pipe) != 0) return nullptr;
  const size_t start = out.rfind('{');
  return start == std::string::npos ? nullptr : nlohmann::json::parse(out.substr(start), nullptr, false);
}

Peer run_peers(const DpArgs& a, int threads, int per_rank) {
  Peer p;
  if (a.no_peer) {
    p.unavailable = "--no-peer";
    return p;
  }
  const char* env = std::getenv("LT_PYTHON");
  const std::string python = env ? env : LT_SOURCE_DIR "/.venv/bin/python";
  if (access(python.c_str(), X_OK) != 0) {
    p.unavailable = "no Python at " + python + " (set LT_PYTHON, or run scripts/setup.sh --test)";
    return p;
  }
  char ck[48];
  std::snprintf(ck, sizeof ck, "/one/checkpoint-%06lld/config.json", static_cast<long long>(a.steps));
  const std::string common = "--config " + a.output_dir + ck + " --batch " + std::to_string(a.batch) + " --seq " +
                             std::to_string(a.seq) + " --steps " + std::to_string(a.steps);
  const std::string ranks = " --ranks " + std::to_string(a.ranks) + " --threads " + std::to_string(per_rank);
  p.one = run_peer(python, common + " --threads " + std::to_string(threads), a.output_dir + "/peer-one.log");
  p.unsharded = run_peer(python, common + ranks, a.output_dir + "/peer-unsharded.log");
  p.sharded = run_peer(python, common + ranks + " --sharded", a.output_dir + "/peer-sharded.log");
  for (const nlohmann::json* j : {&p.one, &p.unsharded, &p.sharded})
    if (j->is_null() || j->is_discarded() || !j->contains("tokens_per_s")) {
      p.unavailable = "a PyTorch peer run failed (" + a.output_dir + "/peer-*.log says why)";
      break;
    }
  return p;
}

void run_dp(const DpArgs& a) {
  if (a.ranks < 2) throw Error("--ranks " + std::to_string(a.ranks) + " is below 2", "bench dp", "pass --ranks 2 or more");
  if (a.backend != "cpu" && !(a.compute_budget_gb > 0))
    throw Error("--backend " + a.backend + " streams through a plan, and there is none", "bench dp",
                "give --compute-budget-gb G as well");
  const std::string mpirun = find_on_path("mpirun");
  if (mpirun.empty())
    throw Error("no mpirun on PATH", "bench dp", "install Open MPI (apt-get install openmpi-bin libopenmpi-dev)");
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  if (geteuid() == 0) {  // Open MPI refuses root without both
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  }
  fs::remove_all(a.output_dir);
  fs::create_directories(a.output_dir);
  const int threads = num_threads(), per_rank = std::max(1, threads / a.ranks);
  const std::string flags =
      " train --scratch-hidden " + std::to_string(a.hidden) + " --scratch-layers " + std::to_string(a.layers) +
      " --scratch-heads 8 --scratch-kv-heads 4 --scratch-intermediate " + std::to_string(a.intermediate) +
      " --seq-len " + std::to_string(a.seq) + " --batch " + std::to_string(a.batch) + " --steps " +
      std::to_string(a.steps) + " --warmup-steps 0 --eval-problems 0 --log-every " + std::to_string(a.steps) +
      (a.compute_budget_gb > 0 ? " --compute-budget-gb " + std::to_string(a.compute_budget_gb) + " --backend " + a.backend
                               : std::string()) +
      (a.hardware.empty() ? std::string() : " --hardware " + a.hardware);
  auto out = [&](const std::string& name) {
    const std::string dir = a.output_dir + "/" + name;
    return " --output-dir " + dir + " --summary-json " + dir + "/summary.json";
  };
  const std::string ranks = std::to_string(a.ranks);
  // --bind-to none: Open MPI would bind each of two ranks to one core.
  const std::string launch = mpirun + " -np " + ranks + " --oversubscribe --bind-to none " + self +
                             " --threads " + std::to_string(per_rank);
  std::printf("bench dp: a %lld-layer from-scratch llama (hidden %lld), batch %lld x seq %lld, %lld steps, %s; %d "
              "threads in all (%d per rank on %s ranks)\n",
              static_cast<long long>(a.layers), static_cast<long long>(a.hidden), static_cast<long long>(a.batch),
              static_cast<long long>(a.seq), static_cast<long long>(a.steps),
              a.compute_budget_gb > 0 ? ("streamed on the " + a.backend + " backend (a plan for " +
                                         format_gb(a.compute_budget_gb) + " of compute tier per process)")
                                            .c_str()
                                      : "in memory",
              threads, per_rank, ranks.c_str());
  const RunResult one =
      run_training_command(self + " --threads " + std::to_string(threads) + flags + out("one"), a.output_dir + "/one",
                           a.steps);
  const RunResult sharded = run_training_command(launch + flags + out("sharded"), a.output_dir + "/sharded", a.steps);
  const RunResult whole = run_training_command(launch + flags + out("unsharded") + " --shard-optimizer off",
                                               a.output_dir + "/unsharded", a.steps);
  const Peer peer = run_peers(a, threads, per_rank);
  // Where the ranks summed the gradients (train's startup line): on the host after they
  // drain, or in their compute-tier slots before (a separate compute tier, emu or cuda).
  const std::string sums = startup_line(a.output_dir + "/sharded.log", "gradient sums over the ranks: ");
  if (!sums.empty()) std::printf("gradient sums over the ranks (sharded run): %s\n", sums.c_str());
  print_run("1 process", one);
  print_run((ranks + " ranks, sharded").c_str(), sharded);
  print_run((ranks + " ranks, unsharded").c_str(), whole);
  // Ours over PyTorch's tokens per second, run for run (nan without a peer).
  double vs_one = NAN, vs_sharded = NAN, vs_unsharded = NAN;
  if (peer.unavailable.empty()) {
    auto ratio = [](const RunResult& ours, const nlohmann::json& theirs) {
      return ours.summary.at("tokens_per_s").get<double>() / theirs.at("tokens_per_s").get<double>();
    };
    vs_one = ratio(one, peer.one);
    vs_sharded = ratio(sharded, peer.sharded);
    vs_unsharded = ratio(whole, peer.unsharded);
    auto show = [](const char* name, const nlohmann::json& j, double vs) {
      const auto state = static_cast<long long>(j.at("optimizer_state_bytes").get<int64_t>());
      std::printf("%-28s %9.0f tok/s  (PyTorch; optimizer states on rank 0 %lld bytes; ours %.2fx)\n", name,
                  j.at("tokens_per_s").get<double>(), state, vs);
    };
    show("torch 1 process", peer.one, vs_one);
    show(("torch DDP " + ranks + " ranks, ZeRO-1").c_str(), peer.sharded, vs_sharded);
    show(("torch DDP " + ranks + " ranks").c_str(), peer.unsharded, vs_unsharded);
  } else {
    std::printf("PyTorch peer skipped: %s\n", peer.unavailable.c_str());
  }
  if (a.compute_budget_gb > 0) {
    // What the planner predicted for each run's step (the ranks' exchange counted, at the
    // link rate rank 0 measured or the profile gives) against the measured one; the plan
    // is in the profile's speeds, so the two agree only on a profile of this machine.
    const double tokens = static_cast<double>(a.batch * a.seq);
    for (const char* run : {"one", "sharded", "unsharded"}) {
      const Plan p = load_plan(a.output_dir + "/" + run + "/plan.json");
      const RunResult& r = std::string(run) == "one" ? one : std::string(run) == "sharded" ? sharded : whole;
      const double measured = tokens / r.summary.at("tokens_per_s").get<double>();
      std::printf("  %-10s plan on %s predicts %.4g s a step (%d rank%s, exchange %s), measured %.4g s (%+.0f%%)\n",
                  run, p.hardware.name.c_str(), p.predicted_step_s, p.ranks, p.ranks > 1 ? "s" : "",
                  p.ranks > 1 ? "counted" : "none", measured, 100 * (measured / p.predicted_step_s - 1));
    }
  }
  const double hidden = sharded.summary.at("collective_hidden_frac").get<double>();
  const double state_frac = sharded.summary.at("optimizer_state_bytes").get<double>() /
                            one.summary.at("optimizer_state_bytes").get<double>();
  const bool equal = sharded.weights == whole.weights;
  const double speedup =
      sharded.summary.at("tokens_per_s").get<double>() / one.summary.at("tokens_per_s").get<double>();
  std::printf("RESULT dp ranks=%d hidden_frac=%.3f state_per_rank_frac=%.3f equal=%s speedup=%.3f "
              "bytes_per_step=%.0f unsharded_hidden_frac=%.3f streamed=%s vs_torch_one=%.3f vs_ddp_zero1=%.3f "
              "vs_ddp=%.3f backend=%s\n",
              a.ranks, hidden, state_frac, equal ? "true" : "false", speedup,
              sharded.summary.at("collective_bytes_per_step").get<double>(),
              whole.summary.at("collective_hidden_frac").get<double>(), a.compute_budget_gb > 0 ? "true" : "false",
              vs_one, vs_sharded, vs_unsharded, a.backend.c_str());
}

}  // namespace

void add_bench_dp_command(CLI::App& app) {
  CLI::App* parent = bench_command(app);
  auto a = std::make_shared<DpArgs>();
  CLI::App* cmd = parent->add_subcommand(
      "dp", "Data-parallel training under mpirun: bytes per step, collective time under compute, optimizer states "
            "per rank, against one process");
  cmd->add_option("--ranks", a->ranks, "MPI ranks (2 or more)");
  cmd->add_option("--hidden", a->hidden, "hidden size of the bench model");
  cmd->add_option("--layers", a->layers, "decoder layers");
  cmd->add_option("--intermediate", a->intermediate, "MLP size");
  cmd->add_option("--batch", a->batch, "global batch (a multiple of --ranks)");
  cmd->add_option("--seq", a->seq, "sequence length");
  cmd->add_option("--steps", a->steps, "training steps per run");
  cmd->add_option("--compute-budget-gb", a->compute_budget_gb,
                  "stream every run through a plan for this compute budget (default: train in memory)");
  cmd->add_option("--backend", a->backend,
                  "the streamed runs' backend (train --backend; emu and cuda sum the gradients in their compute-tier "
                  "slots, needs --compute-budget-gb)");
  cmd->add_option("--hardware", a->hardware, "hardware profile the streamed runs plan with (default: train's)");
  cmd->add_option("--output-dir", a->output_dir, "where the runs write (replaced)");
  cmd->add_flag("--no-peer", a->no_peer,
                "skip the PyTorch peer (DDP over gloo with AdamW, whole and ZeRO-1 sharded; bench/dp_peer.py)");
  cmd->callback([a] { run_dp(*a); });
}

}  // namespace lt::cli
