#include "core/dtype.h"

#include "core/dtype_convert.h"
#include "core/error.h"

namespace lt {

namespace {
struct DTypeInfo {
  DType type;
  std::string_view name;
  size_t size;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::F64, "F64", 8}, {DType::F32, "F32", 4}, {DType::F16, "F16", 2},
    {DType::BF16, "BF16", 2}, {DType::I64, "I64", 8}, {DType::I32, "I32", 4},
    {DType::I16, "I16", 2}, {DType::I8, "I8", 1},  {DType::U8, "U8", 1},
    {DType::BOOL, "BOOL", 1},
};
}  // namespace

size_t dtype_size(DType t) {
  for (const auto& d : kDTypes)
    if (d.type == t) return d.size;
  LT_ASSERT(false, "unknown dtype");
}

std::string_view dtype_name(DType t) {
  for (const auto& d : kDTypes)
    if (d.type == t) return d.name;
  LT_ASSERT(false, "unknown dtype");
}

bool dtype_from_name(std::string_view name, DType* out) {
  for (const auto& d : kDTypes)
    if (d.name == name) {
      *out = d.type;
      return true;
    }
  return false;
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: renormalize
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      u = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

void convert_to_f32(float* dst, const void* src, DType t, size_t n) {
  switch (t) {
    case DType::F32:
      std::memcpy(dst, src, n * 4);
      return;
    case DType::BF16:
      LT_ISA_PICK(kDTypeConvertKernels).bf16_to_f32(dst, static_cast<const bf16*>(src), n);
      return;
    case DType::F16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
      return;
    }
    case DType::F64: {
      const double* s = static_cast<const double*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i]);
      return;
    }
    default:
      throw Error("cannot convert " + std::string(dtype_name(t)) + " to F32",
                  "tensor conversion", "floating-point tensors only");
  }
}

void convert_f32_to_bf16(bf16* dst, const float* src, size_t n) {
  LT_ISA_PICK(kDTypeConvertKernels).f32_to_bf16(dst, src, n);
}

void round_to_bf16_values(float* dst, const float* src, size_t n) {
  LT_ISA_PICK(kDTypeConvertKernels).round_to_bf16_values(dst, src, n);
}

}  // namespace lt
