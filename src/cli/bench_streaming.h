// What `lazytrain bench predict` and `bench out-of-core` share: the bench model, a
// profile of this machine measured with the executor's own paths, and running a plan for
// a few steps (optionally training, with the hybrid 8-bit AdamW in the lazy-update hook).
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "exec/streaming_executor.h"
#include "plan/plan_request.h"

namespace lt::cli {

struct StreamingBenchArgs {
  int layers = 8, hidden = 256, seq = 256, batch = 2, steps = 3;
  double emu_gbps = 1.0;  // bench predict: the emu rows' link rate
  // Kernel threads while measuring. One by default: on a shared machine a thread that is
  // descheduled stalls every barrier of the others, and a step's time then says more about
  // the neighbours than about the plan.
  int kernel_threads = 1;
  std::string offload_dir = std::filesystem::temp_directory_path().string();
  std::string trace;
  bool direct_io = true;
  bool windows = false;  // print each row's per-window measured vs planned times
  bool events = false;   // ... and each window's events (copies, waits, compute)
  bool step_times = false;  // print every run's warm-up and measured step times
  bool probe_each = true;   // bench predict: re-measure the profile right before each row
  // The executor's matmul precision in run_plan (and so in measure_layer_times' probe):
  // BF16 reads a bf16 compute copy of the weights, refreshed from the fp32 parameters.
  Precision precision = Precision::F32;
};

ModelConfig bench_model(const StreamingBenchArgs& a);

// A request for the bench model on this machine: fp32 weights, gradients and activations
// (the cpu and emu executors'), memcpy bandwidth for the links, the NVMe store's own
// measured read and write bandwidth, and no optimizer time (host_optimizer_params_per_s
// huge) until the caller measures one. Layer times come from a keep-all step run by
// measure_layer_times.
PlanRequest bench_request(const StreamingBenchArgs& a, const std::string& profile_name);

struct Measured;
// Runs a keep-all plan of the request (no training) and sets req.measured from its
// per-window times; returns that run.
Measured measure_layer_times(PlanRequest& req, const StreamingBenchArgs& a);
// The same on a backend the caller made (bench gpu: cuda), with the request's own
// keep-all plan, which the caller has checked is feasible.
Measured measure_layer_times_on(Backend& backend, PlanRequest& req, const StreamingBenchArgs& a);

struct Measured {
  double step_s = 0;  // the fastest measured step: other processes only ever add time
  size_t peak = 0, arena_planned_peak = 0;
  size_t arena_extent = 0;  // the compute-tier block the executor held: its layout's extent
  double optimizer_s = 0;  // train: the update hook's time in the fastest step
  std::vector<double> warmup_times, step_times;  // every step, in run order
  // The fastest step's windows and events. The profile's layer times come from here, so
  // that a prediction and the measured step it is compared with (also the fastest) are
  // the same statistic: taking them from any other step, on a shared machine, makes every
  // prediction err by that step's noise, all in one direction.
  StreamingStepResult fastest;
};

// Runs a.steps steps (at least `min_steps`) after a warm-up step. emu_gbps < 0: the cpu backend; otherwise emu
// with both links throttled to it (0: none). train: the hybrid 8-bit AdamW updates every
// target in the lazy-update hook (its states paged from NVMe where the plan says).
Measured run_plan(const Plan& plan, const StreamingBenchArgs& a, double emu_gbps = -1, bool train = false,
                  int min_steps = 1);
// The same on a backend the caller made (bench gpu: cuda).
Measured run_plan_on(Backend& backend, const Plan& plan, const StreamingBenchArgs& a, bool train = false,
                     int min_steps = 1);

// The next batch of a bench's token stream, from `state` (the same batches in every run
// that starts from the same state): random ids in [0, vocab), and labels equal to them.
void next_tokens(std::vector<int32_t>& ids, std::vector<int32_t>& labels, int64_t vocab, uint64_t& state);

// The `bench` command that holds both, made by whichever registers first.
CLI::App* bench_command(CLI::App& app);

// Host AdamW throughput of the hybrid 8-bit optimizer on this machine (parameters/s).
double adamw8_params_per_s(int64_t numel);

}  // namespace lt::cli
