#include "exec/backend_rates.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/measure.h"
#include "memory/buffer_type.h"

namespace lt {
namespace {

using Clock = std::chrono::steady_clock;

// The median of reps timed runs of `issue_and_wait` (one untimed warm-up first).
template <typename F>
double median_seconds(int reps, F&& issue_and_wait) {
  if (reps < 1) throw Error("reps must be at least 1, got " + std::to_string(reps), "backend rates", "");
  issue_and_wait();
  std::vector<double> seconds;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    issue_and_wait();
    seconds.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return median(seconds);
}

Buffer take(BufferType& type, size_t bytes, const char* what) {
  Buffer b(type, bytes);
  if (!b)
    throw Error(std::string("cannot take ") + std::to_string(bytes) + " bytes of " + type.name() + " memory for " +
                    what,
                "backend rates", "free memory on that tier or measure a smaller size");
  return b;
}

}  // namespace

double measure_backend_gemm(Backend& backend, int64_t n, Precision p, int reps) {
  const KernelTable& k = backend.kernels();
  if (!k.matmul) throw Error(std::string(k.name) + " kernel table has no matmul", "backend rates", "");
  const size_t floats = static_cast<size_t>(n * n), bytes = floats * sizeof(float);
  // Operands with values of a layer's magnitude (a GEMM's speed does not depend on them
  // on any backend we have, but zeros or denormals could on some).
  Buffer host = take(backend.host_tier_memory(), bytes, "the GEMM's operands");
  float* h = reinterpret_cast<float*>(host.data());
  for (size_t i = 0; i < floats; ++i) h[i] = static_cast<float>(static_cast<int>(i % 97) - 48) / 97.f;
  Buffer a = take(backend.compute_memory(), bytes, "the GEMM's A");
  Buffer b = take(backend.compute_memory(), bytes, "the GEMM's B");
  Buffer c = take(backend.compute_memory(), bytes, "the GEMM's C");
  backend.copy_to_compute(a.data(), host.data(), bytes);
  backend.copy_to_compute(b.data(), host.data(), bytes);
  backend.synchronize();
  const float* A = reinterpret_cast<const float*>(a.data());
  const float* B = reinterpret_cast<const float*>(b.data());
  float* C = reinterpret_cast<float*>(c.data());
  const double s = median_seconds(reps, [&] {
    k.matmul(C, A, false, B, false, n, n, n, false, p);
    backend.wait_host(backend.record(Backend::Stream::Compute));
  });
  return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / s;
}

double measure_backend_link(Backend& backend, bool to_compute, size_t bytes, int reps) {
  Buffer host = take(backend.host_tier_memory(), bytes, "the link test");
  Buffer dev = take(backend.compute_memory(), bytes, "the link test");
  std::memset(host.data(), 1, bytes);  // touched: a first copy must not pay for page faults
  const double s = median_seconds(reps, [&] {
    if (to_compute)
      backend.copy_to_compute(dev.data(), host.data(), bytes);
    else
      backend.copy_to_host(host.data(), dev.data(), bytes);
    backend.synchronize();
  });
  return static_cast<double>(bytes) / s;
}

BackendRates measure_backend_rates(Backend& backend, int64_t n, size_t link_bytes, int reps) {
  BackendRates r;
  r.gemm_f32 = measure_backend_gemm(backend, n, Precision::F32, reps);
  r.gemm_bf16 = measure_backend_gemm(backend, n, Precision::BF16, reps);
  r.h2d = measure_backend_link(backend, true, link_bytes, reps);
  r.d2h = measure_backend_link(backend, false, link_bytes, reps);
  return r;
}

double default_compute_cap_bytes(const Backend::Capacity& cap) {
  return cap.total > 0 ? std::max(0.0, static_cast<double>(cap.free) - kDeviceReserveBytes) : 0.0;
}

}  // namespace lt
