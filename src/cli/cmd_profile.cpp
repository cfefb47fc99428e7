// `lazytrain profile`: measures this machine and writes a hardware profile (plan/
// hardware_profile.h) whose numbers are marked "measured": the GEMM rate (--backend cpu:
// fp32 and bf16 through lt::matmul; cuda: through the cuda backend's kernel table on the
// device, with its pinned copies as the links), memcpy bandwidth (the emu backend's copy
// rate and the host's stream rate),
// NVMe read and write with O_DIRECT in a given directory, and the host AdamW throughput.
// Medians of a few repetitions: the machines this runs on are often shared and noisy.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/measure.h"
#include "cli/commands.h"
#include "core/aligned_buffer.h"
#include "core/cpu_features.h"
#include "core/error.h"
#include "core/threads.h"
#include "exec/backend_cuda.h"
#include "exec/backend_rates.h"
#include "io/atomic_file.h"
#include "kernels/cpu/matmul.h"
#include "train/bf16_gemm_paths.h"

namespace lt::cli {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct ProfileArgs {
  std::string out = "profiles/local.json", dir = ".", backend = "cpu";
  int nvme_mb = 1024, reps = 5;
  double compute_memory_gb = 0;
};

// The GEMMs' size, n^3: transformer-like.
constexpr int64_t kProfileGemmSize = 2048;

// FLOP/s of a square GEMM (bf16: inputs rounded to bf16, fp32 accumulation).
double measure_gemm(int reps, Precision precision) {
  const int64_t n = kProfileGemmSize;
  AlignedBuffer<float> a(n * n), b(n * n), c(n * n);
  for (int64_t i = 0; i < n * n; ++i) {
    a[i] = static_cast<float>((i % 97) - 48) / 97.f;
    b[i] = static_cast<float>((i % 89) - 44) / 89.f;
  }
  matmul(c.data(), a.data(), false, b.data(), false, n, n, n, false, precision);  // warm-up
  std::vector<double> rates;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    matmul(c.data(), a.data(), false, b.data(), false, n, n, n, false, precision);
    rates.push_back(2.0 * n * n * n / seconds_since(t0));
  }
  return median(rates);
}

// Bytes copied per second by memcpy on 256 MB buffers.
double measure_memcpy(int reps) {
  const size_t bytes = size_t{256} << 20;
  AlignedBuffer<char> src(bytes), dst(bytes);
  std::memset(src.data(), 1, bytes);
  std::memcpy(dst.data(), src.data(), bytes);
  std::vector<double> rates;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    std::memcpy(dst.data(), src.data(), bytes);
    rates.push_back(static_cast<double>(bytes) / seconds_since(t0));
  }
  return median(rates);
}

// Sequential O_DIRECT write then read of `mb` MiB in 8 MiB requests; returns {read, write} B/s.
std::pair<double, double> measure_nvme(const std::string& dir, int mb) {
  namespace fs = std::filesystem;
  const size_t block = size_t{8} << 20;
  const size_t blocks = std::max<size_t>(1, static_cast<size_t>(mb) / 8);
  fs::path file = fs::path(dir) / "lazytrain-profile.tmp";
  void* raw = nullptr;
  if (posix_memalign(&raw, 4096, block) != 0) throw Error("cannot allocate an aligned buffer", "profile", "");
  std::unique_ptr<char, decltype(&std::free)> io(static_cast<char*>(raw), &std::free);
  std::memset(io.get(), 7, block);
  int fd = ::open(file.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_DIRECT, 0600);
  if (fd < 0)
    throw Error(std::string("cannot open a file with O_DIRECT: ") + std::strerror(errno), file.string(),
                "give --dir on a filesystem that supports O_DIRECT, on the NVMe drive to profile");
  auto t0 = Clock::now();
  for (size_t i = 0; i < blocks; ++i)
    if (::write(fd, io.get(), block) != static_cast<ssize_t>(block)) {
      ::close(fd);
      fs::remove(file);
      throw Error(std::string("write failed: ") + std::strerror(errno), file.string(), "check free space");
    }
  ::fsync(fd);
  double write_bw = static_cast<double>(block * blocks) / seconds_since(t0);
  ::close(fd);
  fd = ::open(file.c_str(), O_RDONLY | O_DIRECT);
  if (fd < 0) throw Error(std::string("cannot reopen: ") + std::strerror(errno), file.string(), "");
  t0 = Clock::now();
  for (size_t i = 0; i < blocks; ++i)
    if (::read(fd, io.get(), block) != static_cast<ssize_t>(block)) {
      ::close(fd);
      fs::remove(file);
      throw Error(std::string("read failed: ") + std::strerror(errno), file.string(), "");
    }
  double read_bw = static_cast<double>(block * blocks) / seconds_since(t0);
  ::close(fd);
  fs::remove(file);
  return {read_bw, write_bw};
}

// Parameters per second of a plain fp32 AdamW step over all threads.
double measure_optimizer(int reps) {
  const int64_t n = int64_t{16} << 20;
  AlignedBuffer<float> p(n), g(n), m(n), v(n);
  for (int64_t i = 0; i < n; ++i) {
    p[i] = 0.01f * static_cast<float>(i % 101);
    g[i] = 0.001f * static_cast<float>(i % 37);
  }
  const float lr = 1e-5f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.01f;
  std::vector<double> rates;
  for (int r = 0; r <= reps; ++r) {
    const float c1 = 1 - std::pow(b1, static_cast<float>(r + 1)), c2 = 1 - std::pow(b2, static_cast<float>(r + 1));
    auto t0 = Clock::now();
    float* P = p.data();
    float* G = g.data();
    float* M = m.data();
    float* V = v.data();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      M[i] = b1 * M[i] + (1 - b1) * G[i];
      V[i] = b2 * V[i] + (1 - b2) * G[i] * G[i];
      P[i] -= lr * ((M[i] / c1) / (std::sqrt(V[i] / c2) + eps) + wd * P[i]);
    }
    if (r > 0) rates.push_back(static_cast<double>(n) / seconds_since(t0));  // r = 0 warms up
  }
  return median(rates);
}

nlohmann::json measured(double v, const std::string& note = "") {
  nlohmann::json j = {{"value", v}, {"source", "measured"}};
  if (!note.empty()) j["note"] = note;
  return j;
}

// The compute tier of the cpu backend: GEMMs through lt::matmul on host RAM, whose
// budget is --compute-memory or half the host; "links" are memcpy (the emu backend's
// copies). Fills j's compute, links and the bf16 paths.
void profile_cpu_compute(const ProfileArgs& a, double host_bytes, double copy, nlohmann::json& j) {
  const double gemm = measure_gemm(a.reps, Precision::F32);
  std::printf("  fp32 GEMM 2048^3          %.1f GFLOP/s (%s)\n", gemm / 1e9,
              matmul_impl_name(2048, 2048, 2048, Precision::F32).c_str());
  // Both bf16 paths per matmul layout, where there are two (at the avx512 level and
  // above): a bf16 run with this profile takes the faster one per layout
  // (train/bf16_gemm_paths.h), and the bf16 rate below is measured on those.
  nlohmann::json paths;
  if (active_isa() >= Isa::Avx512) {
    const std::vector<Bf16PathRates> rates = measure_bf16_gemm_paths(kProfileGemmSize, a.reps);
    Bf16GemmMeasured faster;
    faster.source = "the faster path per layout, measured just now";
    for (size_t l = 0; l < rates.size(); ++l) {
      const Bf16PathRates& r = rates[l];
      std::printf("  bf16 GEMM %-7s 2048^3    native %.1f, widened to fp32 %.1f GFLOP/s\n", r.layout, r.native,
                  r.widened);
      paths[r.layout] = {{"native_gflops", r.native}, {"widened_gflops", r.widened}};
      faster.path[l] = r.native > r.widened ? Bf16GemmPath::Native : Bf16GemmPath::Widened;
    }
    set_measured_bf16_gemm_paths(faster);
  }
  const double gemm_bf16 = measure_gemm(a.reps, Precision::BF16);
  std::printf("  bf16 GEMM 2048^3          %.1f GFLOP/s (%s)\n", gemm_bf16 / 1e9, matmul_bf16_path().c_str());
  const double compute_mem = a.compute_memory_gb > 0 ? a.compute_memory_gb * 1e9 : 0.5 * host_bytes;
  j["description"] = "This machine, measured by `lazytrain profile` (CPU backend: the compute tier is a RAM budget).";
  j["compute"] = {
      {"memory_gb", {{"value", compute_mem / 1e9}, {"source", a.compute_memory_gb > 0 ? "given" : "assumed"},
                     {"note", "RAM budget for the compute tier (half the host unless --compute-memory)"}}},
      {"default_cap_gb", {{"value", compute_mem / 1e9}, {"source", a.compute_memory_gb > 0 ? "given" : "assumed"}}},
      {"peak_tflops", measured(gemm / 1e12, "fp32 GEMM 2048^3 through lt::matmul")},
      {"bf16_peak_tflops", measured(gemm_bf16 / 1e12, "bf16 GEMM 2048^3 (fp32 accumulation) through lt::matmul")},
      {"efficiency", measured(1.0, "the GEMM rate above is already what the kernels reach")}};
  j["links"] = {{"h2d_gbps", measured(copy / 1e9, "memcpy (the emu backend's copies)")},
                {"d2h_gbps", measured(copy / 1e9, "memcpy")}};
  if (!paths.is_null()) j["bf16_gemm_paths"] = paths;  // informational: the planner reads bf16_peak_tflops
}

// The GEMMs' size on a GPU: large enough that a launch and its scratch are noise next to
// the product (8192^3 bf16 is ~1.6 ms on an H200; the three fp32 matrices take 768 MiB).
constexpr int64_t kProfileGpuGemmSize = 8192;

// The compute tier of a GPU's backend (cuda), measured through the backend the executor
// runs on (exec/backend_rates.h): its kernel table's matmul in device memory, its copies
// between pinned host memory and the device each way, and the device's memory.
void profile_backend_compute(const ProfileArgs& a, Backend& backend, nlohmann::json& j) {
  const int64_t n = kProfileGpuGemmSize;
  const std::string shape = std::to_string(n) + "^3";
  const BackendRates r = measure_backend_rates(backend, n, size_t{256} << 20, a.reps);
  const double gemm = r.gemm_f32, gemm_bf16 = r.gemm_bf16, h2d = r.h2d, d2h = r.d2h;
  std::printf("  fp32 GEMM %s          %.1f TFLOP/s (cuBLASLt, fp32 FMAs, no TF32)\n", shape.c_str(), gemm / 1e12);
  std::printf("  bf16 GEMM %s          %.1f TFLOP/s (cuBLASLt, fp32 accumulation, inputs converted per call)\n",
              shape.c_str(), gemm_bf16 / 1e12);
  std::printf("  pinned copies 256 MiB     host to device %.2f GB/s, device to host %.2f GB/s\n", h2d / 1e9,
              d2h / 1e9);
  const Backend::Capacity cap = backend.compute_capacity();
  const bool given = a.compute_memory_gb > 0;
  const double memory = given ? a.compute_memory_gb * 1e9 : static_cast<double>(cap.total);
  const double default_cap = given ? memory : default_compute_cap_bytes(cap);
  std::printf("  device memory             %.1f GB, %.1f GB free\n", cap.total / 1e9, cap.free / 1e9);
  const std::string how = "through the cuda backend's kernel table (exec/backend_rates.h), device memory";
  j["description"] = "This machine, measured by `lazytrain profile --backend cuda` (the compute tier is GPU memory).";
  j["compute"] = {
      {"memory_gb", given ? nlohmann::json{{"value", memory / 1e9}, {"source", "given"}}
                          : measured(memory / 1e9, "the device's memory (cudaMemGetInfo)")},
      {"default_cap_gb", given ? nlohmann::json{{"value", default_cap / 1e9}, {"source", "given"}}
                               : measured(default_cap / 1e9, "free device memory less 1.5 GB for the CUDA "
                                                             "context, cuBLASLt and the kernels' scratch")},
      {"peak_tflops", measured(gemm / 1e12, "fp32 GEMM " + shape + " " + how)},
      {"bf16_peak_tflops", measured(gemm_bf16 / 1e12, "bf16 GEMM " + shape + " (fp32 accumulation) " + how)},
      {"efficiency", measured(1.0, "the GEMM rate above is already what the table's kernels reach")}};
  j["links"] = {{"h2d_gbps", measured(h2d / 1e9, "cudaMemcpyAsync of 256 MiB from pinned memory, the H2D stream")},
                {"d2h_gbps", measured(d2h / 1e9, "cudaMemcpyAsync of 256 MiB to pinned memory, the D2H stream")}};
}

void run_profile(const ProfileArgs& a) {
  if (a.backend != "cpu" && a.backend != "cuda")
    throw Error("unknown backend '" + a.backend + "'", "--backend",
                "use cpu (the compute tier is host RAM; emu runs take its rates) or cuda");
  prepare_output_file(a.out, "--out");  // before a minute of measuring, not after
  std::error_code ec;
  if (!std::filesystem::is_directory(a.dir, ec))
    throw Error("the disk-test directory " + a.dir + " does not exist", "--dir",
                "give --dir an existing directory on the NVMe drive to profile");
  // The device first: where there is none (or no CUDA in this build), say so at once.
  std::unique_ptr<Backend> cuda = a.backend == "cuda" ? make_cuda_backend() : nullptr;
  std::printf("profiling this machine (%s backend, %d threads)...\n", a.backend.c_str(), num_threads());
  std::printf("  %s\n", cpu_summary().c_str());
  const double host = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
  nlohmann::json j;
  j["name"] = "local";
  j["cpu"] = cpu_summary();
  j["backend"] = a.backend;
  // The streaming executors hold fp32 activations, weights and gradients on every backend
  // (bf16 matmuls read the host's bf16 copy).
  j["act_bytes"] = 4;
  j["weight_bytes"] = 4;
  j["grad_bytes"] = 4;
  if (cuda) profile_backend_compute(a, *cuda, j);
  const double copy = measure_memcpy(a.reps);
  std::printf("  memcpy                    %.2f GB/s\n", copy / 1e9);
  if (a.backend == "cpu") profile_cpu_compute(a, host, copy, j);
  auto [rd, wr] = measure_nvme(a.dir, a.nvme_mb);
  std::printf("  disk O_DIRECT in %s    read %.2f GB/s, write %.2f GB/s\n", a.dir.c_str(), rd / 1e9, wr / 1e9);
  double opt = measure_optimizer(a.reps);
  std::printf("  fp32 AdamW                %.1f M params/s\n", opt / 1e6);
  double disk = static_cast<double>(std::filesystem::space(a.dir).available);
  j["nvme"] = {{"read_gbps", measured(rd / 1e9, "O_DIRECT 8 MiB sequential in " + a.dir)},
               {"write_gbps", measured(wr / 1e9, "O_DIRECT 8 MiB sequential with fsync in " + a.dir)},
               {"capacity_gb", measured(disk / 1e9, "free space in " + a.dir)}};
  j["host"] = {{"memory_gb", measured(host / 1e9)},
               {"optimizer_gparams_per_s", measured(opt / 1e9, "plain fp32 AdamW loop, all threads")},
               {"memory_bandwidth_gbps", measured(copy / 1e9, "memcpy")},
               {"threads", measured(num_threads(), "the threads the GEMM and AdamW rates ran on")}};
  write_file_atomic(a.out, j.dump(2) + "\n");
  std::printf("written %s\n", a.out.c_str());
}

}  // namespace

void add_profile_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("profile", "Measure this machine (GEMM, memcpy, disk, optimizer) into a hardware profile");
  auto a = std::make_shared<ProfileArgs>();
  cmd->add_option("--out", a->out, "Profile file to write")->capture_default_str();
  cmd->add_option("--dir", a->dir, "Directory on the NVMe drive for the O_DIRECT test")->capture_default_str();
  cmd->add_option("--nvme-mb", a->nvme_mb, "Size of the disk test file, MiB")->capture_default_str();
  cmd->add_option("--reps", a->reps, "Repetitions per measurement (median)")->capture_default_str();
  cmd->add_option("--compute-memory", a->compute_memory_gb,
                  "Compute tier's memory, GB (cpu: the RAM budget, default half the host; cuda: default the device's)");
  cmd->add_option("--backend", a->backend,
                  "cpu (GEMMs on this CPU) or cuda (GEMMs and pinned copies through the cuda backend, GPU 0)")
      ->capture_default_str();
  cmd->callback([a] { run_profile(*a); });
}

}  // namespace lt::cli
