// bf16 <-> fp32 bulk conversion, compiled once per ISA level (core/isa_target.h): plain
// loops over dtype.h's branch-free conversions, which vectorize to the level's width
// (shifts, adds and a blend; the narrowing to 16 bits is a pack or vpmovdw).
// Memory-bound: threaded only when n is large enough to repay the threads' start-up.
#include "core/dtype_convert.h"

#include "core/isa_target.h"

namespace lt::LT_ISA_NS {

namespace {
constexpr size_t kParallelMin = size_t{1} << 16;  // elements

void f32_to_bf16(bf16* dst, const float* src, size_t n) {
#pragma omp parallel for simd if (n > kParallelMin) schedule(static)
  for (size_t i = 0; i < n; ++i) dst[i] = lt::f32_to_bf16(src[i]);
}

void bf16_to_f32(float* dst, const bf16* src, size_t n) {
#pragma omp parallel for simd if (n > kParallelMin) schedule(static)
  for (size_t i = 0; i < n; ++i) dst[i] = lt::bf16_to_f32(src[i]);
}
void round_to_bf16_values(float* dst, const float* src, size_t n) {
#pragma omp parallel for simd if (n > kParallelMin) schedule(static)
  for (size_t i = 0; i < n; ++i) dst[i] = lt::bf16_to_f32(lt::f32_to_bf16(src[i]));
}
}  // namespace

extern const DTypeConvertKernels kDTypeConvertKernels{f32_to_bf16, bf16_to_f32, round_to_bf16_values};

}  // namespace lt::LT_ISA_NS

#include "core/isa_target_end.h"
