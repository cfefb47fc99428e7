#include "cli/bench_streaming.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/measure.h"
#include "memory/host_pool.h"
#include "memory/nvme_store.h"
#include "optim/adamw.h"
#include "optim/grad_clip.h"
#include "plan/planner.h"

namespace lt::cli {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

void fill(ModelParameters& p) {
  uint64_t s = 12345;
  for (int64_t i = 0; i < p.numel(); ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    p.data()[i] = 0.04f * (static_cast<float>(s >> 40) / 16777216.0f - 0.5f);
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
  auto t0 = Clock::now();
  store.wait(store.write(0, 0, buf.data(), n));
  const double w = static_cast<double>(n) / since(t0);
  t0 = Clock::now();
  store.wait(store.read(0, 0, buf.data(), n));
  const double r = static_cast<double>(n) / since(t0);
  return {r, w};
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

// The hybrid 8-bit AdamW over the lazy-update targets, one tensor per target range; the
// plan's paged layers keep their states in the bytes the executor hands the hook.
struct BenchOptimizer {
  AdamW opt;
  std::vector<std::vector<int>> ids;  // embed, layers 0..L-1, head; per range

  BenchOptimizer(const ModelParameters& p, const std::vector<int>& paged) : opt(config()) {
    const int L = static_cast<int>(p.config().num_layers);
    auto add = [&](const UpdateTarget& t, bool is_paged) {
      ids.emplace_back();
      AdamWTensorOptions o;
      o.paged = is_paged;
      int k = 0;
      for (auto [off, n] : target_ranges(p, t)) ids.back().push_back(opt.add_tensor(t.name() + "." + std::to_string(k++), n, o));
    };
    add({UpdateTarget::Kind::Embed, -1}, false);
    for (int j = 0; j < L; ++j)
      add({UpdateTarget::Kind::Layer, j}, std::find(paged.begin(), paged.end(), j) != paged.end());
    add({UpdateTarget::Kind::Head, -1}, false);
  }
  static AdamWConfig config() {
    AdamWConfig c;
    c.hyper.weight_decay = 0.0f;
    return c;
  }
  size_t layer_state_bytes() const {
    size_t b = 0;
    for (int id : ids[1]) b += opt.state_bytes(id);
    return b;
  }
  void update(ModelParameters& p, const ModelParameters& g, const UpdateTarget& t, std::span<std::byte> paged,
              float clip, int64_t step) {
    const size_t i = t.kind == UpdateTarget::Kind::Embed ? 0 : t.kind == UpdateTarget::Kind::Head ? ids.size() - 1 : 1 + t.layer;
    const auto ranges = target_ranges(p, t);
    size_t at = 0;
    for (size_t r = 0; r < ranges.size(); ++r) {
      if (!paged.empty()) {
        opt.attach_state(ids[i][r], paged.data() + at);
        at += opt.state_bytes(ids[i][r]);
      }
      opt.step_tensor(ids[i][r], p.data() + ranges[r].first, g.data() + ranges[r].first, nullptr, 1e-4f, clip, step);
      if (!paged.empty()) opt.detach_state(ids[i][r]);
    }
  }
};

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
  auto [nr, nw] = nvme_bw(a);
  hw.nvme_read_bw = nr;
  hw.nvme_write_bw = nw;
  hw.nvme_capacity_bytes = 16e9;
  return req;
}

Measured measure_layer_times(PlanRequest& req, const StreamingBenchArgs& a) {
  const Plan probe_plan = make_plan(req, "keep-all");
  Measured probe = run_plan(probe_plan, a);
  req.measured = layer_times(probe, probe_plan);
  return probe;
}

Measured run_plan(const Plan& plan, const StreamingBenchArgs& a, double emu_gbps, bool train) {
  const ModelConfig& c = plan.model;
  ModelParameters params(c), grads(c);
  fill(params);
  std::vector<int32_t> ids(plan.batch * plan.seq);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 2654435761u) % c.vocab_size);
  auto backend = emu_gbps < 0 ? make_cpu_backend() : make_emu_backend(emu_gbps, emu_gbps);
  std::unique_ptr<BenchOptimizer> opt;
  // Paged states need their size even when nothing trains (the pager still moves them).
  if (train || !plan.nvme_state_layers.empty()) opt = std::make_unique<BenchOptimizer>(params, plan.nvme_state_layers);
  StreamingOptions so;
  so.offload_dir = a.offload_dir;
  so.direct_io = a.direct_io;
  if (opt) so.layer_state_bytes = opt->layer_state_bytes();
  StreamingExecutor ex(plan, *backend, so);
  Measured m;
  std::vector<double> times;
  double optimizer_s = 0, clip = 1;
  int64_t step_no = 0;
  const LazyUpdateHook hook = [&](const UpdateTarget& t, std::span<std::byte> paged) {
    const auto t0 = Clock::now();
    opt->update(params, grads, t, paged, static_cast<float>(clip), step_no);
    optimizer_s += since(t0);
  };
  for (int s = 0; s <= a.steps; ++s) {  // step 0 warms caches and page tables
    StepOptions o;
    if (train && s > 0) o.update = &hook;
    step_no = s;
    optimizer_s = 0;
    m.last = ex.step(params, grads, ids.data(), ids.data(), o);
    clip = clip_decision(m.last.grad_sq_sum, 1.0).clip_factor;
    if (s > 0 && (times.empty() || m.last.step_s < *std::min_element(times.begin(), times.end())))
      m.optimizer_s = optimizer_s;
    if (s > 0) times.push_back(m.last.step_s);
  }
  m.step_s = *std::min_element(times.begin(), times.end());
  m.peak = ex.measured_peak_bytes();
  m.arena_planned_peak = ex.planned_peak_bytes();
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
