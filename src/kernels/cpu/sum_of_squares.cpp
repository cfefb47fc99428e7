// Sum of squares: the chunking and the chunk-order sum (sum_of_squares.h); the chunk
// kernel is the ISA level's.
#include "kernels/cpu/sum_of_squares.h"

#include <algorithm>
#include <vector>

namespace lt {

double sum_of_squares_f64(const float* x, int64_t n) {
  const auto chunk = LT_ISA_PICK(kSumOfSquaresKernels).chunk;
  if (n <= kSumOfSquaresChunk) return n > 0 ? chunk(x, n) : 0.0;
  const int64_t chunks = (n + kSumOfSquaresChunk - 1) / kSumOfSquaresChunk;
  std::vector<double> part(static_cast<size_t>(chunks));
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c)
    part[size_t(c)] = chunk(x + c * kSumOfSquaresChunk,
                            std::min(kSumOfSquaresChunk, n - c * kSumOfSquaresChunk));
  double s = 0;
  for (double p : part) s += p;
  return s;
}

}  // namespace lt
