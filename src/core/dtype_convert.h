// The bulk bf16 <-> fp32 conversions behind convert_f32_to_bf16, convert_to_f32's BF16
// case and round_to_bf16_values (core/dtype.h), one table per ISA level, compiled from dtype_convert_simd.cpp and
// picked at run time (core/isa_dispatch.h). Both are exact functions of each element (the
// rounding is dtype.h's f32_to_bf16), so every level gives the same bits; each threads
// over large n.
#pragma once

#include <cstddef>

#include "core/dtype.h"
#include "core/isa_dispatch.h"

namespace lt {

struct DTypeConvertKernels {
  void (*f32_to_bf16)(bf16* dst, const float* src, size_t n);
  void (*bf16_to_f32)(float* dst, const bf16* src, size_t n);
  void (*round_to_bf16_values)(float* dst, const float* src, size_t n);
};
LT_ISA_TABLE(DTypeConvertKernels, kDTypeConvertKernels)

}  // namespace lt
