// RMSNorm: picks the ISA level's kernels (rmsnorm_simd.cpp). Backward computes dx and the
// dw partial sums in one pass over fixed chunks of kTokenChunk tokens, then adds the
// partials to dw in chunk order. Chunk boundaries do not depend on the thread count, so
// dw is bitwise identical for any number of threads.
#include "kernels/cpu/rmsnorm.h"

#include <vector>

#include "kernels/cpu/reduce.h"

namespace lt {

namespace {
constexpr int64_t kTokenChunk = 64;
}  // namespace

void rmsnorm_forward(float* y, float* rstd, const float* x, const float* w, int64_t T, int64_t C,
                     float eps, float w_offset) {
  LT_ISA_PICK(kRmsnormKernels).forward(y, rstd, x, w, T, C, eps, w_offset);
}

void rmsnorm_backward(float* dx, float* dw, const float* dy, const float* x, const float* w,
                      const float* rstd, int64_t T, int64_t C, float w_offset) {
  const int64_t chunks = (T + kTokenChunk - 1) / kTokenChunk;
  std::vector<float> partial(size_t(chunks * C));  // [chunks, C], zeroed
  LT_ISA_PICK(kRmsnormKernels).backward(dx, partial.data(), dy, x, w, rstd, T, C, w_offset, kTokenChunk);
  detail::column_sum_add(dw, partial.data(), chunks, C);  // chunk order: deterministic
}

}  // namespace lt
