// Column sums, compiled once per ISA level (core/isa_target.h). Each task owns a block of
// columns and keeps their running sums in a stack accumulator while it walks the rows in
// order: the inner loop is one vector add per row per vector of columns.
#include "kernels/cpu/reduce.h"

#include "core/isa_target.h"

namespace lt::LT_ISA_NS {

namespace {

void column_sum_add(float* out, const float* a, int64_t rows, int64_t cols) {
  constexpr int64_t kBlock = 256;  // columns per task: a 1 KiB accumulator on the stack
  const int64_t blocks = (cols + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (rows * cols >= (1 << 15) && blocks > 1)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t c0 = b * kBlock;
    const int64_t n = cols - c0 < kBlock ? cols - c0 : kBlock;
    float acc[kBlock] = {};
    for (int64_t r = 0; r < rows; ++r) {
      const float* ar = a + r * cols + c0;
#pragma omp simd
      for (int64_t c = 0; c < n; ++c) acc[c] += ar[c];
    }
#pragma omp simd
    for (int64_t c = 0; c < n; ++c) out[c0 + c] += acc[c];
  }
}

}  // namespace

extern const ReduceKernels kReduceKernels{column_sum_add};

}  // namespace lt::LT_ISA_NS

#include "core/isa_target_end.h"
