// Sum of squares of one chunk, compiled once per ISA level (core/isa_target.h). The lane
// loop is what the vectorizer turns into float->double converts and FMAs: 16 lanes are
// four independent ymm chains at avx2 and two zmm chains at avx512, enough to hide the
// add latency. The lane order is the contract in sum_of_squares.h, the same at every level.
#include "kernels/cpu/sum_of_squares.h"

#include "core/isa_target.h"

namespace lt::LT_ISA_NS {

namespace {

double chunk(const float* x, int64_t n) {
  constexpr int kLanes = kSumOfSquaresLanes;
  double lane[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
#pragma omp simd
    for (int k = 0; k < kLanes; ++k) lane[k] += static_cast<double>(x[i + k]) * x[i + k];
  for (int width = kLanes / 2; width >= 1; width /= 2)  // pairwise: 0+1, 2+3, ...
    for (int k = 0; k < width; ++k) lane[k] = lane[2 * k] + lane[2 * k + 1];
  double s = lane[0];
  for (; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

}  // namespace

extern const SumOfSquaresKernels kSumOfSquaresKernels{chunk};

}  // namespace lt::LT_ISA_NS

#include "core/isa_target_end.h"
