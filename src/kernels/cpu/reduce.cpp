#include "kernels/cpu/reduce.h"

namespace lt::detail {

void column_sum_add(float* out, const float* a, int64_t rows, int64_t cols) {
  LT_ISA_PICK(kReduceKernels).column_sum_add(out, a, rows, cols);
}

}  // namespace lt::detail
