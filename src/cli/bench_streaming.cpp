#include "cli/bench_streaming.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/measure.h"
#include "exec/host_pins.h"
#include "layers/compute_copy.h"
#include "memory/host_pool.h"
#include "memory/nvme_store.h"
#include "optim/adamw.h"
#include "plan/planner.h"
#include "train/updater.h"

namespace lt::cli {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Uniform weights in [-0.02, 0.02): element i from a hash of i (SplitMix64's finalizer),
// so the threads fill their parts independently (a 7B-shaped cut has billions).
void fill(ModelParameters& p) {
  float* data = p.data();
  const int64_t n = p.numel();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    uint64_t z = static_cast<uint64_t>(i) + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    data[i] = 0.04f * (static_cast<float>(z >> 40) / 16777216.0f - 0.5f);
  }
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
std::pair<double, double> nvme_bw(const StreamingBenchArgs& a) {
  const size_t n = size_t{64} << 20;
  NvmeStoreOptions o;
  o.dir = a.offload_dir;
  o.direct_io = a.direct_io;
  NvmeStore store({{"bench", n}}, o);
  HostPool pool("bench");
  HostBuffer buf = pool.allocate(n, "bench");
  std::memset(buf.data(), 3, n);
  // The fastest of three, as the steps it predicts are the fastest of theirs.
  std::vector<double> w, r;
  for (int rep = 0; rep < 3; ++rep) {
    auto t0 = Clock::now();
    store.wait(store.write(0, 0, buf.data(), n));
    w.push_back(since(t0));
    t0 = Clock::now();
    store.wait(store.read(0, 0, buf.data(), n));
    r.push_back(since(t0));
  }
  const double bytes = static_cast<double>(n);
  return {bytes / *std::min_element(r.begin(), r.end()), bytes / *std::min_element(w.begin(), w.end())};
}

// Per-window medians of a step: F windows give forward_s, HEAD head_s, B windows
// backward_s once the internal recompute (a forward) is taken out of those that rerun it.
MeasuredLayerTimes layer_times(const Measured& m, const Plan& p) {
  std::vector<double> f, b;
  MeasuredLayerTimes t;
  for (const WindowTiming& w : m.fastest.windows) {
    const double d = w.end_s - w.start_s;
    if (w.name[0] == 'F') f.push_back(d);
    else if (w.name == "HEAD") t.head_s = d;
  }
  t.forward_s = median(f);
  for (size_t i = 0; i < m.fastest.windows.size() && i < p.windows.size(); ++i) {
    const Window& w = p.windows[i];
    if (w.kind != WindowKind::Backward) continue;
    const bool kept = std::find(p.keep_internals.begin(), p.keep_internals.end(), w.layer) != p.keep_internals.end();
    const double d = m.fastest.windows[i].end_s - m.fastest.windows[i].start_s;
    b.push_back(kept ? d : std::max(0.0, d - t.forward_s));
  }
  t.backward_s = median(b);
  return t;
}

// The trainer's optimizer (hybrid 8-bit AdamW, clipping at norm 1, no weight decay) with
// the plan's paged layers, as `train --plan` runs it.
TrainConfig bench_train_config(int steps) {
  TrainConfig c;
  c.optimizer = "adamw8";
  c.lr = 1e-4;
  c.weight_decay = 0;
  c.warmup_steps = 0;
  c.steps = steps;
  return c;
}

}  // namespace

ModelConfig bench_model(const StreamingBenchArgs& a) {
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

void next_tokens(std::vector<int32_t>& ids, std::vector<int32_t>& labels, int64_t vocab, uint64_t& state) {
  for (int32_t& id : ids) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    id = static_cast<int32_t>((state >> 33) % static_cast<uint64_t>(vocab));
  }
  labels = ids;
}

PlanRequest bench_request(const StreamingBenchArgs& a, const std::string& profile_name) {
  PlanRequest req;
  req.model_name = "bench-llama-" + std::to_string(a.layers) + "x" + std::to_string(a.hidden);
  req.model = bench_model(a);
  req.batch = a.batch;
  req.seq = a.seq;
  HardwareProfile& hw = req.hardware;
  hw.name = profile_name;
  hw.backend = "cpu";
  hw.act_bytes = 4;     // the cpu and emu executors keep activations in fp32,
  hw.weight_bytes = 4;  // and weights and gradients too
  hw.grad_bytes = 4;
  hw.compute_memory_bytes = hw.default_cap_bytes = 64e9;
  hw.peak_flops = 1e11;  // replaced by measured layer times
  hw.host_memory_bytes = 64e9;
  hw.host_optimizer_params_per_s = 1e15;  // no optimizer unless the caller measures one
  hw.host_memory_bw = hw.h2d_bw = hw.d2h_bw = memcpy_bw();
  if (const std::string why = io_uring_unavailable_reason(); !why.empty()) {
    // The NVMe tier runs on io_uring (some sandboxes refuse it): plan without the tier, and
    // say so, rather than fail the bench. Its rates are never used with no capacity.
    std::printf("%s: no NVMe tier here (io_uring: %s): the plans keep everything in memory\n",
                profile_name.c_str(), why.c_str());
    hw.nvme_read_bw = hw.nvme_write_bw = hw.host_memory_bw;
    hw.nvme_capacity_bytes = 0;
  } else {
    auto [nr, nw] = nvme_bw(a);
    hw.nvme_read_bw = nr;
    hw.nvme_write_bw = nw;
    hw.nvme_capacity_bytes = 16e9;
  }
  // The kernels' scratch of a step at a.precision: its plans count what it holds.
  req.scratch = executor_scratch(req.model, req.batch, req.seq, cpu_kernel_table(), a.precision);
  return req;
}

Measured measure_layer_times(PlanRequest& req, const StreamingBenchArgs& a) {
  auto backend = make_cpu_backend();
  return measure_layer_times_on(*backend, req, a);
}

Measured measure_layer_times_on(Backend& backend, PlanRequest& req, const StreamingBenchArgs& a) {
  const Plan probe_plan = make_plan(req, "keep-all");
  // Every prediction rests on this one run, so it gets more steps than a row: the fastest
  // of five is rarely a step that a neighbour's burst slowed.
  Measured probe = run_plan_on(backend, probe_plan, a, false, 5);
  req.measured = layer_times(probe, probe_plan);
  return probe;
}

Measured run_plan(const Plan& plan, const StreamingBenchArgs& a, double emu_gbps, bool train, int min_steps) {
  auto backend = emu_gbps < 0 ? make_cpu_backend() : make_emu_backend(emu_gbps, emu_gbps);
  return run_plan_on(*backend, plan, a, train, min_steps);
}

Measured run_plan_on(Backend& backend, const Plan& plan, const StreamingBenchArgs& a, bool train, int min_steps) {
  const ModelConfig& c = plan.model;
  ModelParameters params(c), grads(c);
  fill(params);
  std::vector<int32_t> ids(plan.batch * plan.seq);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 2654435761u) % c.vocab_size);
  const int steps = std::max(a.steps, min_steps);
  const TrainConfig tc = bench_train_config(steps + 1);
  // Paged states need their size even when nothing trains (the pager still moves them).
  std::unique_ptr<Updater> updater;
  if (train || !plan.nvme_state_layers.empty()) updater = std::make_unique<Updater>(tc, params, plan.nvme_state_layers);
  StreamingOptions so;
  so.offload_dir = a.offload_dir;
  so.direct_io = a.direct_io;
  so.precision = a.precision;
  ComputeCopy copy(a.precision);  // bf16: what the matmuls read (null under fp32)
  copy.refresh(params);
  // What the links copy from and to, page-locked on a GPU as the trainer does it, so the
  // steps overlap their copies as the plan does.
  const HostPins pins = pin_step_memory(backend, params, grads, copy.data(params));
  if (!pins.not_pinned.empty())
    std::fprintf(stderr, "warning: copies from pageable memory: %s\n", pins.not_pinned.c_str());
  if (updater) so.layer_state_bytes = updater->layer_state_bytes();
  StreamingExecutor ex(plan, backend, so);
  Measured m;
  std::vector<double> times;
  double optimizer_s = 0;
  UpdateResult decision;  // the previous step's, applied lazily in this one
  const LazyUpdateHook hook = [&](const UpdateTarget& t, std::span<std::byte> paged) {
    const auto t0 = Clock::now();
    for (auto [offset, n] : target_ranges(params, t))
      updater->update_range(params, grads, offset, n, decision, copy.data(params), paged);
    optimizer_s += since(t0);
  };
  for (int s = 0; s <= steps; ++s) {  // step 0 warms caches and page tables
    StepOptions o;
    o.compute_copy = copy.data(params);
    if (train && s > 0) o.update = &hook;
    optimizer_s = 0;
    StreamingStepResult r = ex.step(params, grads, ids.data(), ids.data(), o);
    if (train) decision = updater->decide(r.grad_sq_sum, s + 1);
    if (s > 0 && (times.empty() || r.step_s < *std::min_element(times.begin(), times.end()))) {
      m.optimizer_s = optimizer_s;
      m.fastest = r;
    }
    if (s > 0) times.push_back(r.step_s);
    else m.warmup_times.push_back(r.step_s);
  }
  m.step_times = times;
  m.step_s = *std::min_element(times.begin(), times.end());
  m.peak = ex.measured_peak_bytes();
  m.arena_planned_peak = ex.planned_peak_bytes();
  m.arena_extent = ex.arena_bytes();
  return m;
}

CLI::App* bench_command(CLI::App& app) {
  auto found = app.get_subcommands([](CLI::App* s) { return s->get_name() == "bench"; });
  if (!found.empty()) return found[0];
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks that check the product");
  bench->require_subcommand(1);
  return bench;
}

double adamw8_params_per_s(int64_t numel) {
  AdamW opt;
  const int id = opt.add_tensor("bench", numel);
  AlignedBuffer<float> p(numel), g(numel);
  std::fill(p.data(), p.data() + numel, 0.01f);
  std::fill(g.data(), g.data() + numel, 0.001f);
  std::vector<double> t;
  for (int r = 1; r <= 5; ++r) {
    const auto t0 = Clock::now();
    opt.step_tensor(id, p.data(), g.data(), nullptr, 1e-4f, 1.0f, r);
    t.push_back(since(t0));
  }
  return static_cast<double>(numel) / median(t);
}

}  // namespace lt::cli
