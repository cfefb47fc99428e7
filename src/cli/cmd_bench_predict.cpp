// `lazytrain bench predict`: checks the planner's predictions against real steps (issue 4,
// section 5). It profiles this machine with the executor itself (the per-layer forward,
// backward and head times of a keep-all step; memcpy and NVMe-store bandwidth), plans a
// small model under several policies with that profile, runs each plan on the cpu
// backend with a real NVMe tier, and prints predicted vs measured step time and planned
// vs measured compute-tier peak. The last line is
//   RESULT predict max_err=<largest relative error> peak_ok=<true|false>
// Not yet: the emu backend's throttled rows.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

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

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

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
  hw.act_bytes = 4;  // the cpu executor keeps activations in fp32
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
  // emu rows: the same plans re-made for links throttled to emu_gbps. The emu streams
  // fp32 weights and gradients where the cost model counts 2 bytes per parameter, so the
  // planner is told half the rate (weights dominate the traffic at this size).
  PlanRequest emu_req = req;
  emu_req.hardware.h2d_bw = emu_req.hardware.d2h_bw = a.emu_gbps * 1e9 / 2;
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
    if (!a.trace.empty() && &row == &rows.back()) write_chrome_trace(to_sim(m.last), p, a.trace);
  }
  std::printf("RESULT predict max_err=%.3f peak_ok=%s\n", max_err, peak_ok ? "true" : "false");
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
  cmd->callback([a] { run_predict(*a); });
}

}  // namespace lt::cli
