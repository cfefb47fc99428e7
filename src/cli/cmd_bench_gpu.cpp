// `lazytrain bench gpu` (issue 27, part 6): a Qwen2.5-7B-shaped model (random weights,
// 8 of its layers by default) trained for a few steps on the cuda backend with the MILP's
// plan and with the megatrain rule, on the same engine, at the largest batch both fit on
// the device. Prints per plan the measured TFLOPS (6 N tokens over the median step), the
// predicted and measured step and the planned and measured compute-tier peak, then
//   RESULT gpu tflops_milp=... tflops_megatrain=... ratio=... pred_err=... peak_ok=...
// (pred_err: the larger of the two plans' |measured - predicted| / measured, measured as
// the fastest step, the statistic the probe's layer times are; peak_ok: both measured
// peaks, the executor's arena block and the kernels' pool scratch beside it, at most
// planned).
//
// The rates the plans are made with are the backend's own, measured at the start through
// it (exec/backend_rates.h, as `profile --backend cuda` does), unless --hardware names a
// profile; the host optimizer's rate is the hybrid 8-bit AdamW's on this host, which runs
// it in the lazy-update hook of every step (--no-train: forward and backward only). The
// per-layer forward, backward and head times come from a probe, as in `bench predict`: a
// keep-all step of the model's first layers on the backend at the bench's batch
// (--no-probe: derived from the GEMM rate, which leaves out every kernel that is not a
// GEMM and every launch). The
// same command runs on the emu and cpu backends (a smaller --model and a
// --compute-budget-gb then), which is how it is tested without a GPU.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include "cli/bench_streaming.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/measure.h"
#include "exec/backend_rates.h"
#include "model/hybrid_layers.h"
#include "model/layer_specs.h"
#include "plan/hardware_profile.h"
#include "plan/model_preset.h"
#include "plan/planner.h"

namespace lt::cli {
namespace {

struct GpuBenchArgs {
  StreamingBenchArgs base;  // steps, offload dir, direct I/O, precision
  std::string backend = "cuda", model = "qwen2.5-7b", hardware, precision = "bf16";
  int layers = 8;             // of the model's; 0: all
  int64_t batch = 0;          // 0: the largest both plans fit, up to max_batch
  int64_t max_batch = 64;
  double compute_budget_gb = 0;  // 0: the profile's default cap (the device's free memory)
  bool train = true;
  bool probe = true;  // measure the layer times on the backend before planning
};

// c cut to its first `layers` decoder layers (their types and kinds with them).
ModelConfig first_layers(ModelConfig c, int64_t layers) {
  c.num_layers = layers;
  if (!c.layer_types.empty()) c.layer_types.resize(layers);
  if (!c.layer_kinds.empty()) c.layer_kinds.resize(layers);
  return c;
}

ModelConfig bench_gpu_model(const GpuBenchArgs& a) {
  ModelConfig c = resolve_model(a.model).config;
  if (c.has_moe())
    throw Error("model " + a.model + " has MoE layers, whose experts run on the CPU's kernels only", "--model",
                "give a dense or hybrid model");
  if (a.layers < 0) throw Error("--layers must not be negative", "--layers", "give 0 (all) or a count");
  if (a.layers > 0 && a.layers < c.num_layers) c = first_layers(c, a.layers);
  c.torch_dtype = "float32";
  return c;
}

// The rates the plans are made with: the given profile, or the backend's GEMM and links
// measured now (the device's memory for its cap) over bench_request's NVMe store and host.
void set_rates(PlanRequest& req, Backend& backend, const GpuBenchArgs& a, Precision precision) {
  HardwareProfile& hw = req.hardware;
  if (!a.hardware.empty()) {
    const bool no_nvme = hw.nvme_capacity_bytes == 0;  // bench_request found no io_uring
    hw = load_hardware_profile(a.hardware);
    if (no_nvme) hw.nvme_capacity_bytes = 0;
    std::printf("rates: profile %s%s\n", a.hardware.c_str(), no_nvme ? " (without its NVMe tier)" : "");
  } else {
    // 8192^3 on a GPU (a launch is noise next to it); a CPU's tier gets a GEMM it does in
    // a fraction of a second.
    const bool device = !backend.host_is_compute();
    const int64_t n = std::string(backend.name()) == "cuda" ? 8192 : 512;
    const BackendRates r = measure_backend_rates(backend, n, size_t{64} << 20, 3);
    hw.peak_flops = r.gemm_f32;
    hw.bf16_peak_flops = r.gemm_bf16;
    hw.h2d_bw = r.h2d;
    hw.d2h_bw = r.d2h;
    // A device's memory, as profile --backend cuda takes it; a tier in host RAM has no size
    // of its own (--compute-budget-gb gives it).
    const Backend::Capacity cap = backend.compute_capacity();
    hw.compute_memory_bytes = static_cast<double>(cap.total);
    hw.default_cap_bytes = default_compute_cap_bytes(cap);
    hw.name = std::string(backend.name()) + " backend, measured now";
    std::printf("rates (%s, measured now): GEMM %lld^3 fp32 %.2f TFLOP/s, bf16 %.2f TFLOP/s; links h2d %.2f GB/s, "
                "d2h %.2f GB/s%s\n",
                backend.name(), static_cast<long long>(n), hw.peak_flops / 1e12, hw.bf16_peak_flops / 1e12,
                hw.h2d_bw / 1e9, hw.d2h_bw / 1e9, device ? "" : " (the compute tier is host RAM)");
  }
  // What the streaming executors hold on the compute tier on every backend: fp32.
  hw.act_bytes = hw.weight_bytes = hw.grad_bytes = 4;
  if (precision == Precision::BF16 && hw.bf16_peak_flops > 0) hw.peak_flops = hw.bf16_peak_flops;
  hw.efficiency = 1;
  hw.host_optimizer_params_per_s = a.train ? adamw8_params_per_s(layer_params(req.model, 0)) : 1e15;
  req.page_master = precision == Precision::BF16;
}

// Sets req's per-layer times from a keep-all step, on the backend, of the model cut to its
// first two layers (one where two do not fit keep-all), at req's batch and seq: the steps
// then run the kernels, launches and conversions the GEMM rate alone leaves out. A dense
// model's layers are alike, so the cut's layer times are each of the whole model's, and
// its head is the same head (a hybrid model's cut has its first kinds only: the cost
// model's one time per layer is then theirs). Returns false, saying so, when no cut fits.
bool probe_layer_times(PlanRequest& req, Backend& backend, const StreamingBenchArgs& sa) {
  for (int64_t layers = std::min<int64_t>(2, req.model.num_layers); layers >= 1; --layers) {
    PlanRequest probe = req;
    probe.model = first_layers(req.model, layers);
    probe.scratch = executor_scratch(probe.model, probe.batch, probe.seq, backend.kernels(), sa.precision);
    probe.scratch_at = nullptr;
    if (!make_plan(probe, "keep-all").feasible) continue;
    measure_layer_times_on(backend, probe, sa);
    req.measured = probe.measured;
    std::printf("layer times (probe: keep-all step of %lld layer%s on the backend): forward %.3f ms, backward %.3f "
                "ms, head %.3f ms\n",
                static_cast<long long>(layers), layers > 1 ? "s" : "", req.measured.forward_s * 1e3,
                req.measured.backward_s * 1e3, req.measured.head_s * 1e3);
    return true;
  }
  std::printf("layer times: not even one layer fits keep-all in the budget, so no probe; derived from the GEMM "
              "rate\n");
  return false;
}

struct Row {
  const char* policy;
  Plan plan;
  Measured m;
  double median_s = 0, tflops = 0, pred_err = 0;
  bool peak_ok = false;
};

void run_bench_gpu(const GpuBenchArgs& a) {
  if (a.precision != "bf16" && a.precision != "f32")  // spelled as train, step and the train config spell it
    throw Error("unknown precision '" + a.precision + "'", "--precision", "use bf16 or f32");
  if (a.base.steps < 1) throw Error("--steps must be at least 1", "--steps", "give a positive count");
  const Precision precision = a.precision == "bf16" ? Precision::BF16 : Precision::F32;
  std::unique_ptr<Backend> backend = make_backend(a.backend);
  StreamingBenchArgs sa = a.base;
  sa.precision = precision;

  PlanRequest req = bench_request(sa, "bench gpu");  // the NVMe store's and memcpy's rates
  req.model = bench_gpu_model(a);
  req.model_name = a.model + (a.layers > 0 ? " (" + std::to_string(req.model.num_layers) + " layers)" : "");
  req.seq = sa.seq;
  set_rates(req, *backend, a, precision);
  const double cap = a.compute_budget_gb > 0 ? a.compute_budget_gb * 1e9 : req.hardware.default_cap_bytes;
  if (!(cap > 0))
    throw Error("no compute-tier size to plan for: the " + std::string(backend->name()) +
                    " backend's tier is host RAM and no profile gives it",
                "--compute-budget-gb", "give --compute-budget-gb (or --hardware with a profile)");
  req.gpu_cap_bytes = cap;
  req.hardware.compute_memory_bytes = std::max(req.hardware.compute_memory_bytes, cap);
  const KernelTable& table = backend->kernels();
  req.scratch_at = [model = req.model, seq = req.seq, &table, precision](int64_t batch) {
    return executor_scratch(model, batch, seq, table, precision);
  };
  // The largest batch both plans fit (each may fit one the other does not: the rule's
  // recompute-everything step is not always in the MILP's space, nor the reverse).
  req.batch = a.batch > 0 ? a.batch
                          : std::min(largest_feasible_batch(req, "megatrain", a.max_batch),
                                     largest_feasible_batch(req, "milp", a.max_batch));
  if (req.batch < 1)
    throw Error("the plans fit no common batch of " + std::to_string(req.seq) + " tokens in " +
                    std::to_string(cap / 1e9) + " GB",
                "bench gpu", "give a shorter --seq, fewer --layers or a larger --compute-budget-gb");
  req.scratch = req.scratch_at(req.batch);
  sa.batch = static_cast<int>(req.batch);

  const double tokens = static_cast<double>(req.batch) * static_cast<double>(req.seq);
  std::printf("bench gpu: %s on the %s backend, batch %lld x seq %lld, %s, compute budget %.3g GB, %s\n",
              req.model_name.c_str(), backend->name(), static_cast<long long>(req.batch),
              static_cast<long long>(req.seq), a.precision.c_str(), cap / 1e9,
              a.train ? "8-bit AdamW in the lazy-update hook" : "no optimizer");
  // MegaTrain's convention (N: every parameter), which its published TFLOPS use; with
  // few layers the input embedding, a lookup, is a larger share of N than in the model.
  const double n_params = static_cast<double>(active_params(req.model)), flops = 6.0 * n_params * tokens;
  const double lookup = req.model.tie_word_embeddings ? 0 : embedding_weight_spec(req.model).numel();
  std::printf("TFLOPS: 6 x N x tokens / step, N = %.4g B parameters (MegaTrain's convention: all of them; the input "
              "embedding's %.3g B, a lookup, are %.0f%% of N here)\n",
              n_params / 1e9, lookup / 1e9, 100 * lookup / n_params);
  if (a.probe) probe_layer_times(req, *backend, sa);
  Row rows[2] = {{"milp", {}, {}}, {"megatrain", {}, {}}};
  for (Row& r : rows) {
    r.plan = make_plan(req, r.policy);
    if (!r.plan.feasible)
      throw Error(std::string(r.policy) + " plan infeasible: " + diagnose_infeasible(req, r.policy, r.plan).message,
                  "bench gpu",
                  "give a smaller --batch or a larger --compute-budget-gb");
    backend->reset_kernel_scratch_peak();
    r.m = run_plan_on(*backend, r.plan, sa, a.train, a.base.steps);
    r.median_s = median(r.m.step_times);
    r.tflops = flops / r.median_s / 1e12;
    // Against the fastest step: the probe's layer times the prediction is made of are its
    // fastest step's (cli/bench_streaming.h: the same statistic on both sides).
    r.pred_err = std::fabs(r.m.step_s - r.plan.predicted_step_s) / r.m.step_s;
    // The device's peak: the arena block the executor held (its layout's extent, at least
    // the live bytes' peak: a layout may leave gaps) and, beside it, the kernels' pool
    // scratch (the plan counts both).
    const size_t pool = backend->kernel_scratch_peak();
    const double peak = static_cast<double>(std::max(r.m.peak, r.m.arena_extent) + pool);
    r.peak_ok = peak <= r.plan.predicted_peak.gpu;
    const Plan::TierCounts tc = r.plan.tier_counts();
    std::printf("%-9s boundaries gpu %.0f cpu %.0f nvme %.0f recomputed %.0f | step median %.4f s of %zu "
                "(fastest %.4f s, predicted %.4f s, err %.1f%%) | %.3g TFLOPS | peak %.3g GB (arena %.3g, live %.3g, "
                "kernels' pool %.3g), planned %.3g GB%s\n",
                r.policy, tc.gpu, tc.cpu, tc.nvme, tc.recompute, r.median_s, r.m.step_times.size(), r.m.step_s,
                r.plan.predicted_step_s, 100 * r.pred_err, r.tflops, peak / 1e9, r.m.arena_extent / 1e9,
                r.m.peak / 1e9, pool / 1e9,
                r.plan.predicted_peak.gpu / 1e9, r.peak_ok ? "" : " (OVER)");
  }
  std::printf("RESULT gpu tflops_milp=%.2f tflops_megatrain=%.2f ratio=%.3f pred_err=%.3f peak_ok=%s\n",
              rows[0].tflops, rows[1].tflops, rows[0].tflops / rows[1].tflops,
              std::max(rows[0].pred_err, rows[1].pred_err), rows[0].peak_ok && rows[1].peak_ok ? "true" : "false");
}

}  // namespace

void add_bench_gpu_command(CLI::App& app) {
  CLI::App* parent = bench_command(app);
  auto a = std::make_shared<GpuBenchArgs>();
  a->base.seq = 1024;
  CLI::App* gpu = parent->add_subcommand(
      "gpu", "Train a Qwen2.5-7B-shaped model on the GPU with the MILP plan and the megatrain rule: TFLOPS, "
             "predicted vs measured step, planned vs measured peak");
  gpu->add_option("--backend", a->backend, "cuda, or emu / cpu (for a check without a GPU)")->capture_default_str();
  gpu->add_option("--model", a->model, "preset, config.json or model directory (random weights)")
      ->capture_default_str();
  gpu->add_option("--layers", a->layers, "decoder layers of the model's to keep (0: all)")->capture_default_str();
  gpu->add_option("--seq", a->base.seq, "sequence length")->capture_default_str();
  gpu->add_option("--batch", a->batch, "batch (0: the largest both plans fit)")->capture_default_str();
  gpu->add_option("--max-batch", a->max_batch, "the batch search's limit")->capture_default_str();
  gpu->add_option("--steps", a->base.steps, "measured steps per plan, after one warm-up")->capture_default_str();
  gpu->add_option("--precision", a->precision, "bf16 or f32 matmuls")->capture_default_str();
  gpu->add_option("--compute-budget-gb", a->compute_budget_gb, "compute tier to plan for, GB (0: the device's free)");
  gpu->add_option("--hardware", a->hardware, "plan with this profile instead of measuring the backend now");
  gpu->add_option("--offload-dir", a->base.offload_dir, "directory for the NVMe tier");
  gpu->add_flag("!--no-train", a->train, "forward and backward only, no optimizer");
  gpu->add_flag("!--no-probe", a->probe, "layer times from the GEMM rate, not from a probe step on the backend");
  gpu->add_flag("!--no-direct-io", a->base.direct_io, "buffered I/O (filesystems without O_DIRECT)");
  gpu->callback([a] { run_bench_gpu(*a); });
}

}  // namespace lt::cli
