// Fill and the fp32 <-> bf16 conversions on the GPU. fp32 -> bf16 rounds to nearest, ties to
// even, and keeps NaN a quiet NaN: core/dtype.h's f32_to_bf16, bit for bit.
// Device pointers; stream is a cudaStream_t (null: the default stream).
#pragma once

#include <cstdint>

namespace lt::cuda {

void fill(float* x, float value, int64_t n, void* stream = nullptr);
void convert_f32_to_bf16(uint16_t* dst, const float* src, int64_t n, void* stream = nullptr);
void convert_bf16_to_f32(float* dst, const uint16_t* src, int64_t n, void* stream = nullptr);

}  // namespace lt::cuda
