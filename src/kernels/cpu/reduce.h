// Deterministic column sums, shared by the parameter-gradient reductions (linear dbias,
// rmsnorm dw). Threads split the columns, never the rows: every column is summed over
// rows 0, 1, 2, ... in that order by exactly one thread, so the result is bitwise the
// same for any thread count, with no atomics and no per-thread partial copies.
#pragma once

#include <algorithm>
#include <cstdint>

namespace lt::detail {

// out[c] += sum_r a[r * cols + c], for c < cols, rows summed in order.
inline void column_sum_add(float* out, const float* a, int64_t rows, int64_t cols) {
  constexpr int64_t kBlock = 256;  // columns per task: a 1 KiB accumulator on the stack
  const int64_t blocks = (cols + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (rows * cols >= (1 << 15) && blocks > 1)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t c0 = b * kBlock, n = std::min(kBlock, cols - c0);
    float acc[kBlock] = {};
    for (int64_t r = 0; r < rows; ++r) {
      const float* ar = a + r * cols + c0;
#pragma omp simd
      for (int64_t c = 0; c < n; ++c) acc[c] += ar[c];
    }
    for (int64_t c = 0; c < n; ++c) out[c0 + c] += acc[c];
  }
}

}  // namespace lt::detail
