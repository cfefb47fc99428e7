// `lazytrain bench predict`: checks the planner's predictions against real steps (issue 4,
// section 5). It profiles this machine with the executor itself (the per-layer forward,
// backward and head times of a keep-all step; memcpy and NVMe-store bandwidth), plans a
// small model under several policies with that profile, runs each plan on the cpu
// backend with a real NVMe tier, and prints predicted vs measured step time and planned
// vs measured compute-tier peak, for the cpu backend (with the NVMe tier) and the emu
// backend with throttled links. The last line is
//   RESULT predict max_err=<largest relative error> peak_ok=<true|false>
// --windows / --events show where each row's time goes, window by window.
// `lazytrain bench out-of-core` (section 6) trains a model whose state is several times
// the compute budget and reports its step time against the NVMe I/O floor.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/measure.h"
#include "cli/commands.h"
#include "core/aligned_buffer.h"
#include "core/error.h"
#include "core/threads.h"
#include "exec/backend.h"
#include "exec/streaming_executor.h"
#include "memory/host_pool.h"
#include "memory/nvme_store.h"
#include "plan/planner.h"
#include "sim/chrome_trace.h"

namespace lt::cli {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct PredictArgs {
  int layers = 8, hidden = 256, seq = 256, batch = 2, steps = 3;
  double emu_gbps = 1.0;  // the emu rows' link rate
  // Kernel threads while measuring. One by default: on a shared machine a thread that is
  // descheduled stalls every barrier of the others, and a step's time then says more about
  // the neighbours than about the plan.
  int kernel_threads = 1;
  std::string offload_dir = std::filesystem::temp_directory_path().string();
  std::string trace;
  bool direct_io = true;
  bool windows = false;  // print each row's per-window measured vs planned times
  bool events = false;   // ... and each window's events (copies, waits, compute)
};

ModelConfig bench_model(const PredictArgs& a) {
  ModelConfig c;
  c.model_type = "llama";
  c.hidden_size = a.hidden;
  c.num_layers = a.layers;
  c.num_heads = std::max<int64_t>(1, a.hidden / 64);
  c.num_kv_heads = std::max<int64_t>(1, c.num_heads / 2);
  c.head_dim = a.hidden / c.num_heads;
  c.intermediate_size = a.hidden * 8 / 3 / 64 * 64;
  c.vocab_size = 4096;
  c.max_position_embeddings = std::max(4096, a.seq);
  c.torch_dtype = "float32";
  return c;
}

void fill(ModelParameters& p) {
  uint64_t s = 12345;
  for (int64_t i = 0; i < p.numel(); ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    p.data()[i] = 0.04f * (static_cast<float>(s >> 40) / 16777216.0f - 0.5f);
  }
}

struct Measured {
  double step_s = 0;
  size_t peak = 0, arena_planned_peak = 0;
  StreamingStepResult last;
};

// emu_gbps < 0: the cpu backend; otherwise emu with both links throttled to it (0: none).
Measured run_plan(const Plan& plan, const PredictArgs& a, double emu_gbps = -1) {
  const ModelConfig& c = plan.model;
  ModelParameters params(c), grads(c);
  fill(params);
  std::vector<int32_t> ids(plan.batch * plan.seq);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 2654435761u) % c.vocab_size);
  auto backend = emu_gbps < 0 ? make_cpu_backend() : make_emu_backend(emu_gbps, emu_gbps);
  StreamingOptions so;
  so.offload_dir = a.offload_dir;
  so.direct_io = a.direct_io;
  StreamingExecutor ex(plan, *backend, so);
  Measured m;
  std::vector<double> times;
  for (int s = 0; s <= a.steps; ++s) {  // step 0 warms caches and page tables
    m.last = ex.step(params, grads, ids.data(), ids.data());
    if (s > 0) times.push_back(m.last.step_s);
  }
  // The fastest step: other processes on a shared machine only ever add time.
  m.step_s = *std::min_element(times.begin(), times.end());
  m.peak = ex.measured_peak_bytes();
  m.arena_planned_peak = ex.planned_peak_bytes();
  return m;
}

// Per-window medians of a step: F windows give forward_s, HEAD head_s, B windows
// backward_s once the internal recompute (a forward) is taken out of those that rerun it.
MeasuredLayerTimes layer_times(const Measured& m, const Plan& p) {
  std::vector<double> f, b;
  MeasuredLayerTimes t;
  for (const WindowTiming& w : m.last.windows) {
    const double d = w.end_s - w.start_s;
    if (w.name[0] == 'F') f.push_back(d);
    else if (w.name == "HEAD") t.head_s = d;
  }
  t.forward_s = median(f);
  for (size_t i = 0; i < m.last.windows.size() && i < p.windows.size(); ++i) {
    const Window& w = p.windows[i];
    if (w.kind != WindowKind::Backward) continue;
    const bool kept = std::find(p.keep_internals.begin(), p.keep_internals.end(), w.layer) != p.keep_internals.end();
    const double d = m.last.windows[i].end_s - m.last.windows[i].start_s;
    b.push_back(kept ? d : std::max(0.0, d - t.forward_s));
  }
  t.backward_s = median(b);
  return t;
}

double memcpy_bw() {
  const size_t n = size_t{64} << 20;
  AlignedBuffer<std::byte> a(n), b(n);
  std::memset(a.data(), 1, n);
  std::vector<double> t;
  for (int r = 0; r < 5; ++r) {
    auto t0 = Clock::now();
    std::memcpy(b.data(), a.data(), n);
    t.push_back(since(t0));
  }
  return static_cast<double>(n) / median(t);
}

// Read and write bandwidth of the NVMe store itself (io_uring, the executor's path).
std::pair<double, double> nvme_bw(const PredictArgs& a) {
  const size_t n = size_t{64} << 20;
  NvmeStoreOptions o;
  o.dir = a.offload_dir;
  o.direct_io = a.direct_io;
  NvmeStore store({{"bench", n}}, o);
  HostPool pool("bench");
  HostBuffer buf = pool.allocate(n, "bench");
  std::memset(buf.data(), 3, n);
  auto t0 = Clock::now();
  store.wait(store.write(0, 0, buf.data(), n));
  const double w = static_cast<double>(n) / since(t0);
  t0 = Clock::now();
  store.wait(store.read(0, 0, buf.data(), n));
  const double r = static_cast<double>(n) / since(t0);
  return {r, w};
}

// Where a step's time goes: each window's measured length next to what the plan gives it
// (its compute, and each link's bytes over the profile's rate; a window lasts the longest
// of them). "extra" sums what the step spent beyond the plan, window by window.
void print_windows(const StreamingStepResult& r, const Plan& p, bool events) {
  const HardwareProfile& hw = p.hardware;
  double extra = 0;
  std::printf("  %-8s %10s %10s %10s %10s %10s %10s\n", "window", "measured", "planned", "compute", "h2d", "d2h",
              "nvme");
  for (size_t i = 0; i < r.windows.size() && i < p.windows.size(); ++i) {
    const Window& w = p.windows[i];
    double h2d = 0, d2h = 0, nvme = 0;
    for (const Transfer& t : w.transfers) {
      if (t.link == Link::H2D) h2d += t.bytes / hw.h2d_bw;
      else if (t.link == Link::D2H) d2h += t.bytes / hw.d2h_bw;
      else if (t.link == Link::NvmeRead) nvme += t.bytes / hw.nvme_read_bw;
      else nvme += t.bytes / hw.nvme_write_bw;
    }
    const double planned = std::max({w.compute_s, h2d, d2h, nvme});
    const double measured = r.windows[i].end_s - r.windows[i].start_s;
    extra += measured - planned;
    if (events)
      for (const ExecEvent& e : r.events)
        if (e.window == w.name)
          std::printf("      %-24s %-8s %8.2f .. %8.2f ms\n", e.name.c_str(), e.lane.c_str(),
                      (e.start_s - r.windows[i].start_s) * 1e3, (e.end_s - r.windows[i].start_s) * 1e3);
    std::printf("  %-8s %10.2f %10.2f %10.2f %10.2f %10.2f %10.2f  ms\n", w.name.c_str(), measured * 1e3,
                planned * 1e3, w.compute_s * 1e3, h2d * 1e3, d2h * 1e3, nvme * 1e3);
  }
  std::printf("  step %.2f ms, planned %.2f ms, extra over the windows' plan %.2f ms\n", r.step_s * 1e3,
              p.predicted_step_s * 1e3, extra * 1e3);
}

SimResult to_sim(const StreamingStepResult& r) {
  SimResult s;
  s.step_s = r.step_s;
  for (const ExecEvent& e : r.events) {
    SimLane lane = e.lane == "h2d" ? SimLane::H2D
                   : e.lane == "d2h" ? SimLane::D2H
                   : e.lane == "nvme" ? SimLane::Nvme
                   : e.lane == "host" ? SimLane::Host
                                      : SimLane::Compute;
    s.events.push_back({e.name, e.window, lane, e.start_s, e.end_s, e.bytes});
  }
  s.gpu_memory = r.compute_bytes;
  return s;
}

void run_predict(const PredictArgs& a) {
  if (a.kernel_threads > 0) set_num_threads(a.kernel_threads);
  const ModelConfig c = bench_model(a);
  PlanRequest req;
  req.model_name = "bench-llama-" + std::to_string(a.layers) + "x" + std::to_string(a.hidden);
  req.model = c;
  req.batch = a.batch;
  req.seq = a.seq;
  HardwareProfile& hw = req.hardware;
  hw.name = "this machine (bench predict)";
  hw.backend = "cpu";
  hw.act_bytes = 4;  // the cpu and emu executors keep activations in fp32,
  hw.weight_bytes = 4;  // and weights and gradients too
  hw.grad_bytes = 4;
  hw.compute_memory_bytes = hw.default_cap_bytes = 64e9;
  hw.peak_flops = 1e11;  // replaced by measured layer times below
  hw.host_memory_bytes = 64e9;
  hw.host_optimizer_params_per_s = 1e15;  // the bench runs no optimizer
  hw.host_memory_bw = hw.h2d_bw = hw.d2h_bw = memcpy_bw();
  auto [nr, nw] = nvme_bw(a);
  hw.nvme_read_bw = nr;
  hw.nvme_write_bw = nw;
  hw.nvme_capacity_bytes = 16e9;
  std::printf("bench predict: %s, batch %d, seq %d; memcpy %.1f GB/s, NVMe store read %.2f GB/s, write %.2f GB/s\n",
              req.model_name.c_str(), a.batch, a.seq, hw.h2d_bw / 1e9, nr / 1e9, nw / 1e9);

  // Profile: a keep-all step gives the layer times every prediction uses.
  const Plan probe_plan = make_plan(req, "keep-all");
  const Measured probe = run_plan(probe_plan, a);
  req.measured = layer_times(probe, probe_plan);
  std::printf("measured: forward %.2f ms, backward %.2f ms, head %.2f ms per layer step\n",
              req.measured.forward_s * 1e3, req.measured.backward_s * 1e3, req.measured.head_s * 1e3);

  std::vector<Plan> plans;
  for (const char* policy : {"keep-all", "recompute-all", "megatrain"}) plans.push_back(make_plan(req, policy));
  {  // MILP under a tight compute cap and a small host budget, so that NVMe is in play:
     // the tightest cap (in 5% steps of keep-all's peak) that is feasible.
    PlanRequest tight = req;
    const double boundary = static_cast<double>(a.batch) * a.seq * a.hidden * hw.act_bytes;
    tight.cpu_act_budget_bytes = 0.5 * boundary;
    for (double f = 0.5; f <= 1.0; f += 0.05) {
      tight.gpu_cap_bytes = plans[0].predicted_peak.gpu * f;
      Plan p = make_plan(tight, "milp");
      if (p.feasible) {
        plans.push_back(std::move(p));
        break;
      }
    }
  }
  // emu rows: the same plans re-made for links throttled to emu_gbps (the profile counts
  // the fp32 weights, gradients and activations the emu moves).
  PlanRequest emu_req = req;
  emu_req.hardware.h2d_bw = emu_req.hardware.d2h_bw = a.emu_gbps * 1e9;
  emu_req.hardware.backend = "emu";
  struct Row {
    std::string label;
    Plan plan;
    double emu = -1;
  };
  std::vector<Row> rows;
  for (const Plan& p : plans) rows.push_back({"cpu " + p.policy, p});
  for (const char* policy : {"keep-all", "megatrain", "milp"})
    rows.push_back({"emu " + std::string(policy), make_plan(emu_req, policy), a.emu_gbps});
  std::printf("%-20s %12s %12s %8s %14s %14s\n", "plan", "predicted_s", "measured_s", "error", "planned_peak",
              "measured_peak");
  double max_err = 0;
  bool peak_ok = true;
  for (const Row& row : rows) {
    const Plan& p = row.plan;
    if (!p.feasible) {
      std::printf("%-20s infeasible: %s\n", row.label.c_str(), p.infeasible_reason.c_str());
      continue;
    }
    const Measured m = run_plan(p, a, row.emu);
    const double err = std::abs(m.step_s - p.predicted_step_s) / m.step_s;
    max_err = std::max(max_err, err);
    peak_ok = peak_ok && static_cast<double>(m.peak) <= p.predicted_peak.gpu;
    const Plan::TierCounts tc = p.tier_counts();
    std::printf("%-20s %12.4f %12.4f %7.1f%% %14.0f %14zu   (gpu %.1f cpu %.1f nvme %.1f rc %.0f)\n",
                row.label.c_str(), p.predicted_step_s, m.step_s, 100 * err, p.predicted_peak.gpu, m.peak, tc.gpu,
                tc.cpu, tc.nvme, tc.recompute);
    if (a.windows || a.events) print_windows(m.last, p, a.events);
    if (!a.trace.empty() && &row == &rows.back()) write_chrome_trace(to_sim(m.last), p, a.trace);
  }
  std::printf("RESULT predict max_err=%.3f peak_ok=%s\n", max_err, peak_ok ? "true" : "false");
}

struct OutOfCoreArgs {
  PredictArgs base;
  double cap_fraction = 0.35;
};

// Section 6 of issue 4: a model whose training state (fp32 weights, gradients, two AdamW
// moments, and every activation a keep-all step holds) is several times the compute-tier
// budget, planned by the MILP with a host budget of one boundary, so checkpoints go to
// NVMe or are recomputed as it decides; run on the cpu backend. Reports the step time
// against the I/O-bound floor: the NVMe bytes the step moves over the store's measured
// bandwidth (writes at the write rate plus reads at the read rate: one disk).
void run_out_of_core(const OutOfCoreArgs& o) {
  const PredictArgs& a = o.base;
  set_num_threads(a.kernel_threads);
  const ModelConfig c = bench_model(a);
  PlanRequest req;
  req.model_name = "bench-llama-" + std::to_string(a.layers) + "x" + std::to_string(a.hidden);
  req.model = c;
  req.batch = a.batch;
  req.seq = a.seq;
  req.time_limit_s = 20;
  HardwareProfile& hw = req.hardware;
  hw.name = "this machine (bench out-of-core)";
  hw.backend = "cpu";
  hw.act_bytes = 4;
  hw.weight_bytes = 4;
  hw.grad_bytes = 4;
  hw.compute_memory_bytes = hw.default_cap_bytes = 64e9;
  hw.peak_flops = 1e11;
  hw.host_memory_bytes = 64e9;
  hw.host_optimizer_params_per_s = 1e15;
  hw.host_memory_bw = hw.h2d_bw = hw.d2h_bw = memcpy_bw();
  auto [nr, nw] = nvme_bw(a);
  hw.nvme_read_bw = nr;
  hw.nvme_write_bw = nw;
  hw.nvme_capacity_bytes = 16e9;
  const Plan probe_plan = make_plan(req, "keep-all");
  const Measured probe = run_plan(probe_plan, a);
  req.measured = layer_times(probe, probe_plan);

  const double boundary = static_cast<double>(a.batch) * a.seq * a.hidden * hw.act_bytes;
  req.cpu_act_budget_bytes = boundary;
  Plan plan;
  for (double f = o.cap_fraction; f <= 1.0; f += 0.05) {
    req.gpu_cap_bytes = probe_plan.predicted_peak.gpu * f;
    plan = make_plan(req, "milp");
    if (plan.feasible) break;
  }
  if (!plan.feasible) {
    std::printf("RESULT out-of-core infeasible: %s\n", plan.infeasible_reason.c_str());
    return;
  }
  const Measured m = run_plan(plan, a);
  const Measured in_memory = probe;
  const ModelParameters probe_params(c);
  const double state = static_cast<double>(probe_params.numel()) * 16 + static_cast<double>(probe.arena_planned_peak);
  const double budget = static_cast<double>(m.arena_planned_peak);
  double wbytes = 0, rbytes = 0;
  for (const ExecEvent& e : m.last.events)
    if (e.lane == "nvme") (e.name.find("write") != std::string::npos ? wbytes : rbytes) += e.bytes;
  const double floor_s = wbytes / nw + rbytes / nr;
  const Plan::TierCounts tc = plan.tier_counts();
  std::printf("bench out-of-core: %s, batch %d, seq %d; NVMe store read %.2f GB/s, write %.2f GB/s\n",
              req.model_name.c_str(), a.batch, a.seq, nr / 1e9, nw / 1e9);
  std::printf("training state %.1f MiB (fp32 weights+grads+2 moments %.1f MiB, keep-all activations %.1f MiB), "
              "compute budget %.1f MiB: %.1fx\n",
              state / 1048576, probe_params.numel() * 16 / 1048576.0, probe.arena_planned_peak / 1048576.0,
              budget / 1048576, state / budget);
  std::printf("plan: boundaries gpu %.1f cpu %.1f nvme %.1f recomputed %.0f; predicted %.4f s\n", tc.gpu, tc.cpu,
              tc.nvme, tc.recompute, plan.predicted_step_s);
  std::printf("NVMe per step: wrote %.1f MiB, read %.1f MiB; I/O floor %.4f s\n", wbytes / 1048576,
              rbytes / 1048576, floor_s);
  std::printf("step: out-of-core %.4f s, in-memory keep-all %.4f s; measured peak %zu <= budget %.0f: %s\n",
              m.step_s, in_memory.step_s, m.peak, budget, static_cast<double>(m.peak) <= budget ? "yes" : "NO");
  std::printf("RESULT out-of-core step_s=%.4f io_floor_s=%.4f ratio=%.2f state_over_budget=%.1f\n", m.step_s,
              floor_s, floor_s > 0 ? m.step_s / floor_s : 0.0, state / budget);
}

}  // namespace

void add_bench_predict_command(CLI::App& app) {
  auto bench = app.get_subcommands([](CLI::App* s) { return s->get_name() == "bench"; });
  CLI::App* parent = bench.empty() ? app.add_subcommand("bench", "Benchmarks that check the product") : bench[0];
  parent->require_subcommand(1);
  auto a = std::make_shared<PredictArgs>();
  CLI::App* cmd = parent->add_subcommand("predict", "Planner predictions vs real steps on this machine");
  cmd->add_option("--layers", a->layers, "decoder layers of the bench model");
  cmd->add_option("--hidden", a->hidden, "hidden size of the bench model");
  cmd->add_option("--seq", a->seq, "sequence length");
  cmd->add_option("--batch", a->batch, "batch size");
  cmd->add_option("--steps", a->steps, "measured steps per plan (the fastest counts)");
  cmd->add_option("--emu-gbps", a->emu_gbps, "link rate of the emu rows, GB/s");
  cmd->add_option("--kernel-threads", a->kernel_threads, "kernel threads while measuring (0: --threads)");
  cmd->add_option("--offload-dir", a->offload_dir, "directory for the NVMe tier");
  cmd->add_option("--trace", a->trace, "Chrome trace of the last plan's real step");
  cmd->add_flag("!--no-direct-io", a->direct_io, "buffered I/O (filesystems without O_DIRECT)");
  cmd->add_flag("--windows", a->windows, "per-window measured vs planned times of every row");
  cmd->add_flag("--events", a->events, "--windows, with each window's events");
  cmd->callback([a] { run_predict(*a); });

  auto o = std::make_shared<OutOfCoreArgs>();
  CLI::App* ooc = parent->add_subcommand("out-of-core",
                                         "Train a model whose state is several times the compute budget; "
                                         "step time vs the NVMe I/O floor");
  ooc->add_option("--layers", o->base.layers, "decoder layers of the bench model");
  ooc->add_option("--hidden", o->base.hidden, "hidden size of the bench model");
  ooc->add_option("--seq", o->base.seq, "sequence length");
  ooc->add_option("--batch", o->base.batch, "batch size");
  ooc->add_option("--steps", o->base.steps, "measured steps (the fastest counts)");
  ooc->add_option("--cap-fraction", o->cap_fraction, "compute budget as a fraction of a keep-all step's peak");
  ooc->add_option("--offload-dir", o->base.offload_dir, "directory for the NVMe tier");
  ooc->add_flag("!--no-direct-io", o->base.direct_io, "buffered I/O (filesystems without O_DIRECT)");
  ooc->callback([o] { run_out_of_core(*o); });
}

}  // namespace lt::cli
