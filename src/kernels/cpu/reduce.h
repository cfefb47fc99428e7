// Deterministic column sums, shared by the parameter-gradient reductions (linear dbias,
// rmsnorm dw). Threads split the columns, never the rows: every column is summed over
// rows 0, 1, 2, ... in that order by exactly one thread, so the result is bitwise the
// same for any thread count, with no atomics and no per-thread partial copies.
// Compiled once per ISA level (reduce_simd.cpp) and picked at run time
// (core/isa_dispatch.h).
#pragma once

#include <cstdint>

#include "core/isa_dispatch.h"

namespace lt::detail {

// out[c] += sum_r a[r * cols + c], for c < cols, rows summed in order.
void column_sum_add(float* out, const float* a, int64_t rows, int64_t cols);

}  // namespace lt::detail

namespace lt {

struct ReduceKernels {
  void (*column_sum_add)(float* out, const float* a, int64_t rows, int64_t cols);
};
LT_ISA_TABLE(ReduceKernels, kReduceKernels)

}  // namespace lt
