// Element types and the bf16 format. bf16 is the top half of an IEEE fp32; conversion
// from fp32 rounds to nearest, ties to even, and keeps NaN a NaN.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace lt {

enum class DType : uint8_t { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL };

size_t dtype_size(DType t);
std::string_view dtype_name(DType t);  // safetensors spelling: "F32", "BF16", ...
// Parses the safetensors spelling; returns false for an unknown name.
bool dtype_from_name(std::string_view name, DType* out);

struct bf16 {
  uint16_t bits = 0;
};
static_assert(sizeof(bf16) == 2);

inline float bf16_to_f32(bf16 h) {
  uint32_t u = static_cast<uint32_t>(h.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Branch-free, so that loops over it vectorize.
inline bf16 f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;  // round to nearest even
  const uint32_t nan = (u >> 16) | 0x40u;                            // NaN stays a quiet NaN
  return bf16{static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded)};
}

// IEEE half, for reading fp16 checkpoints.
float f16_to_f32(uint16_t h);

// Converts n elements of src (of type t: F32, BF16, F16 or F64) to fp32. BF16 is
// vectorized for the ISA level in force (core/dtype_convert.h) and threaded for large n.
void convert_to_f32(float* dst, const void* src, DType t, size_t n);
// Converts n fp32 values to bf16 (f32_to_bf16 on each), vectorized for the ISA level in
// force and threaded for large n.
void convert_f32_to_bf16(bf16* dst, const float* src, size_t n);
// dst[i] = src[i] rounded to bf16 and widened back (bf16_to_f32(f32_to_bf16(src[i]))), in
// one pass: the fp32 operand of a GEMM that computes on bf16 values. dst may be src.
void round_to_bf16_values(float* dst, const float* src, size_t n);

}  // namespace lt
