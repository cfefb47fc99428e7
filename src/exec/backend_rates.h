// What a backend gives the streaming executor, measured through the backend itself:
// the rate of its kernel table's matmul on compute-tier memory, and of its copies
// between the host tier's memory and the compute tier, each way. `lazytrain profile
// --backend cuda` writes these into a hardware profile, so the planner predicts with the
// rates the executor's own calls reach (cuBLASLt behind the table's matmul, pinned
// cudaMemcpyAsync on the link streams), not with a datasheet's.
//
// Each rate is the median of `reps` timed calls after one untimed warm-up, from the issue
// to the host seeing the work done (the backend's events): a call's launch and queueing
// count, as they do in a step.
#pragma once

#include <cstddef>
#include <cstdint>

#include "exec/backend.h"

namespace lt {

// FLOP/s of C[n,n] = A[n,n] B[n,n] through backend.kernels().matmul at precision p (bf16:
// inputs rounded to bf16, fp32 accumulation), all three matrices in compute-tier memory.
double measure_backend_gemm(Backend& backend, int64_t n, Precision p, int reps);

// Bytes/s of one copy of `bytes` from the host tier's memory to the compute tier
// (to_compute) or back, through copy_to_compute / copy_to_host.
double measure_backend_link(Backend& backend, bool to_compute, size_t bytes, int reps);

// All four: the n^3 matmul at fp32 and bf16, one copy of link_bytes each way.
struct BackendRates {
  double gemm_f32 = 0, gemm_bf16 = 0;  // FLOP/s
  double h2d = 0, d2h = 0;             // bytes/s
};
BackendRates measure_backend_rates(Backend& backend, int64_t n, size_t link_bytes, int reps);

// What a plan may take of a device's memory by default: what is free, less what the plan
// does not place (the CUDA context's later allocations, cuBLASLt's workspace, the kernels'
// stream-ordered scratch). 0 where the compute tier is host RAM (no capacity of its own).
inline constexpr double kDeviceReserveBytes = 1.5e9;
double default_compute_cap_bytes(const Backend::Capacity& cap);

}  // namespace lt
