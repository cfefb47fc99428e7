// bf16 on the device, bit for bit core/dtype.h's: fp32 -> bf16 rounds to nearest, ties to
// even, and keeps NaN a quiet NaN; bf16 -> fp32 is exact. Included by .cu files only.
#pragma once

#include <cstdint>

namespace lt::cuda {

__device__ inline uint16_t f32_to_bf16_bits(float f) {
  const unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

__device__ inline float bf16_bits_to_f32(uint16_t h) { return __uint_as_float(static_cast<unsigned>(h) << 16); }

}  // namespace lt::cuda
