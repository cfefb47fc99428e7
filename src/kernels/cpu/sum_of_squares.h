// The sum of squares of n floats, in float64: the squared global gradient norm (gradient
// clipping, the updater's finite check) and the streaming executor's per-range norms.
//
// Order of the sum, fixed so that the bits never depend on the thread count:
//   the input is cut into chunks of kSumOfSquaresChunk floats from x[0]; in each chunk,
//   lane k (of kSumOfSquaresLanes) adds x[i]^2 for i = k mod lanes in index order, the
//   lanes are added pairwise (0+1, 2+3, ...; then those pairs; ...), and the tail past the
//   last full group of lanes is added after, in order; the chunk sums are then added in
//   chunk order. Threads take whole chunks.
// A float squared is exact in float64 (24 + 24 bits < 53), so contracting x*x + s into an
// FMA rounds the same as a multiply and an add: the order above alone sets the result.
// Error: every term is >= 0, so the float64 sum is within (n + 2) u64 sum x^2 of the exact
// value (u64 = 2^-53), in any order.
#pragma once

#include <cstdint>

#include "core/isa_dispatch.h"

namespace lt {

inline constexpr int64_t kSumOfSquaresChunk = int64_t{1} << 16;
inline constexpr int kSumOfSquaresLanes = 16;  // two AVX-512 or four AVX2 double vectors

// Threaded over chunks when there are several. Picks the ISA level in force.
double sum_of_squares_f64(const float* x, int64_t n);

// One table per ISA level, compiled from sum_of_squares_simd.cpp.
struct SumOfSquaresKernels {
  double (*chunk)(const float* x, int64_t n);  // one chunk (n <= kSumOfSquaresChunk)
};
LT_ISA_TABLE(SumOfSquaresKernels, kSumOfSquaresKernels)

}  // namespace lt
